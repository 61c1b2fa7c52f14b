import type { Pool } from 'pg';
import type { Logger } from 'pino';

/** Moves up to 500 outbox rows into graphile-worker in one transaction (one NOTIFY). */
const RELAY_SQL = `
  WITH moved AS (
    DELETE FROM job_outbox
     -- = ANY(ARRAY(...)): an index probe per row; IN (...) let the planner, misled by stale
     -- statistics of this churning table, scan every dead row left since the last vacuum
     WHERE id = ANY (ARRAY(SELECT id FROM job_outbox ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED))
    RETURNING *
  ), latest AS (
    -- add_jobs cannot take one job key twice: keep the newest row per key
    SELECT DISTINCT ON (coalesce(job_key, 'id:' || id)) *
      FROM moved ORDER BY coalesce(job_key, 'id:' || id), id DESC
  ), added AS (
    SELECT graphile_worker.add_jobs(
             array_agg(ROW(task, payload::json, queue_name, run_at, max_attempts, job_key, NULL, NULL)::graphile_worker.job_spec ORDER BY id)
           ) AS job
      FROM latest HAVING count(*) > 0
  )
  SELECT (SELECT count(*) FROM moved)::int AS moved, (SELECT count(*) FROM added)::int AS added`;

export interface JobOutboxRelayOptions {
  /** How often every replica sweeps the job outbox (default 1000 ms). */
  intervalMs?: number;
  /** How long a kick waits to gather more rows into one relay (default 50 ms). */
  delayMs?: number;
}

/**
 * Moves committed `job_outbox` rows (jobs enqueued inside our own transactions) into
 * graphile-worker in batches, so that hot paths pay no NOTIFY. It runs when kicked after a
 * commit and every second in every replica, so rows left by a crash are moved by whoever is
 * alive (see the job-outbox migration).
 */
export class JobOutboxRelay {
  private timer?: NodeJS.Timeout;
  private relaying?: Promise<void>;
  private again = false;
  private scheduled?: NodeJS.Timeout;
  private stopped = false;

  constructor(
    private readonly pool: () => Pool,
    private readonly logger: Logger,
    private readonly options: JobOutboxRelayOptions = {},
  ) {}

  start(): void {
    this.stopped = false;
    this.timer = setInterval(() => this.kick(), this.options.intervalMs ?? 1000);
    this.timer.unref();
    this.kick();
  }

  /** Stops the timers and waits for a relay in progress. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (this.scheduled) clearTimeout(this.scheduled);
    this.scheduled = undefined;
    await this.relaying;
  }

  /**
   * Moves committed outbox rows into the queue soon. Kicks within `delayMs` are coalesced
   * into one relay, so a busy front door pays one relay transaction (one fsync, one NOTIFY)
   * per batch, not per message: each relay has a fixed cost of about a millisecond in
   * add_jobs, paid 20 times a second instead of 50. Never throws: a failed relay is retried
   * by the next kick or sweep.
   */
  kick(): void {
    if (this.stopped) return;
    if (this.relaying || this.scheduled) {
      this.again = true;
      return;
    }
    this.scheduled = setTimeout(() => {
      this.scheduled = undefined;
      this.relaying = this.relay()
        .then(() => undefined)
        .catch((err: unknown) =>
          this.logger.warn({ err: (err as Error).message }, 'job outbox relay failed'),
        )
        .finally(() => {
          this.relaying = undefined;
          if (this.again) {
            this.again = false;
            this.kick();
          }
        });
    }, this.options.delayMs ?? 50);
  }

  /** Drains the job outbox; resolves with the number of rows moved. */
  async relay(): Promise<number> {
    let total = 0;
    for (;;) {
      const { rows } = await this.pool().query<{ moved: number }>(RELAY_SQL);
      const moved = rows[0]?.moved ?? 0;
      total += moved;
      if (moved < 500) return total;
    }
  }
}
