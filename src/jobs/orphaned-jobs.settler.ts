import type { Pool } from 'pg';
import type { Logger } from 'pino';
import { ownJobsSettled, supersededJobsDropped } from './job-queue.metrics';

/** The longest a peer's `Retry-After` delays a job's next run (1 h). */
export const JOB_RETRY_AFTER_MAX_MS = 3_600_000;

/**
 * The `Retry-After` an error carries (`retryAfterMs`, e.g. ImagingClientError), bounded to
 * [0, JOB_RETRY_AFTER_MAX_MS]; undefined when it carries none or not a finite number.
 */
export function retryAfterOf(error: unknown): number | undefined {
  const value = (error as { retryAfterMs?: unknown } | null)?.retryAfterMs;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) return undefined;
  return Math.min(JOB_RETRY_AFTER_MAX_MS, Math.round(value));
}

/** How one of our runs ended; `attempt` is the job's attempt number when it ran. */
interface Outcome {
  ok: boolean;
  attempt: number;
  error?: string;
  at: number;
}

/**
 * How long, and how many, runs' outcomes are remembered for settling their jobs: a lost end
 * is found by the first heartbeat after the database is back, seconds later.
 */
const OUTCOME_MEMORY_MS = 5 * 60_000;
const OUTCOME_MEMORY_MAX = 50_000;

/**
 * A live pool's job can be orphaned by a database outage: graphile-worker writes "job done" /
 * "job failed" without awaiting it or retrying a refused connection, and a job whose lock was
 * taken just as the connection dropped never reaches a worker. Such a job stays locked by a
 * pool that keeps beating, so no sweep frees it. Hence (docs/lifecycle.md, "Database
 * outages") this remembers which of our jobs are running and how our runs ended, and after
 * each heartbeat that went through settles our own locked jobs that no worker of ours runs —
 * completed when the run succeeded (its write was cut mid-way), otherwise released for
 * another attempt with graphile-worker's back-off.
 *
 * A job whose key is added again while it is locked is replaced: graphile-worker adds a new
 * job and marks the locked one as having used every attempt, without its key. When such a
 * replaced run fails — or its failure is settled by us — the old row is dropped rather than
 * left in the table for good as a job that failed its last attempt: the replacement carries
 * the work.
 */
export class OrphanedJobsSettler {
  /** Jobs our workers are running now (graphile-worker job ids). */
  private readonly running = new Set<string>();
  /** How our recent runs ended (job id → outcome), for settling a job whose end was lost. */
  private readonly outcomes = new Map<string, Outcome>();

  constructor(
    private readonly pool: () => Pool,
    private readonly logger: Logger,
  ) {}

  /** Runs one job's handler, remembering that it runs and how it ended. */
  async track(
    id: string,
    attempt: number,
    maxAttempts: number,
    task: string,
    run: () => Promise<void>,
  ): Promise<void> {
    this.running.add(id);
    try {
      await run();
      this.remember(id, { ok: true, attempt, at: performance.now() });
    } catch (err) {
      if (attempt < maxAttempts && (await this.superseded(id))) {
        // Replaced while it ran: its replacement (same job key) does the work, so this
        // run's failure is moot. Ending it as done deletes the row; thrown, it would stay
        // in the table for good as a job that used up every attempt.
        this.logger.info(
          { job: id, task, err: (err as Error)?.message ?? String(err) },
          'a job replaced while it ran failed; its replacement carries the work',
        );
        supersededJobsDropped.inc({ when: 'run' });
        this.remember(id, { ok: true, attempt, at: performance.now() });
        return;
      }
      this.remember(id, {
        ok: false,
        attempt,
        error: (err as Error)?.message ?? String(err),
        at: performance.now(),
      });
      if (attempt < maxAttempts) await this.notBefore(id, retryAfterOf(err));
      throw err;
    } finally {
      this.running.delete(id);
    }
  }

  /**
   * A peer asked us to come back later (`Retry-After` carried by the error): the job's next
   * run is put no sooner than that, bounded by JOB_RETRY_AFTER_MAX_MS. graphile-worker's
   * failure write then adds its own back-off on top (it starts from the later of now and the
   * job's run_at), and the attempt still counts, so a peer that always says "later" cannot
   * keep a job alive for good. Best effort: unreadable or failing, the usual back-off applies.
   */
  private async notBefore(id: string, retryAfterMs: number | undefined): Promise<void> {
    if (retryAfterMs === undefined) return;
    try {
      await this.pool().query(
        `UPDATE graphile_worker._private_jobs
            SET run_at = greatest(run_at, now() + $2 * interval '1 millisecond')
          WHERE id = $1::bigint`,
        [id, retryAfterMs],
      );
    } catch {
      // the usual back-off
    }
  }

  clear(): void {
    this.outcomes.clear();
  }

  /**
   * Whether a job was replaced while locked: graphile-worker cannot update a locked job when
   * a job with its key is added again, so it adds a new one and marks the locked one as
   * having used every attempt, without its key. False when that cannot be read.
   */
  private async superseded(id: string): Promise<boolean> {
    try {
      const { rows } = await this.pool().query(
        `SELECT 1 FROM graphile_worker._private_jobs
          WHERE id = $1::bigint AND key IS NULL AND attempts >= max_attempts`,
        [id],
      );
      return rows.length > 0;
    } catch {
      return false;
    }
  }

  /** Outcomes in the order they happened (a re-run moves to the end); oldest dropped first. */
  private remember(id: string, outcome: Outcome): void {
    this.outcomes.delete(id);
    this.outcomes.set(id, outcome);
    if (this.outcomes.size > OUTCOME_MEMORY_MAX)
      this.outcomes.delete(this.outcomes.keys().next().value!);
  }

  /**
   * Settles jobs locked by our own pools that none of our workers is running (their end
   * was not recorded: the database was unavailable when the run ended, or when the lock was
   * taken): completed when our run succeeded, otherwise released for another attempt after
   * graphile-worker's back-off. A job locked for less than `minLockedMs` is left alone (a
   * worker may be just starting it). A failed run whose job was replaced meanwhile (its key
   * added again) is dropped and counted as completed. Returns how many were completed and
   * released.
   */
  async settle(
    pools: string[],
    minLockedMs: number,
  ): Promise<{ completed: number; released: number }> {
    const now = performance.now();
    for (const [id, o] of this.outcomes) {
      if (now - o.at <= OUTCOME_MEMORY_MS) break;
      this.outcomes.delete(id);
    }
    if (pools.length === 0) return { completed: 0, released: 0 };
    await this.dropReplacedFailures();
    const { rows } = await this.pool().query<{ id: string }>(
      `SELECT id::text AS id FROM graphile_worker._private_jobs
        WHERE locked_by = ANY($1::text[]) AND locked_at < now() - $2 * interval '1 millisecond'`,
      [pools, minLockedMs],
    );
    const orphaned = rows.map((r) => r.id).filter((id) => !this.running.has(id));
    if (orphaned.length === 0) return { completed: 0, released: 0 };
    let succeeded = orphaned.filter((id) => this.outcomes.get(id)?.ok === true);
    let others = orphaned.filter((id) => this.outcomes.get(id)?.ok !== true);
    // A failed run whose job was replaced meanwhile (same key added again while it was
    // locked: no key left, every attempt marked used, though this was not its last attempt):
    // released, it would stay in the table for good as a job that used up its attempts;
    // its replacement does the work, so it is dropped like a completed one. (A lock that
    // never reached a worker has no outcome: whether it was replaced or on its last attempt
    // cannot be told apart, so it is released as before.)
    const failedRuns = others.filter((id) => this.outcomes.has(id));
    let superseded: string[] = [];
    if (failedRuns.length > 0) {
      const { rows: replaced } = await this.pool().query<{ id: string }>(
        `SELECT j.id::text AS id
           FROM unnest($1::bigint[], $2::int[]) AS r(id, attempt)
           JOIN graphile_worker._private_jobs j ON j.id = r.id
          WHERE j.key IS NULL AND j.attempts >= j.max_attempts AND r.attempt < j.max_attempts`,
        [failedRuns, failedRuns.map((id) => this.outcomes.get(id)!.attempt)],
      );
      superseded = replaced.map((r) => r.id);
      succeeded = [...succeeded, ...superseded];
      others = others.filter((id) => !superseded.includes(id));
    }
    const completed = succeeded.length > 0 ? await this.complete(succeeded, pools) : 0;
    const released = others.length > 0 ? await this.release(others, pools) : 0;
    for (const id of orphaned) this.outcomes.delete(id);
    if (completed + released > 0) {
      ownJobsSettled.inc({ outcome: 'completed' }, completed);
      ownJobsSettled.inc({ outcome: 'released' }, released);
      if (superseded.length > 0) supersededJobsDropped.inc({ when: 'settled' }, superseded.length);
      this.logger.warn(
        { completed, released, superseded: superseded.length },
        'jobs of this process whose end could not be recorded were settled (the database was unavailable)',
      );
    }
    return { completed, released };
  }

  /** What graphile-worker's completeJobs does: delete the job, free its queue. */
  private async complete(ids: string[], pools: string[]): Promise<number> {
    const { rows } = await this.pool().query<{ n: number }>(
      `WITH j AS (
         DELETE FROM graphile_worker._private_jobs
          WHERE id = ANY($1::bigint[]) AND locked_by = ANY($2::text[])
         RETURNING id, job_queue_id, locked_by
       ), q AS (
         UPDATE graphile_worker._private_job_queues AS queues SET locked_by = NULL, locked_at = NULL
           FROM j WHERE queues.id = j.job_queue_id AND queues.locked_by = j.locked_by
       )
       SELECT count(*)::int AS n FROM j`,
      [ids, pools],
    );
    return rows[0]?.n ?? 0;
  }

  /** What graphile-worker's failJobs does: record the error, back off, free job and queue. */
  private async release(ids: string[], pools: string[]): Promise<number> {
    const errors = ids.map(
      (id) =>
        this.outcomes.get(id)?.error ??
        'the run could not start or its end could not be recorded (database unavailable)',
    );
    const { rows } = await this.pool().query<{ n: number }>(
      `WITH e AS (
         SELECT * FROM unnest($1::bigint[], $2::text[]) AS e(id, message)
       ), j AS (
         UPDATE graphile_worker._private_jobs AS jobs
            SET last_error = e.message,
                run_at = greatest(now(), jobs.run_at) + (exp(least(jobs.attempts, 10)) * interval '1 second'),
                locked_by = NULL, locked_at = NULL
           FROM e
          WHERE jobs.id = e.id AND jobs.locked_by = ANY($3::text[])
         RETURNING jobs.id, jobs.job_queue_id
       ), q AS (
         UPDATE graphile_worker._private_job_queues AS queues SET locked_by = NULL, locked_at = NULL
           FROM j WHERE queues.id = j.job_queue_id AND queues.locked_by = ANY($3::text[])
       )
       SELECT count(*)::int AS n FROM j`,
      [ids, errors, pools],
    );
    return rows[0]?.n ?? 0;
  }

  /**
   * Drops jobs whose recent run of ours failed (not on its last attempt) and that were
   * replaced before graphile-worker wrote that failure: a run failing while the database is
   * away cannot check for a replacement, and graphile-worker's "failed" write waits for the
   * database, by when the tick may have added the job's key again — the write then leaves a
   * job that used up its attempts, for good.
   */
  private async dropReplacedFailures(): Promise<void> {
    const failed = [...this.outcomes].filter(([, o]) => !o.ok);
    if (failed.length === 0) return;
    const { rows } = await this.pool().query<{ id: string }>(
      `DELETE FROM graphile_worker._private_jobs j
        USING unnest($1::bigint[], $2::int[]) AS r(id, attempt)
        WHERE j.id = r.id AND j.locked_by IS NULL AND j.key IS NULL
          AND j.attempts >= j.max_attempts AND r.attempt < j.max_attempts
        RETURNING j.id::text AS id`,
      [failed.map(([id]) => id), failed.map(([, o]) => o.attempt)],
    );
    if (rows.length === 0) return;
    for (const r of rows) this.outcomes.delete(r.id);
    supersededJobsDropped.inc({ when: 'after-failure' }, rows.length);
    this.logger.warn(
      { superseded: rows.length },
      'jobs replaced while they ran, whose failed run was recorded late, were dropped; their replacements carry the work',
    );
  }
}
