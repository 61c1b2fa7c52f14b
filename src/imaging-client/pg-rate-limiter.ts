import type { DataSource } from 'typeorm';
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
  constructor(
    private readonly dataSource: DataSource,
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
  ) {}

  /** The wait `imaging_rate_limit_acquire` would answer now, read without counting a call. */
  async waitMs(endpoint: string): Promise<number> {
    const limits = this.options.limits ?? DEFAULT_RATE_LIMITS;
    const rows: Array<{ wait_ms: string | number | null }> = await this.dataSource.query(
      `WITH clock AS (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms),
            used AS (
              SELECT b.key, sum(b.count) AS used, min(b.bucket_start_ms) AS oldest
                FROM imaging_rate_limit_buckets b, clock
               WHERE b.key = ANY ($1::text[])
                 AND b.bucket_start_ms >= clock.now_ms - clock.now_ms % $4 - $3
               GROUP BY b.key)
       SELECT max(greatest(used.oldest + $3 + $4 - clock.now_ms, 1)) AS wait_ms
         FROM unnest($1::text[], $2::integer[]) AS l(key, cap)
         JOIN used ON used.key = l.key AND used.used >= l.cap, clock`,
      [
        this.keys(endpoint),
        [limits.totalPerMinute, limits.perEndpointPerMinute],
        WINDOW_MS,
        BUCKET_MS,
      ],
    );
    return Number(rows[0]?.wait_ms ?? 0);
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
      const rows: Array<{ wait_ms: string | number }> = await this.dataSource.query(
        'SELECT imaging_rate_limit_acquire($1::text[], $2::integer[], $3, $4) AS wait_ms',
        [keys, caps, WINDOW_MS, BUCKET_MS],
      );
      const wait = Number(rows[0]?.wait_ms ?? 0);
      if (wait <= 0) return;
      // A little jitter so replicas that waited for the same bucket do not all return at once.
      const delay = wait + Math.floor(Math.random() * 50);
      this.options.onWait?.(endpoint, delay);
      await clock.sleep(delay);
    }
  }
}
