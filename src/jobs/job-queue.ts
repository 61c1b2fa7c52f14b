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
 * The PostgreSQL-backed job queue every replica shares (graphile-worker). Jobs enqueued
 * inside our own transaction (`manager`) go to the `job_outbox` table (a plain insert: the
 * job exists exactly when the row that caused it was committed) and a relay moves them into
 * graphile-worker in batches, so that hot paths pay no NOTIFY (see the job-outbox
 * migration). The relay runs when kicked after a commit and every second in every replica,
 * so rows left by a crash are moved by whoever is alive. Cron items fire once per cluster
 * (graphile-worker records each fired slot in the database), not once per replica.
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
  /** How long a kick waits to gather more rows into one relay (default 20 ms). */
  relayDelayMs?: number;
}

/** Moves up to 500 outbox rows into graphile-worker in one transaction (one NOTIFY). */
const RELAY_SQL = `
  WITH moved AS (
    DELETE FROM job_outbox
     WHERE id IN (SELECT id FROM job_outbox ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED)
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
  private pool?: Pool;
  private runner?: Runner;
  private relayTimer?: NodeJS.Timeout;
  private relaying?: Promise<void>;
  private relayAgain = false;
  private relayScheduled?: NodeJS.Timeout;

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
    this.relayTimer = setInterval(() => this.kick(), this.options.relayIntervalMs ?? 1000);
    this.relayTimer.unref();
    this.kick();
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
    }, this.options.relayDelayMs ?? 20);
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
    if (this.relayTimer) clearInterval(this.relayTimer);
    this.relayTimer = undefined;
    if (this.relayScheduled) clearTimeout(this.relayScheduled);
    this.relayScheduled = undefined;
    await this.relaying;
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
