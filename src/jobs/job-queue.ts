import { hostname } from 'node:os';
import { Pool } from 'pg';
import { Counter } from 'prom-client';
import type { EntityManager } from 'typeorm';
import {
  Logger as GraphileLogger,
  parseCronItems,
  run,
  runMigrations,
  type CronItem,
  type JobHelpers,
  type Runner,
  type TaskList,
} from 'graphile-worker';
import type { Logger } from 'pino';
import { metricsRegistry } from '../observability/metrics';
import { withMigrationLock } from '../persistence/migrator';
import { WaitingPool } from './waiting-pool';

/**
 * The PostgreSQL-backed job queue every replica shares (graphile-worker). Jobs enqueued
 * inside our own transaction (`manager`) go to the `job_outbox` table (a plain insert: the
 * job exists exactly when the row that caused it was committed) and a relay moves them into
 * graphile-worker in batches, so that hot paths pay no NOTIFY (see the job-outbox
 * migration). The relay runs when kicked after a commit and every second in every replica,
 * so rows left by a crash are moved by whoever is alive. Cron items fire once per cluster
 * (graphile-worker records each fired slot in the database), not once per replica.
 *
 * A killed process's running jobs: graphile-worker marks a job locked by its worker pool
 * (`locked_by` = the pool's id) and on its own frees the lock only after 4 hours. So every
 * pool records itself in `job_worker_heartbeats` before it takes its first job and renews
 * the row every sixth of `deadWorkerAfterMs`; a sweep (every replica, once per cluster per
 * round under an advisory lock) deletes rows older than `deadWorkerAfterMs` and unlocks
 * their jobs with `graphile_worker.force_unlock_workers`, so they run again within about
 * that time. A replica sweeps only after its own heartbeats have gone through without a gap
 * for `deadWorkerAfterMs`: after a database outage every row is old, and no live pool must
 * lose its jobs to the first replica back (docs/lifecycle.md, "Several replicas").
 *
 * A live pool's job can be orphaned too, by a database outage: graphile-worker writes "job
 * done" / "job failed" without awaiting it or retrying a refused connection, and a job whose
 * lock was taken just as the connection dropped never reaches a worker. Such a job stays
 * locked by a pool that keeps beating, so no sweep frees it. Hence (docs/lifecycle.md,
 * "Database outages"): graphile-worker's connections wait for an unreachable database
 * (`WaitingPool`), so those writes go through once it is back; and each pool remembers which
 * of its jobs are running and how its runs ended, and after each heartbeat that went through
 * settles its own locked jobs that no worker of it runs — completed when the run succeeded
 * (its write was cut mid-way), otherwise released for another attempt with graphile-worker's
 * back-off.
 *
 * A job whose key is added again while it is locked is replaced: graphile-worker adds a new
 * job and marks the locked one as having used every attempt, without its key (the lifecycle
 * tick does this for an upload whose lease lapsed while its run was orphaned by an outage).
 * When such a replaced run fails — or its failure is settled by us — the old row is dropped
 * rather than left in the table for good as a job that failed its last attempt: the
 * replacement carries the work.
 */
export type JobHandler = (payload: unknown, helpers: JobHelpers) => Promise<void>;

/** How one of our runs ended; `attempt` is the job's attempt number when it ran. */
interface Outcome {
  ok: boolean;
  attempt: number;
  error?: string;
  at: number;
}

export interface EnqueueOptions {
  /** Enqueue inside this transaction. */
  manager?: EntityManager;
  runAt?: Date;
  /** De-duplicates pending jobs: a second add with the same key replaces the first. */
  jobKey?: string;
  /** Jobs in one named queue run one at a time, in order. */
  queue?: string;
  maxAttempts?: number;
}

export interface JobQueueOptions {
  url: string;
  concurrency: number;
  logger: Logger;
  pollIntervalMs?: number;
  /** How often every replica sweeps the job outbox (default 1000 ms). */
  relayIntervalMs?: number;
  /** How long a kick waits to gather more rows into one relay (default 50 ms: each relay has a
   * fixed cost of about a millisecond in add_jobs, paid 20 times a second instead of 50). */
  relayDelayMs?: number;
  /**
   * A worker pool whose heartbeat is older than this is dead and its jobs are unlocked
   * (default 30 s; heartbeats and sweeps every sixth of it).
   */
  deadWorkerAfterMs?: number;
}

/** Jobs unlocked because the pool that held them stopped beating (a killed process). */
const deadWorkerJobsUnlocked = new Counter({
  name: 'adapter_jobs_unlocked_from_dead_workers_total',
  help: 'Jobs freed for another run because the worker pool that held them stopped its heartbeat',
  registers: [metricsRegistry],
});

/** Our own jobs whose end graphile-worker could not record (database away), settled by us. */
const ownJobsSettled = new Counter({
  name: 'adapter_jobs_settled_after_lost_end_total',
  help: 'Jobs of a live worker pool left locked because their completion or failure could not be written (database unavailable), then completed or released by that pool',
  labelNames: ['outcome'] as const,
  registers: [metricsRegistry],
});

/**
 * Jobs replaced (same job key added again) while one of our runs held them, whose run then
 * failed or whose end was lost: dropped instead of left as a job that used up its attempts.
 */
const supersededJobsDropped = new Counter({
  name: 'adapter_jobs_superseded_dropped_total',
  help: 'Jobs replaced by a newer job with the same key while they ran, whose failed run was dropped instead of being left as permanently failed',
  labelNames: ['when'] as const,
  registers: [metricsRegistry],
});

/** How long graphile-worker's connections wait for an unreachable database (ms). */
const WORKER_POOL_MAX_WAIT_MS = 120_000;

/**
 * How long, and how many, runs' outcomes are remembered for settling their jobs: a lost end
 * is found by the first heartbeat after the database is back, seconds later.
 */
const OUTCOME_MEMORY_MS = 5 * 60_000;
const OUTCOME_MEMORY_MAX = 50_000;

/** Fixed key of the transaction-scoped advisory lock that makes one sweep per cluster per round. */
const DEAD_WORKER_SWEEP_LOCK = 7470302;

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

export class JobQueue {
  private readonly tasks: TaskList = {};
  private readonly cron: CronItem[] = [];
  /** Our own queries: relay, heartbeats, sweeps, enqueue (fail fast when the database is away). */
  private pool?: Pool;
  /** graphile-worker's: waits for the database rather than lose a "job done" write. */
  private workerPool?: WaitingPool;
  private runner?: Runner;
  private relayTimer?: NodeJS.Timeout;
  private relaying?: Promise<void>;
  private relayAgain = false;
  private relayScheduled?: NodeJS.Timeout;
  /** Our worker pools whose heartbeat row exists (normally one). */
  private readonly pools = new Set<string>();
  private readonly registering = new Map<string, Promise<void>>();
  private heartbeatTimer?: NodeJS.Timeout;
  private beating?: Promise<void>;
  /** Since when our heartbeats have gone through without a gap (monotonic ms). */
  private healthySince?: number;
  private lastBeatAt?: number;
  private stopping = false;
  /** Jobs our workers are running now (graphile-worker job ids). */
  private readonly running = new Set<string>();
  /** How our recent runs ended (job id → outcome), for settling a job whose end was lost. */
  private readonly outcomes = new Map<string, Outcome>();
  private readonly processName = `${hostname()}:${process.pid}`;

  constructor(private readonly options: JobQueueOptions) {}

  private get deadAfterMs(): number {
    return this.options.deadWorkerAfterMs ?? 30_000;
  }

  private get heartbeatMs(): number {
    return Math.max(100, Math.floor(this.deadAfterMs / 6));
  }

  registerTask(name: string, handler: JobHandler): void {
    if (this.runner) throw new Error(`task ${name} registered after the job queue started`);
    if (this.tasks[name]) throw new Error(`task ${name} registered twice`);
    this.tasks[name] = async (payload, helpers) => {
      const id = String(helpers.job.id);
      const attempt = helpers.job.attempts;
      this.running.add(id);
      try {
        await handler(payload, helpers);
        this.remember(id, { ok: true, attempt, at: performance.now() });
      } catch (err) {
        if (attempt < helpers.job.max_attempts && (await this.superseded(id))) {
          // Replaced while it ran: its replacement (same job key) does the work, so this
          // run's failure is moot. Ending it as done deletes the row; thrown, it would stay
          // in the table for good as a job that used up every attempt.
          this.options.logger.info(
            { job: id, task: name, err: (err as Error)?.message ?? String(err) },
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
        throw err;
      } finally {
        this.running.delete(id);
      }
    };
  }

  /**
   * Whether a job was replaced while locked: graphile-worker cannot update a locked job when
   * a job with its key is added again, so it adds a new one and marks the locked one as
   * having used every attempt, without its key. False when that cannot be read.
   */
  private async superseded(id: string): Promise<boolean> {
    try {
      const { rows } = await this.ensurePool().query(
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

  /** `pattern` is crontab syntax (UTC); the task gets `{ _cron: { ts, backfilled } }`. */
  registerCron(pattern: string, task: string, identifier = task): void {
    this.cron.push({ match: pattern, task, identifier, options: { backfillPeriod: 0 } });
  }

  /** Installs graphile-worker's schema (under the same advisory lock as our migrations). */
  async migrate(): Promise<void> {
    const pool = this.ensurePool();
    await withMigrationLock(this.options.url, () =>
      runMigrations({ pgPool: pool, logger: this.gwLogger() }),
    );
  }

  async start(): Promise<void> {
    this.stopping = false;
    this.workerPool = this.withErrorLog(
      new WaitingPool(
        {
          connectionString: this.options.url,
          max: this.options.concurrency + 2,
          application_name: 'imaging-ai-adapter-jobs',
        },
        () => !this.stopping,
        WORKER_POOL_MAX_WAIT_MS,
      ),
    );
    this.runner = await run({
      pgPool: this.workerPool,
      preset: {
        plugins: [
          {
            name: 'ImagingAdapterWorkerHeartbeat',
            version: '1.0.0',
            // Awaited by each worker before its first job: no job is ever locked by a pool
            // that has no heartbeat row.
            worker: {
              hooks: {
                startWorker: (_ctx, event) => this.registerPool(event.worker.workerPool.id),
              },
            },
          },
        ],
      },
      taskList: this.tasks,
      parsedCronItems: parseCronItems(this.cron),
      concurrency: this.options.concurrency,
      noHandleSignals: true,
      pollInterval: this.options.pollIntervalMs ?? 1000,
      logger: this.gwLogger(),
    });
    this.relayTimer = setInterval(() => this.kick(), this.options.relayIntervalMs ?? 1000);
    this.relayTimer.unref();
    this.kick();
    this.heartbeatTimer = setInterval(() => {
      if (this.beating) return;
      this.beating = this.heartbeat().finally(() => (this.beating = undefined));
    }, this.heartbeatMs);
    this.heartbeatTimer.unref();
  }

  /** Our worker pools' ids (`locked_by` of the jobs they run). */
  get workerIds(): string[] {
    return [...this.pools];
  }

  /** Records a new worker pool before it takes a job; retried until it succeeds or we stop. */
  private registerPool(id: string): Promise<void> {
    let pending = this.registering.get(id);
    if (!pending) {
      pending = (async () => {
        for (let attempt = 0; ; attempt++) {
          try {
            await this.ensurePool().query(
              `INSERT INTO job_worker_heartbeats (worker_id, process) VALUES ($1, $2)
                 ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = now()`,
              [id, this.processName],
            );
            this.pools.add(id);
            return;
          } catch (err) {
            if (this.stopping) throw err;
            if (attempt === 0)
              this.options.logger.warn(
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

  /** Renews our rows, then sweeps dead pools' jobs if we have been healthy long enough. */
  private async heartbeat(): Promise<void> {
    const now = performance.now();
    try {
      // Runs even with no pool yet: a beat that went through is what proves we reach the database.
      const ids = this.workerIds;
      const { rows } = await this.ensurePool().query<{ worker_id: string }>(
        `UPDATE job_worker_heartbeats SET heartbeat_at = now() WHERE worker_id = ANY($1::text[]) RETURNING worker_id`,
        [ids],
      );
      const renewed = new Set(rows.map((r) => r.worker_id));
      for (const id of ids.filter((i) => !renewed.has(i))) {
        // Swept as dead while alive (no heartbeat got through for the whole threshold): its
        // jobs were unlocked and may have started again elsewhere. Record it again, say so.
        this.options.logger.error(
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
    } catch (err) {
      this.healthySince = undefined;
      this.lastBeatAt = undefined;
      this.options.logger.warn({ err: (err as Error).message }, 'job worker heartbeat failed');
      return;
    }
    await this.settleOwnOrphanedJobs().catch((err: unknown) =>
      this.options.logger.warn(
        { err: (err as Error).message },
        'settling our own orphaned jobs failed',
      ),
    );
    if (this.healthySince !== undefined && now - this.healthySince >= this.deadAfterMs) {
      await this.sweepDeadWorkers().catch((err: unknown) =>
        this.options.logger.warn({ err: (err as Error).message }, 'dead job worker sweep failed'),
      );
    }
  }

  /**
   * Settles jobs locked by our own pools that none of our workers is running (their end
   * was not recorded: the database was unavailable when the run ended, or when the lock was
   * taken): completed when our run succeeded, otherwise released for another attempt after
   * graphile-worker's back-off. A job locked for less than a heartbeat interval is left
   * alone (a worker may be just starting it). A failed run whose job was replaced meanwhile
   * (its key added again) is dropped and counted as completed. Returns how many were
   * completed and released.
   */
  async settleOwnOrphanedJobs(): Promise<{ completed: number; released: number }> {
    const now = performance.now();
    for (const [id, o] of this.outcomes) {
      if (now - o.at <= OUTCOME_MEMORY_MS) break;
      this.outcomes.delete(id);
    }
    const pools = this.workerIds;
    if (pools.length === 0) return { completed: 0, released: 0 };
    await this.dropReplacedFailures();
    const { rows } = await this.ensurePool().query<{ id: string }>(
      `SELECT id::text AS id FROM graphile_worker._private_jobs
        WHERE locked_by = ANY($1::text[]) AND locked_at < now() - $2 * interval '1 millisecond'`,
      [pools, this.heartbeatMs],
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
      const { rows: replaced } = await this.ensurePool().query<{ id: string }>(
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
    let completed = 0;
    let released = 0;
    if (succeeded.length > 0) {
      // What graphile-worker's completeJobs does: delete the job, free its queue.
      const { rows: done } = await this.ensurePool().query<{ n: number }>(
        `WITH j AS (
           DELETE FROM graphile_worker._private_jobs
            WHERE id = ANY($1::bigint[]) AND locked_by = ANY($2::text[])
           RETURNING id, job_queue_id, locked_by
         ), q AS (
           UPDATE graphile_worker._private_job_queues AS queues SET locked_by = NULL, locked_at = NULL
             FROM j WHERE queues.id = j.job_queue_id AND queues.locked_by = j.locked_by
         )
         SELECT count(*)::int AS n FROM j`,
        [succeeded, pools],
      );
      completed = done[0]?.n ?? 0;
    }
    if (others.length > 0) {
      // What graphile-worker's failJobs does: record the error, back off, free job and queue.
      const errors = others.map(
        (id) =>
          this.outcomes.get(id)?.error ??
          'the run could not start or its end could not be recorded (database unavailable)',
      );
      const { rows: freed } = await this.ensurePool().query<{ n: number }>(
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
        [others, errors, pools],
      );
      released = freed[0]?.n ?? 0;
    }
    for (const id of orphaned) this.outcomes.delete(id);
    if (completed + released > 0) {
      ownJobsSettled.inc({ outcome: 'completed' }, completed);
      ownJobsSettled.inc({ outcome: 'released' }, released);
      if (superseded.length > 0) supersededJobsDropped.inc({ when: 'settled' }, superseded.length);
      this.options.logger.warn(
        { completed, released, superseded: superseded.length },
        'jobs of this process whose end could not be recorded were settled (the database was unavailable)',
      );
    }
    return { completed, released };
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
    const { rows } = await this.ensurePool().query<{ id: string }>(
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
    this.options.logger.warn(
      { superseded: rows.length },
      'jobs replaced while they ran, whose failed run was recorded late, were dropped; their replacements carry the work',
    );
  }

  /**
   * Unlocks the jobs of worker pools whose heartbeat is older than `deadWorkerAfterMs`
   * (once per cluster per round: the others skip while one holds the lock). Returns the
   * dead pools' ids.
   */
  async sweepDeadWorkers(): Promise<string[]> {
    const client = await this.ensurePool().connect();
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
        this.options.logger.warn(
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

  /**
   * Moves committed outbox rows into the queue soon (call after committing a transaction
   * that enqueued jobs). Kicks within `relayDelayMs` are coalesced into one relay, so a busy
   * front door pays one relay transaction (one fsync, one NOTIFY) per batch, not per
   * message. Never throws: a failed relay is retried by the next kick or sweep.
   */
  kick(): void {
    if (this.relaying || this.relayScheduled) {
      this.relayAgain = true;
      return;
    }
    this.relayScheduled = setTimeout(() => {
      this.relayScheduled = undefined;
      this.relaying = this.relay()
        .then(() => undefined)
        .catch((err: unknown) =>
          this.options.logger.warn({ err: (err as Error).message }, 'job outbox relay failed'),
        )
        .finally(() => {
          this.relaying = undefined;
          if (this.relayAgain) {
            this.relayAgain = false;
            this.kick();
          }
        });
    }, this.options.relayDelayMs ?? 50);
  }

  /** Drains the job outbox; resolves with the number of rows moved. */
  async relay(): Promise<number> {
    let total = 0;
    for (;;) {
      const { rows } = await this.ensurePool().query<{ moved: number }>(RELAY_SQL);
      const moved = rows[0]?.moved ?? 0;
      total += moved;
      if (moved < 500) return total;
    }
  }

  /**
   * With `manager`: written to the job outbox on that transaction (call kick() after the
   * commit). Without: added to the queue at once.
   */
  async enqueue(task: string, payload: unknown, options: EnqueueOptions = {}): Promise<void> {
    const params = [
      task,
      JSON.stringify(payload ?? {}),
      options.queue ?? null,
      options.runAt?.toISOString() ?? null,
      options.maxAttempts ?? 25,
      options.jobKey ?? null,
    ];
    if (options.manager) {
      await options.manager.query(
        `INSERT INTO job_outbox (task, payload, queue_name, run_at, max_attempts, job_key) VALUES ($1, $2::jsonb, $3, $4::timestamptz, $5, $6)`,
        params,
      );
    } else {
      await this.ensurePool().query(
        `SELECT graphile_worker.add_job($1::text, $2::json, queue_name => $3::text, run_at => $4::timestamptz, max_attempts => $5::int, job_key => $6::text)`,
        params,
      );
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = undefined;
    await this.beating;
    if (this.relayTimer) clearInterval(this.relayTimer);
    this.relayTimer = undefined;
    if (this.relayScheduled) clearTimeout(this.relayScheduled);
    this.relayScheduled = undefined;
    await this.relaying;
    const runner = this.runner;
    this.runner = undefined;
    if (runner) await runner.stop();
    const workerPool = this.workerPool;
    this.workerPool = undefined;
    if (workerPool) await workerPool.end();
    // Stopped cleanly: our pools hold no job any more.
    const ids = this.workerIds;
    if (ids.length > 0 && this.pool) {
      await this.pool
        .query(`DELETE FROM job_worker_heartbeats WHERE worker_id = ANY($1::text[])`, [ids])
        .catch((err: unknown) =>
          this.options.logger.warn(
            { err: (err as Error).message },
            'job worker heartbeat not removed',
          ),
        );
    }
    this.pools.clear();
    this.registering.clear();
    this.outcomes.clear();
    this.healthySince = undefined;
    this.lastBeatAt = undefined;
    const pool = this.pool;
    this.pool = undefined;
    if (pool) await pool.end();
  }

  private ensurePool(): Pool {
    if (!this.pool) {
      this.pool = this.withErrorLog(
        new Pool({
          connectionString: this.options.url,
          max: 4,
          application_name: 'imaging-ai-adapter-jobs',
        }),
      );
    }
    return this.pool;
  }

  /**
   * Idle and checked-out clients can both emit errors (e.g. the database restarts): log
   * them instead of letting an unhandled 'error' event end the process.
   */
  private withErrorLog<P extends Pool>(pool: P): P {
    const onError = (err: Error) =>
      this.options.logger.warn({ err: err.message }, 'job queue connection error');
    pool.on('error', onError);
    pool.on('connect', (client) => client.on('error', onError));
    return pool;
  }

  private gwLogger() {
    // graphile-worker's Logger interface, bridged to pino without its scope's payloads.
    const log = this.options.logger;
    return new GraphileLogger(() => (level: string, message: string) => {
      const fn = level === 'error' ? 'error' : level === 'warning' ? 'warn' : 'debug';
      log[fn]({ component: 'jobs' }, message);
    });
  }
}
