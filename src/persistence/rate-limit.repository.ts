import { RepositoryBase } from './repository-base';

/**
 * SQL of the shared upstream rate limit (imaging_rate_limit_buckets, 1-second buckets per
 * key): imaging-client/pg-rate-limiter.ts decides the keys, caps and waits.
 */
export interface RateLimitWindow {
  /** One key per budget (total, endpoint), each with its cap. */
  keys: readonly string[];
  caps: readonly number[];
  windowMs: number;
  bucketMs: number;
}

export class RateLimitRepository extends RepositoryBase {
  /** The wait `imaging_rate_limit_acquire` would answer now, read without counting a call. */
  async peekWaitMs(w: RateLimitWindow): Promise<number> {
    const rows: Array<{ wait_ms: string | number | null }> = await this.db().query(
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
      [w.keys, w.caps, w.windowMs, w.bucketMs],
    );
    return Number(rows[0]?.wait_ms ?? 0);
  }

  /**
   * Counts a call in every key's budget when all have room (one function call under advisory
   * locks): 0 when counted, else how long to wait.
   */
  async tryAcquire(w: RateLimitWindow): Promise<number> {
    const rows: Array<{ wait_ms: string | number }> = await this.db().query(
      'SELECT imaging_rate_limit_acquire($1::text[], $2::integer[], $3, $4) AS wait_ms',
      [w.keys, w.caps, w.windowMs, w.bucketMs],
    );
    return Number(rows[0]?.wait_ms ?? 0);
  }
}
