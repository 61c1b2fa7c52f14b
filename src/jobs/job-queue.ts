import { Pool } from 'pg';
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
import { withSchemaLock } from '../common/schema-lock';
import { JobOutboxRelay } from './job-outbox.relay';
import { OrphanedJobsSettler } from './orphaned-jobs.settler';
import { WaitingPool } from './waiting-pool';
import { WorkerLiveness } from './worker-liveness';

/**
 * The PostgreSQL-backed job queue every replica shares (graphile-worker). Jobs enqueued
 * inside our own transaction (`manager`) go to the `job_outbox` table (a plain insert: the
 * job exists exactly when the row that caused it was committed) and `JobOutboxRelay` moves
 * them into graphile-worker in batches. Cron items fire once per cluster (graphile-worker
 * records each fired slot in the database), not once per replica.
 *
 * A killed process's running jobs are freed by `WorkerLiveness` (heartbeats and a sweep of
 * dead pools); a live pool's jobs orphaned by a database outage are settled by
 * `OrphanedJobsSettler` after each heartbeat that went through. graphile-worker's own
 * connections wait for an unreachable database (`WaitingPool`), so its "job done" writes go
 * through once it is back (docs/lifecycle.md, "Several replicas" and "Database outages").
 */
export type JobHandler = (payload: unknown, helpers: JobHelpers) => Promise<void>;

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

/** How long graphile-worker's connections wait for an unreachable database (ms). */
const WORKER_POOL_MAX_WAIT_MS = 120_000;

export class JobQueue {
  private readonly tasks: TaskList = {};
  private readonly cron: CronItem[] = [];
  /** Our own queries: relay, heartbeats, sweeps, enqueue (fail fast when the database is away). */
  private pool?: Pool;
  /** graphile-worker's: waits for the database rather than lose a "job done" write. */
  private workerPool?: WaitingPool;
  private runner?: Runner;
  private heartbeatTimer?: NodeJS.Timeout;
  private beating?: Promise<void>;
  private stopping = false;
  private readonly relayer: JobOutboxRelay;
  private readonly liveness: WorkerLiveness;
  private readonly settler: OrphanedJobsSettler;

  constructor(private readonly options: JobQueueOptions) {
    const pool = () => this.ensurePool();
    this.relayer = new JobOutboxRelay(pool, options.logger, {
      intervalMs: options.relayIntervalMs,
      delayMs: options.relayDelayMs,
    });
    this.liveness = new WorkerLiveness(
      pool,
      options.logger,
      options.deadWorkerAfterMs ?? 30_000,
      () => this.stopping,
    );
    this.settler = new OrphanedJobsSettler(pool, options.logger);
  }

  registerTask(name: string, handler: JobHandler): void {
    if (this.runner) throw new Error(`task ${name} registered after the job queue started`);
    if (this.tasks[name]) throw new Error(`task ${name} registered twice`);
    this.tasks[name] = (payload, helpers) =>
      this.settler.track(
        String(helpers.job.id),
        helpers.job.attempts,
        helpers.job.max_attempts,
        name,
        () => handler(payload, helpers),
      );
  }

  /** `pattern` is crontab syntax (UTC); the task gets `{ _cron: { ts, backfilled } }`. */
  registerCron(pattern: string, task: string, identifier = task): void {
    this.cron.push({ match: pattern, task, identifier, options: { backfillPeriod: 0 } });
  }

  /** Installs graphile-worker's schema (under the same advisory lock as our migrations). */
  async migrate(): Promise<void> {
    const pool = this.ensurePool();
    await withSchemaLock(this.options.url, () =>
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
                startWorker: (_ctx, event) =>
                  this.liveness.registerPool(event.worker.workerPool.id),
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
    this.relayer.start();
    this.heartbeatTimer = setInterval(() => {
      if (this.beating) return;
      this.beating = this.heartbeat().finally(() => (this.beating = undefined));
    }, this.liveness.heartbeatMs);
    this.heartbeatTimer.unref();
  }

  /** Our worker pools' ids (`locked_by` of the jobs they run). */
  get workerIds(): string[] {
    return this.liveness.workerIds;
  }

  /** Renews our rows, settles our orphaned jobs, then sweeps dead pools' jobs if we have been healthy long enough. */
  private async heartbeat(): Promise<void> {
    const now = performance.now();
    if (!(await this.liveness.beat())) return;
    await this.settleOwnOrphanedJobs().catch((err: unknown) =>
      this.options.logger.warn(
        { err: (err as Error).message },
        'settling our own orphaned jobs failed',
      ),
    );
    if (this.liveness.healthyLongEnough(now)) {
      await this.sweepDeadWorkers().catch((err: unknown) =>
        this.options.logger.warn({ err: (err as Error).message }, 'dead job worker sweep failed'),
      );
    }
  }

  /** See `OrphanedJobsSettler.settle`: our locked jobs no worker of ours runs. */
  settleOwnOrphanedJobs(): Promise<{ completed: number; released: number }> {
    return this.settler.settle(this.workerIds, this.liveness.heartbeatMs);
  }

  /** See `WorkerLiveness.sweepDeadWorkers`: unlocks dead pools' jobs; returns their ids. */
  sweepDeadWorkers(): Promise<string[]> {
    return this.liveness.sweepDeadWorkers();
  }

  /**
   * Moves committed outbox rows into the queue soon (call after committing a transaction
   * that enqueued jobs); coalesced, never throws.
   */
  kick(): void {
    this.relayer.kick();
  }

  /** Drains the job outbox; resolves with the number of rows moved. */
  relay(): Promise<number> {
    return this.relayer.relay();
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
    await this.relayer.stop();
    const runner = this.runner;
    this.runner = undefined;
    if (runner) await runner.stop();
    const workerPool = this.workerPool;
    this.workerPool = undefined;
    if (workerPool) await workerPool.end();
    await this.liveness.forget(this.pool);
    this.settler.clear();
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
    // Its messages can end in a stack trace: the first line is the message, the trace stays
    // inside the same JSON line (`stack`) and only at debug level.
    return new GraphileLogger(() => (level: string, message: string) => {
      const fn = level === 'error' ? 'error' : level === 'warning' ? 'warn' : 'debug';
      const [first, ...rest] = String(message).split('\n');
      const stack = rest.join('\n').trim();
      log[fn](
        stack && log.isLevelEnabled('debug') ? { component: 'jobs', stack } : { component: 'jobs' },
        first ?? '',
      );
    });
  }
}
