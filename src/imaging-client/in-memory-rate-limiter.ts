import { DEFAULT_RATE_LIMITS, type RateLimitConfig } from './imaging-client.config';
import { systemClock, WaitBoundExceeded, type Clock, type RateLimiter } from './ports';

const WINDOW_MS = 60_000;

/**
 * Sliding-window log, for one process: a call is allowed when fewer than the limit were made
 * in the last 60 s, per endpoint and in all. Exact, so it is never over the limit whichever
 * way the upstream counts its minute. Waiters are served in arrival order.
 *
 * Several replicas behind one egress address must either use the PostgreSQL limiter or
 * give each replica `limit / replicas` via `splitAcrossReplicas`.
 */
export class InMemoryRateLimiter implements RateLimiter {
  private readonly total: number[] = [];
  private readonly perEndpoint = new Map<string, number[]>();
  private tail: Promise<void> = Promise.resolve();

  constructor(
    private readonly limits: RateLimitConfig = DEFAULT_RATE_LIMITS,
    private readonly clock: Clock = systemClock,
  ) {}

  acquire(endpoint: string, options: { maxWaitMs?: number } = {}): Promise<void> {
    const giveUpAt =
      options.maxWaitMs === undefined
        ? Infinity
        : this.clock.now() + Math.max(0, options.maxWaitMs);
    const turn = this.tail.then(() => this.take(endpoint, giveUpAt, options.maxWaitMs ?? 0));
    this.tail = turn.catch(() => undefined);
    return turn;
  }

  waitMs(endpoint: string): Promise<number> {
    const now = this.clock.now();
    const log = this.perEndpoint.get(endpoint) ?? [];
    prune(this.total, now);
    prune(log, now);
    const waits = [0];
    if (this.total.length >= this.limits.totalPerMinute)
      waits.push(this.total[0] + WINDOW_MS - now);
    if (log.length >= this.limits.perEndpointPerMinute) waits.push(log[0] + WINDOW_MS - now);
    return Promise.resolve(Math.max(...waits));
  }

  private async take(endpoint: string, giveUpAt: number, boundMs: number): Promise<void> {
    let log = this.perEndpoint.get(endpoint);
    if (!log) {
      log = [];
      this.perEndpoint.set(endpoint, log);
    }
    for (;;) {
      const now = this.clock.now();
      prune(this.total, now);
      prune(log, now);
      const waits: number[] = [];
      if (this.total.length >= this.limits.totalPerMinute)
        waits.push(this.total[0] + WINDOW_MS - now);
      if (log.length >= this.limits.perEndpointPerMinute) waits.push(log[0] + WINDOW_MS - now);
      if (waits.length === 0) {
        this.total.push(now);
        log.push(now);
        return;
      }
      const delay = Math.max(1, ...waits);
      if (now + delay > giveUpAt) throw new WaitBoundExceeded('rate-limit budget', boundMs);
      await this.clock.sleep(delay);
    }
  }
}

function prune(log: number[], now: number): void {
  // A call at time t counts while now - t < 60 s.
  let drop = 0;
  while (drop < log.length && log[drop] <= now - WINDOW_MS) drop++;
  if (drop) log.splice(0, drop);
}

/** Each of `replicas` processes gets an equal share (rounded down) of the shared budget. */
export function splitAcrossReplicas(limits: RateLimitConfig, replicas: number): RateLimitConfig {
  const n = Math.max(1, Math.floor(replicas));
  return {
    perEndpointPerMinute: Math.max(1, Math.floor(limits.perEndpointPerMinute / n)),
    totalPerMinute: Math.max(1, Math.floor(limits.totalPerMinute / n)),
  };
}
