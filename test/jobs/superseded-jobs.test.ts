import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { JobQueue } from '../../src/jobs/job-queue';
import { createTestDatabase, type TestDatabase } from '../helpers/database';

/**
 * A job replaced while it ran. Adding a job whose key a locked job holds makes
 * graphile-worker add a new job and mark the locked one as having used every attempt,
 * without its key (it cannot update a running job). When that run then fails — or its
 * failure cannot be written and our pool settles the lock itself (a database outage; the
 * database-restart suite ended with 8 such `order.upload-study` jobs at 25/25, re-added by
 * the tick for a lapsed upload lease) — the old row stayed in the table for good, looking
 * like a job that failed 25 times, although its replacement had done the work. Such a row is
 * now dropped; a job that failed its real last attempt still stays.
 */
describe('JobQueue: jobs replaced while they ran', () => {
  let db: TestDatabase;
  const logger = pino({ level: 'silent' });

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db.drop();
  });

  const rowsOf = (task: string) =>
    db.dataSource.query(
      `SELECT id::text AS id, key, attempts, max_attempts, locked_by, last_error
         FROM graphile_worker.jobs WHERE task_identifier = $1 ORDER BY id`,
      [task],
    ) as Promise<
      Array<{
        id: string;
        key: string | null;
        attempts: number;
        max_attempts: number;
        locked_by: string | null;
        last_error: string | null;
      }>
    >;
  const waitFor = async (what: string, fn: () => Promise<boolean>, ms = 15_000) => {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (await fn()) return;
      await sleep(50);
    }
    throw new Error(`never reached: ${what}`);
  };

  /** A queue whose one job (`task`, key `key`) failed its first run, the failure written. */
  const failedOnce = async (task: string, message: string, key: string) => {
    let runs = 0;
    const q = new JobQueue({
      url: db.url,
      concurrency: 1,
      logger,
      pollIntervalMs: 100,
      deadWorkerAfterMs: 1_200,
    });
    q.registerTask(task, async () => {
      runs++;
      throw new Error(message);
    });
    await q.migrate();
    await q.start();
    try {
      await q.enqueue(task, {}, { jobKey: key });
      await waitFor('the failed run written', async () => {
        const [row] = await rowsOf(task);
        return runs === 1 && !!row && row.locked_by === null && row.last_error !== null;
      });
    } catch (error) {
      await q.stop();
      throw error;
    }
    return { q, runs: () => runs };
  };

  it('a replaced job whose run fails is dropped; its replacement runs; a real last attempt stays failed', async () => {
    const runs: Array<{ v: number; attempt: number }> = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const q = new JobQueue({ url: db.url, concurrency: 2, logger, pollIntervalMs: 100 });
    q.registerTask('upload', async (payload, helpers) => {
      const { v } = payload as { v: number };
      runs.push({ v, attempt: helpers.job.attempts });
      if (v === 1) {
        await gate;
        throw new Error('first run failed');
      }
    });
    q.registerTask('last-try', async () => {
      throw new Error('failed on its only attempt');
    });
    await q.migrate();
    await q.start();
    try {
      await q.enqueue('upload', { v: 1 }, { jobKey: 'upload:1' });
      await waitFor('the first run', async () => runs.length === 1);
      const [first] = await rowsOf('upload');
      // Added again while the first run holds the lock: graphile-worker adds a second job
      // (which runs at once) and marks the locked one as having used every attempt.
      await q.enqueue('upload', { v: 2 }, { jobKey: 'upload:1' });
      const old = (await rowsOf('upload')).find((r) => r.id === first!.id);
      expect(old).toMatchObject({ key: null, attempts: 25, max_attempts: 25 });
      expect(old!.locked_by).not.toBeNull();

      release();
      await q.enqueue('last-try', {}, { maxAttempts: 1 });
      await waitFor('both upload runs and the last try settled', async () => {
        const [uploads, lastTry] = await Promise.all([rowsOf('upload'), rowsOf('last-try')]);
        // attempts 1 and unlocked: run and its failure written (a job not yet picked up is
        // unlocked too, with attempts 0: waiting for that alone raced the worker)
        return (
          uploads.length === 0 &&
          lastTry.length === 1 &&
          lastTry[0]!.attempts === 1 &&
          lastTry[0]!.locked_by === null
        );
      });
      expect(runs.map((r) => r.v).sort()).toEqual([1, 2]);
      // The real last attempt's failure is kept for an operator to see.
      expect(await rowsOf('last-try')).toMatchObject([
        { attempts: 1, max_attempts: 1, last_error: 'failed on its only attempt' },
      ]);
    } finally {
      release();
      await q.stop();
    }
  });

  it('a replaced job whose failure could not be written is dropped when its pool settles the lock', async () => {
    const { q, runs } = await failedOnce('fetch', 'the database was unavailable', 'fetch:1');
    try {
      const [pool] = q.workerIds;
      expect(pool).toBeDefined();
      // What a database outage leaves: the "failed" write never arrived (the lock is still
      // ours), and meanwhile the key was added again while locked (graphile-worker's
      // add_job: no key, every attempt used; its replacement, a row of its own, is left out).
      await db.dataSource.query(
        `UPDATE graphile_worker._private_jobs
            SET locked_by = $1, locked_at = now() - interval '5 seconds', run_at = now(),
                key = NULL, attempts = max_attempts
          WHERE key = 'fetch:1'`,
        [pool],
      );
      const [replaced] = await rowsOf('fetch');
      await waitFor('the replaced lock settled', async () =>
        (await rowsOf('fetch')).every((r) => r.id !== replaced!.id),
      );
      // Dropped: not released as a job that used up its 25 attempts, never run again.
      expect(await rowsOf('fetch')).toEqual([]);
      expect(runs()).toBe(1);
    } finally {
      await q.stop();
    }
  });

  it("a dead pool's job replaced while it held it is dropped by the sweep; its other jobs run again", async () => {
    // What a killed process leaves: two jobs locked by its pool and its stale heartbeat;
    // meanwhile one of them was added again (the lifecycle tick, for a lapsed upload lease).
    await db.dataSource.query(
      `SELECT graphile_worker.add_job('renew', '{}'::json, job_key => 'renew:1'),
              graphile_worker.add_job('orphaned', '{}'::json, job_key => 'orphaned:1')`,
    );
    await db.dataSource.query(
      `UPDATE graphile_worker._private_jobs j SET locked_at = now(), attempts = 1, locked_by = 'pool-killed'
         FROM graphile_worker._private_tasks t WHERE t.id = j.task_id AND t.identifier IN ('renew', 'orphaned')`,
    );
    await db.dataSource.query(
      `INSERT INTO job_worker_heartbeats (worker_id, process, heartbeat_at)
         VALUES ('pool-killed', 'gone:1', now() - interval '5 seconds')`,
    );
    await db.dataSource.query(
      `SELECT graphile_worker.add_job('renew', '{"v":2}'::json, job_key => 'renew:1')`,
    );
    const [old] = (await rowsOf('renew')).filter((r) => r.locked_by === 'pool-killed');
    expect(old).toMatchObject({ key: null, attempts: 25 });

    const ran: string[] = [];
    const q = new JobQueue({
      url: db.url,
      concurrency: 2,
      logger,
      pollIntervalMs: 100,
      deadWorkerAfterMs: 1_200,
    });
    q.registerTask('renew', async (payload) => {
      ran.push(`renew ${JSON.stringify(payload)}`);
    });
    q.registerTask('orphaned', async () => {
      ran.push('orphaned');
    });
    await q.start();
    try {
      await waitFor('the sweep and both runs', async () => {
        const [renew, orphaned] = await Promise.all([rowsOf('renew'), rowsOf('orphaned')]);
        return renew.length === 0 && orphaned.length === 0 && ran.length === 2;
      });
      // The replacement ran; the replaced row is gone without a run; the other job ran again.
      expect(ran.sort()).toEqual(['orphaned', 'renew {"v":2}']);
    } finally {
      await q.stop();
    }
  });

  it('a job replaced after its run failed but before the failure was written is dropped', async () => {
    const { q, runs } = await failedOnce('late', 'read ECONNRESET', 'late:1');
    try {
      // The run failed while the database was away and graphile-worker's "failed" write
      // waited for it; meanwhile the key was added again while the job was still locked:
      // the write leaves a job with every attempt used, no key, back-off hours away.
      await db.dataSource.query(
        `UPDATE graphile_worker._private_jobs SET key = NULL, attempts = max_attempts WHERE key = 'late:1'`,
      );
      await waitFor(
        'the replaced failure dropped',
        async () => (await rowsOf('late')).length === 0,
      );
      expect(runs()).toBe(1);
    } finally {
      await q.stop();
    }
  });
});
