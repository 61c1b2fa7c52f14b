import type { DataSource } from 'typeorm';
import { RateLimitRepository } from '../persistence/rate-limit.repository';
import { DEFAULT_RATE_LIMITS, type RateLimitConfig } from './imaging-client.config';
import { systemClock, WaitBoundExceeded, type Clock, type RateLimiter } from './ports';

const WINDOW_MS = 60_000;
const BUCKET_MS = 1_000;
/** The longest a caller without a deadline of its own waits for budget (a full window, twice). */
export const RATE_LIMIT_MAX_WAIT_MS = 2 * WINDOW_MS;

/**
 * Rate limit shared by every replica that leaves through the same egress address
 * (contract, Limits: per IP and per endpoint), coordinated in PostgreSQL.
 *
 * Sliding window of 1-second buckets: a call may go when the buckets overlapping the last
 * 60 s (61 of them, so the span covered is never shorter than a minute) hold fewer calls
 * than the limit, for its endpoint and for the total. The check and the count happen in one
 * function call under advisory locks on both keys, so two replicas can never both take the
 * last slot, and a call is counted in both budgets or in neither. The database clock is the
 * only clock, so replicas' clock skew does not matter. See docs/imaging-client.md.
 */
export class PgRateLimiter implements RateLimiter {
  private readonly buckets: RateLimitRepository;

  constructor(
    dataSource: DataSource,
    private readonly options: {
      limits?: RateLimitConfig;
      /** Names the shared egress (budget owner); replicas with the same scope share one budget. */
      scope: string;
      clock?: Clock;
      /**
       * Told of every wait for budget before it starts (metrics): a saturated endpoint shows
       * as time spent here, not as refusals upstream.
       */
      onWait?: (endpoint: string, waitMs: number) => void;
    },
  ) {
    this.buckets = new RateLimitRepository(dataSource);
  }

  /** The wait `imaging_rate_limit_acquire` would answer now, read without counting a call. */
  async waitMs(endpoint: string): Promise<number> {
    const limits = this.options.limits ?? DEFAULT_RATE_LIMITS;
    return this.buckets.peekWaitMs({
      keys: this.keys(endpoint),
      caps: [limits.totalPerMinute, limits.perEndpointPerMinute],
      windowMs: WINDOW_MS,
      bucketMs: BUCKET_MS,
    });
  }

  private keys(endpoint: string): string[] {
    return [`${this.options.scope}|total`, `${this.options.scope}|endpoint|${endpoint}`];
  }

  async acquire(endpoint: string, options: { maxWaitMs?: number } = {}): Promise<void> {
    const limits = this.options.limits ?? DEFAULT_RATE_LIMITS;
    const clock = this.options.clock ?? systemClock;
    const keys = this.keys(endpoint);
    const caps = [limits.totalPerMinute, limits.perEndpointPerMinute];
    const bound = Math.max(0, options.maxWaitMs ?? RATE_LIMIT_MAX_WAIT_MS);
    const giveUpAt = clock.now() + bound;
    for (;;) {
      const wait = await this.buckets.tryAcquire({
        keys,
        caps,
        windowMs: WINDOW_MS,
        bucketMs: BUCKET_MS,
      });
      if (wait <= 0) return;
      // A little jitter so replicas that waited for the same bucket do not all return at once.
      const delay = wait + Math.floor(Math.random() * 50);
      // Budget that frees only after the caller's deadline is no budget for this call: it is
      // refused now (and retried by its job) rather than held waiting.
      if (clock.now() + delay > giveUpAt) throw new WaitBoundExceeded('rate-limit budget', bound);
      this.options.onWait?.(endpoint, delay);
      await clock.sleep(delay);
    }
  }
}
