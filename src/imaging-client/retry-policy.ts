import type { RetryConfig } from './imaging-client.config';

/**
 * Exponential backoff with "full jitter": the wait before retry n is uniform in
 * [0, min(cap, base * 2^(n-1))], so many callers that failed together do not retry in
 * lockstep. A server's `Retry-After` is a floor: we never come back sooner than asked.
 */
export function backoffDelayMs(
  retryNumber: number,
  config: Pick<RetryConfig, 'baseDelayMs' | 'maxDelayMs'>,
  retryAfterMs: number | undefined,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(
    config.maxDelayMs,
    config.baseDelayMs * 2 ** Math.max(0, retryNumber - 1),
  );
  const jittered = Math.floor(random() * ceiling);
  return retryAfterMs === undefined ? jittered : Math.max(retryAfterMs, jittered);
}

/** Statuses worth another attempt unchanged (contract, Errors: 429 and 5xx). */
export function isRetryableStatus(status: number): boolean {
  return status === 429 || (status >= 500 && status <= 599);
}
