import { hostname } from 'node:os';
import type { Pool } from 'pg';
import type { Logger } from 'pino';
import { deadWorkerJobsUnlocked, supersededJobsDropped } from './job-queue.metrics';

/** Fixed key of the transaction-scoped advisory lock that makes one sweep per cluster per round. */
const DEAD_WORKER_SWEEP_LOCK = 7470302;

/**
 * Worker liveness across replicas. graphile-worker marks a job locked by its worker pool
 * (`locked_by` = the pool's id) and on its own frees the lock only after 4 hours. So every
 * pool records itself in `job_worker_heartbeats` before it takes its first job and renews
 * the row every sixth of `deadAfterMs`; a sweep (every replica, once per cluster per round
 * under an advisory lock) deletes rows older than `deadAfterMs` and unlocks their jobs with
 * `graphile_worker.force_unlock_workers`, so they run again within about that time. A
 * replica sweeps only after its own heartbeats have gone through without a gap for
 * `deadAfterMs`: after a database outage every row is old, and no live pool must lose its
 * jobs to the first replica back (docs/lifecycle.md, "Several replicas").
 */
export class WorkerLiveness {
  /** Our worker pools whose heartbeat row exists (normally one). */
  private readonly pools = new Set<string>();
  private readonly registering = new Map<string, Promise<void>>();
  /** Since when our heartbeats have gone through without a gap (monotonic ms). */
  private healthySince?: number;
  private lastBeatAt?: number;
  private readonly processName = `${hostname()}:${process.pid}`;

  constructor(
    private readonly pool: () => Pool,
    private readonly logger: Logger,
    readonly deadAfterMs: number,
    private readonly stopping: () => boolean,
  ) {}

  get heartbeatMs(): number {
    return Math.max(100, Math.floor(this.deadAfterMs / 6));
  }

  /** Our worker pools' ids (`locked_by` of the jobs they run). */
  get workerIds(): string[] {
    return [...this.pools];
  }

  /** Records a new worker pool before it takes a job; retried until it succeeds or we stop. */
  registerPool(id: string): Promise<void> {
    let pending = this.registering.get(id);
    if (!pending) {
      pending = (async () => {
        for (let attempt = 0; ; attempt++) {
          try {
            await this.pool().query(
              `INSERT INTO job_worker_heartbeats (worker_id, process) VALUES ($1, $2)
                 ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = now()`,
              [id, this.processName],
            );
            this.pools.add(id);
            return;
          } catch (err) {
            if (this.stopping()) throw err;
            if (attempt === 0)
              this.logger.warn(
                { err: (err as Error).message, workerId: id },
                'job worker heartbeat not recorded yet; retrying before taking jobs',
              );
            await new Promise((resolve) => setTimeout(resolve, this.heartbeatMs));
          }
        }
      })();
      this.registering.set(id, pending);
    }
    return pending;
  }

  /**
   * Renews our rows. Resolves true when the beat went through (the database is reachable),
   * false when it did not.
   */
  async beat(): Promise<boolean> {
    const now = performance.now();
    try {
      // Runs even with no pool yet: a beat that went through is what proves we reach the database.
      const ids = this.workerIds;
      const { rows } = await this.pool().query<{ worker_id: string }>(
        `UPDATE job_worker_heartbeats SET heartbeat_at = now() WHERE worker_id = ANY($1::text[]) RETURNING worker_id`,
        [ids],
      );
      const renewed = new Set(rows.map((r) => r.worker_id));
      for (const id of ids.filter((i) => !renewed.has(i))) {
        // Swept as dead while alive (no heartbeat got through for the whole threshold): its
        // jobs were unlocked and may have started again elsewhere. Record it again, say so.
        this.logger.error(
          { workerId: id },
          'this job worker pool was declared dead while it ran (no heartbeat for too long); its running jobs may have been started again elsewhere',
        );
        this.registering.delete(id);
        this.pools.delete(id);
        await this.registerPool(id);
      }
      const done = performance.now();
      if (this.lastBeatAt === undefined || done - this.lastBeatAt > 2 * this.heartbeatMs)
        this.healthySince = now;
      this.lastBeatAt = done;
      return true;
    } catch (err) {
      this.healthySince = undefined;
      this.lastBeatAt = undefined;
      this.logger.warn({ err: (err as Error).message }, 'job worker heartbeat failed');
      return false;
    }
  }

  /** Whether our heartbeats have gone through without a gap for the whole threshold. */
  healthyLongEnough(now = performance.now()): boolean {
    return this.healthySince !== undefined && now - this.healthySince >= this.deadAfterMs;
  }

  /**
   * Unlocks the jobs of worker pools whose heartbeat is older than `deadAfterMs` (once per
   * cluster per round: the others skip while one holds the lock). Returns the dead pools' ids.
   */
  async sweepDeadWorkers(): Promise<string[]> {
    const client = await this.pool().connect();
    try {
      await client.query('BEGIN');
      const { rows: lock } = await client.query<{ ok: boolean }>(
        `SELECT pg_try_advisory_xact_lock($1) AS ok`,
        [DEAD_WORKER_SWEEP_LOCK],
      );
      if (!lock[0]?.ok) {
        await client.query('COMMIT');
        return [];
      }
      const { rows: dead } = await client.query<{ worker_id: string; process: string }>(
        `DELETE FROM job_worker_heartbeats
          WHERE heartbeat_at < now() - $1 * interval '1 millisecond' AND worker_id <> ALL($2::text[])
          RETURNING worker_id, process`,
        [this.deadAfterMs, this.workerIds],
      );
      const ids = dead.map((d) => d.worker_id);
      let jobs = 0;
      if (ids.length > 0) {
        const { rows } = await client.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM graphile_worker._private_jobs WHERE locked_by = ANY($1::text[])`,
          [ids],
        );
        jobs = rows[0]?.n ?? 0;
        // Jobs replaced while the dead pool held them (their key added again: no key left,
        // every attempt marked used, touched after they were locked — graphile-worker does
        // not touch updated_at when it locks a job). Unlocked, they would stay in the table
        // for good as jobs that used up their attempts; their replacement does the work.
        const { rowCount: replaced } = await client.query(
          `DELETE FROM graphile_worker._private_jobs
            WHERE locked_by = ANY($1::text[]) AND key IS NULL AND attempts >= max_attempts
              AND updated_at >= locked_at`,
          [ids],
        );
        if (replaced) supersededJobsDropped.inc({ when: 'dead-worker' }, replaced);
        await client.query(`SELECT graphile_worker.force_unlock_workers($1::text[])`, [ids]);
      }
      await client.query('COMMIT');
      if (ids.length > 0) {
        deadWorkerJobsUnlocked.inc(jobs);
        this.logger.warn(
          { deadWorkers: dead, jobsUnlocked: jobs },
          'jobs of dead job workers unlocked (their process stopped without releasing them)',
        );
      }
      return ids;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }

  /** Stopped cleanly: our pools hold no job any more, so their rows go. */
  async forget(pool: Pool | undefined): Promise<void> {
    const ids = this.workerIds;
    if (ids.length > 0 && pool) {
      await pool
        .query(`DELETE FROM job_worker_heartbeats WHERE worker_id = ANY($1::text[])`, [ids])
        .catch((err: unknown) =>
          this.logger.warn({ err: (err as Error).message }, 'job worker heartbeat not removed'),
        );
    }
    this.pools.clear();
    this.registering.clear();
    this.healthySince = undefined;
    this.lastBeatAt = undefined;
  }
}
