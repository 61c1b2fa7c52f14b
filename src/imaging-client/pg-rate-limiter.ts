import type { DataSource } from 'typeorm';
import { RateLimitRepository } from '../persistence/rate-limit.repository';
import { DEFAULT_RATE_LIMITS, type RateLimitConfig } from './imaging-client.config';
import { systemClock, type Clock, type RateLimiter } from './ports';

const WINDOW_MS = 60_000;
const BUCKET_MS = 1_000;

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

  async acquire(endpoint: string): Promise<void> {
    const limits = this.options.limits ?? DEFAULT_RATE_LIMITS;
    const clock = this.options.clock ?? systemClock;
    const keys = this.keys(endpoint);
    const caps = [limits.totalPerMinute, limits.perEndpointPerMinute];
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
      this.options.onWait?.(endpoint, delay);
      await clock.sleep(delay);
    }
  }
}
