import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { JobQueue } from '../../src/jobs/job-queue';
import { createTestDatabase, type TestDatabase } from '../helpers/database';

/**
 * The job queue's dead-worker sweep with real PostgreSQL and real graphile-worker pools in
 * this process. The kill -9 of a real adapter process is in
 * test/e2e/killed-worker.e2e.test.ts; here: a live pool's long job is never taken from it,
 * and a dead pool's job (a pool that left its heartbeat and its lock behind) runs again once
 * the heartbeat is older than the threshold — and not before the sweeper has itself been
 * healthy for that long.
 */
describe('JobQueue: jobs of dead worker pools', () => {
  let db: TestDatabase;
  const logger = pino({ level: 'silent' });
  const DEAD_AFTER_MS = 1_200;

  beforeAll(async () => {
    db = await createTestDatabase();
    const q = new JobQueue({ url: db.url, concurrency: 1, logger });
    await q.migrate();
    await q.stop();
  });
  afterAll(async () => {
    await db.drop();
  });

  const lockedBy = async (task: string): Promise<string | null | undefined> => {
    const rows: Array<{ locked_by: string | null }> = await db.dataSource.query(
      `SELECT locked_by FROM graphile_worker._private_jobs j
         JOIN graphile_worker._private_tasks t ON t.id = j.task_id WHERE t.identifier = $1`,
      [task],
    );
    return rows[0]?.locked_by;
  };

  it('a live pool keeps its long job while another replica sweeps: it runs once', async () => {
    const starts: string[] = [];
    let finished = 0;
    const replicas = ['a', 'b'].map((name) => {
      const q = new JobQueue({
        url: db.url,
        concurrency: 2,
        logger,
        pollIntervalMs: 100,
        deadWorkerAfterMs: DEAD_AFTER_MS,
      });
      q.registerTask('long', async () => {
        starts.push(name);
        // Four times the threshold: a sweep that took it from a live pool would start it again.
        await sleep(4 * DEAD_AFTER_MS);
        finished++;
      });
      return q;
    });
    await Promise.all(replicas.map((r) => r.start()));
    try {
      await replicas[0]!.enqueue('long', {});
      const deadline = Date.now() + 10_000;
      while (starts.length === 0 && Date.now() < deadline) await sleep(50);
      expect(starts).toHaveLength(1);
      const holder = replicas[starts[0] === 'a' ? 0 : 1]!;
      expect(holder.workerIds).toHaveLength(1);
      expect(await lockedBy('long')).toBe(holder.workerIds[0]);
      // Both replicas sweep every 200 ms; the other one too, explicitly.
      while (finished === 0 && Date.now() < deadline) {
        expect(await replicas[starts[0] === 'a' ? 1 : 0]!.sweepDeadWorkers()).toEqual([]);
        await sleep(200);
      }
      expect(finished).toBe(1);
      await sleep(500);
      expect(starts).toHaveLength(1);
    } finally {
      await Promise.all(replicas.map((r) => r.stop()));
    }
    // A clean stop leaves no heartbeat behind.
    expect(await db.dataSource.query(`SELECT worker_id FROM job_worker_heartbeats`)).toEqual([]);
  });

  it("a dead pool's job runs again after the threshold, once the sweeper has been healthy that long", async () => {
    // What a killed process leaves: a job locked by its pool and its last heartbeat (5 s ago),
    // next to a live-looking pool (fresh heartbeat) whose job must stay locked.
    await db.dataSource.query(
      `SELECT graphile_worker.add_job('orphan', '{}'::json), graphile_worker.add_job('held', '{}'::json)`,
    );
    await db.dataSource.query(
      `UPDATE graphile_worker._private_jobs j SET locked_at = now(), attempts = 1,
              locked_by = CASE t.identifier WHEN 'orphan' THEN 'pool-killed' ELSE 'pool-alive' END
         FROM graphile_worker._private_tasks t WHERE t.id = j.task_id AND t.identifier IN ('orphan', 'held')`,
    );
    await db.dataSource.query(
      `INSERT INTO job_worker_heartbeats (worker_id, process, heartbeat_at)
         VALUES ('pool-killed', 'gone:1', now() - interval '5 seconds'), ('pool-alive', 'elsewhere:2', now())`,
    );
    // 'pool-alive' keeps beating, as its process would.
    const beat = setInterval(() => {
      void db.dataSource.query(
        `UPDATE job_worker_heartbeats SET heartbeat_at = now() WHERE worker_id = 'pool-alive'`,
      );
    }, 200);

    const ran: Array<{ task: string; at: number }> = [];
    const q = new JobQueue({
      url: db.url,
      concurrency: 2,
      logger,
      pollIntervalMs: 100,
      deadWorkerAfterMs: DEAD_AFTER_MS,
    });
    q.registerTask('orphan', async () => {
      ran.push({ task: 'orphan', at: Date.now() });
    });
    q.registerTask('held', async () => {
      ran.push({ task: 'held', at: Date.now() });
    });
    const started = Date.now();
    await q.start();
    try {
      // The heartbeat is already stale, but this replica has not been healthy for the
      // threshold yet: after a database outage every row is stale, and live pools must not
      // lose their jobs to the first replica back.
      await sleep(DEAD_AFTER_MS / 2);
      expect(await lockedBy('orphan')).toBe('pool-killed');
      const deadline = Date.now() + 10_000;
      while (!ran.some((r) => r.task === 'orphan') && Date.now() < deadline) await sleep(50);
      const orphan = ran.find((r) => r.task === 'orphan');
      expect(orphan).toBeDefined();
      const after = orphan!.at - started;
      expect(after).toBeGreaterThanOrEqual(DEAD_AFTER_MS);
      // Threshold + one heartbeat period + a poll, with room for a slow CI machine.
      expect(after).toBeLessThan(DEAD_AFTER_MS + 2_000);
      await sleep(DEAD_AFTER_MS);
      expect(ran.map((r) => r.task)).toEqual(['orphan']);
      expect(await lockedBy('held')).toBe('pool-alive');
      const rows: Array<{ worker_id: string }> = await db.dataSource.query(
        `SELECT worker_id FROM job_worker_heartbeats`,
      );
      expect(rows.map((r) => r.worker_id).sort()).toEqual(['pool-alive', ...q.workerIds].sort());
    } finally {
      clearInterval(beat);
      await q.stop();
    }
  });
});
