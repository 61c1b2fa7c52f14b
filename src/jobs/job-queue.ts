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
import { withMigrationLock } from '../persistence/migrator';

/**
 * The PostgreSQL-backed job queue every replica shares (graphile-worker). Jobs can be
 * enqueued inside our own transaction (`manager`), which is what the outbox needs: the
 * job exists exactly when the row that caused it was committed. Cron items fire once per
 * cluster (graphile-worker records each fired slot in the database), not once per replica.
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
}

export class JobQueue {
  private readonly tasks: TaskList = {};
  private readonly cron: CronItem[] = [];
  private pool?: Pool;
  private runner?: Runner;

  constructor(private readonly options: JobQueueOptions) {}

  registerTask(name: string, handler: JobHandler): void {
    if (this.runner) throw new Error(`task ${name} registered after the job queue started`);
    if (this.tasks[name]) throw new Error(`task ${name} registered twice`);
    this.tasks[name] = (payload, helpers) => handler(payload, helpers);
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
    const pool = this.ensurePool();
    this.runner = await run({
      pgPool: pool,
      taskList: this.tasks,
      parsedCronItems: parseCronItems(this.cron),
      concurrency: this.options.concurrency,
      noHandleSignals: true,
      pollInterval: this.options.pollIntervalMs ?? 1000,
      logger: this.gwLogger(),
    });
  }

  async enqueue(task: string, payload: unknown, options: EnqueueOptions = {}): Promise<void> {
    const sql = `SELECT graphile_worker.add_job($1::text, $2::json, queue_name => $3::text, run_at => $4::timestamptz, max_attempts => $5::int, job_key => $6::text)`;
    const params = [
      task,
      JSON.stringify(payload ?? {}),
      options.queue ?? null,
      options.runAt?.toISOString() ?? null,
      options.maxAttempts ?? 25,
      options.jobKey ?? null,
    ];
    if (options.manager) await options.manager.query(sql, params);
    else await this.ensurePool().query(sql, params);
  }

  async stop(): Promise<void> {
    const runner = this.runner;
    this.runner = undefined;
    if (runner) await runner.stop();
    const pool = this.pool;
    this.pool = undefined;
    if (pool) await pool.end();
  }

  private ensurePool(): Pool {
    if (!this.pool) {
      this.pool = new Pool({
        connectionString: this.options.url,
        max: this.options.concurrency + 2,
        application_name: 'imaging-ai-adapter-jobs',
      });
      // Idle and checked-out clients can both emit errors (e.g. the database restarts):
      // log them instead of letting an unhandled 'error' event end the process.
      const onError = (err: Error) =>
        this.options.logger.warn({ err: err.message }, 'job queue connection error');
      this.pool.on('error', onError);
      this.pool.on('connect', (client) => client.on('error', onError));
    }
    return this.pool;
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
