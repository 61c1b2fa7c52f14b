import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import pino from 'pino';
import { JobQueue } from '../../src/jobs/job-queue';
import { createDataSource } from '../../src/persistence/data-source.factory';
import {
  freePort,
  startEmbeddedPostgres,
  type RunningEmbeddedPostgres,
} from '../../src/persistence/embedded-postgres';
import { migrateUnderLock } from '../../src/persistence/migrator';

jest.setTimeout(120_000);

/**
 * The job queue across a database outage, with real graphile-worker pools on an embedded
 * PostgreSQL of the test's own, stopped like a crash and started again on the same port.
 * graphile-worker writes "job done" / "job failed" without awaiting or retrying a refused
 * connection: a run ending while the database was away left its job locked by a pool that
 * is alive and beating — no dead-worker sweep frees that, graphile-worker itself only after
 * 4 hours — and an unhandled rejection (which fails this test under Jest). Its connections
 * now wait for the database, so those writes go through once it is back; and a lock whose
 * answer never reached a worker is settled by the pool itself. A job still running is left
 * alone throughout.
 */
describe('JobQueue: a database outage while jobs run', () => {
  const dir = mkdtempSync(join(tmpdir(), 'jobs-outage-'));
  let pg: RunningEmbeddedPostgres | undefined;
  let port = 0;
  let url = '';

  const startDatabase = () =>
    startEmbeddedPostgres({ dataDir: join(dir, 'pg'), port, database: 'jobs' });

  const query = async <T extends Record<string, unknown>>(
    sql: string,
    params: unknown[] = [],
  ): Promise<T[]> => {
    const c = new Client({ connectionString: url });
    await c.connect();
    try {
      return (await c.query<T>(sql, params)).rows;
    } finally {
      await c.end();
    }
  };
  const jobsOf = (task: string) =>
    query<{ id: string; locked_by: string | null; attempts: number; last_error: string | null }>(
      `SELECT j.id::text AS id, j.locked_by, j.attempts, j.last_error FROM graphile_worker._private_jobs j
         JOIN graphile_worker._private_tasks t ON t.id = j.task_id WHERE t.identifier = $1`,
      [task],
    );

  beforeAll(async () => {
    port = await freePort();
    pg = await startDatabase();
    url = pg.url;
    const ds = createDataSource({ url, poolSize: 2 });
    await ds.initialize();
    await migrateUnderLock(ds, url);
    await ds.destroy();
  });
  afterAll(async () => {
    await pg?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('records runs that ended during the outage once it is back, settles a lost lock itself, and leaves a running job alone', async () => {
    const runs: Record<string, number> = { ok: 0, fails: 0, long: 0, lost: 0 };
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let finishLong!: () => void;
    const longGate = new Promise<void>((resolve) => (finishLong = resolve));
    const q = new JobQueue({
      url,
      concurrency: 4,
      logger: pino({ level: 'silent' }),
      pollIntervalMs: 100,
      deadWorkerAfterMs: 1_200,
    });
    q.registerTask('ok', async () => {
      runs.ok++;
      await gate;
    });
    q.registerTask('fails', async () => {
      runs.fails++;
      // The first run fails while the database is away; the second succeeds.
      if (runs.fails === 1) {
        await gate;
        throw new Error('first attempt failed');
      }
    });
    q.registerTask('long', async () => {
      runs.long++;
      await longGate;
    });
    q.registerTask('lost', async () => {
      runs.lost++;
    });
    await q.migrate();
    await q.start();
    try {
      await q.enqueue('ok', {});
      await q.enqueue('fails', {});
      await q.enqueue('long', {});
      const started = Date.now();
      while (runs.ok + runs.fails + runs.long < 3 && Date.now() - started < 10_000) await sleep(50);
      expect(runs).toMatchObject({ ok: 1, fails: 1, long: 1 });
      const [pool] = q.workerIds;
      expect(pool).toBeDefined();

      // The database goes away; two runs end meanwhile: their ends are written once it is back.
      const stopped = pg!;
      pg = undefined;
      await stopped.stop('immediate');
      release();
      await sleep(1_000);
      pg = await startDatabase();

      // A lock whose answer never reached a worker: held by our pool, run by nobody.
      await query(`SELECT graphile_worker.add_job('lost', '{}'::json)`);
      await query(
        `UPDATE graphile_worker._private_jobs j SET locked_by = $1, locked_at = now() - interval '5 seconds', attempts = 1
           FROM graphile_worker._private_tasks t WHERE t.id = j.task_id AND t.identifier = 'lost'`,
        [pool],
      );

      const deadline = Date.now() + 15_000;
      const settled = async () =>
        (await jobsOf('ok')).length === 0 &&
        (await jobsOf('fails')).length === 0 &&
        (await jobsOf('lost')).length === 0;
      while (!(await settled()) && Date.now() < deadline) {
        // The failed run is retried after graphile-worker's back-off (e^1 s): run it now.
        await query(
          `UPDATE graphile_worker._private_jobs SET run_at = now() WHERE locked_by IS NULL AND run_at > now()`,
        );
        await sleep(200);
      }
      // Completed without running again; the failure ran again (and succeeded); the lost
      // lock ran once.
      expect(await jobsOf('ok')).toEqual([]);
      expect(await jobsOf('fails')).toEqual([]);
      expect(await jobsOf('lost')).toEqual([]);
      expect(runs).toMatchObject({ ok: 1, fails: 2, lost: 1 });
      // The job still running kept its lock through all of it.
      const [long] = await jobsOf('long');
      expect(long?.locked_by).toBe(pool);
      expect(runs.long).toBe(1);
      finishLong();
      while ((await jobsOf('long')).length > 0 && Date.now() < deadline + 10_000) await sleep(100);
      expect(await jobsOf('long')).toEqual([]);
      expect(runs.long).toBe(1);
    } finally {
      release();
      finishLong();
      await q.stop();
    }
  });
});
