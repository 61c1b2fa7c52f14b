import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { JobQueue } from '../../src/jobs/job-queue';
import { createTestDatabase, type TestDatabase } from '../helpers/database';

describe('JobQueue (graphile-worker) shared by replicas', () => {
  let db: TestDatabase;
  const logger = pino({ level: 'silent' });

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db.drop();
  });

  it('two replicas process each job exactly once; a job enqueued in a rolled-back transaction never runs', async () => {
    const seen: Array<{ replica: string; n: number }> = [];
    const replicas = ['a', 'b'].map((name) => {
      const q = new JobQueue({ url: db.url, concurrency: 3, logger, pollIntervalMs: 100 });
      q.registerTask('count', async (payload) => {
        seen.push({ replica: name, n: (payload as { n: number }).n });
        await sleep(5);
      });
      return q;
    });
    await replicas[0]!.migrate();
    await replicas[1]!.migrate();
    await Promise.all(replicas.map((r) => r.start()));
    try {
      await db.dataSource
        .transaction(async (manager) => {
          await replicas[0]!.enqueue('count', { n: -1 }, { manager });
          throw new Error('rollback');
        })
        .catch(() => undefined);
      for (let n = 0; n < 60; n++) {
        await db.dataSource.transaction((manager) =>
          replicas[n % 2]!.enqueue('count', { n }, { manager }),
        );
      }
      const deadline = Date.now() + 20_000;
      while (seen.length < 60 && Date.now() < deadline) await sleep(50);
      await sleep(300);
      const ns = seen.map((s) => s.n).sort((x, y) => x - y);
      expect(ns).toEqual(Array.from({ length: 60 }, (_, i) => i));
      expect(new Set(seen.map((s) => s.replica)).size).toBe(2);
    } finally {
      await Promise.all(replicas.map((r) => r.stop()));
    }
  });

  it('a job key de-duplicates pending jobs', async () => {
    const q = new JobQueue({ url: db.url, concurrency: 1, logger });
    await q.migrate();
    try {
      await q.enqueue(
        'noop',
        { v: 1 },
        { jobKey: 'poll-cycle', runAt: new Date(Date.now() + 60_000) },
      );
      await q.enqueue(
        'noop',
        { v: 2 },
        { jobKey: 'poll-cycle', runAt: new Date(Date.now() + 60_000) },
      );
      const rows = await db.dataSource.query(
        `SELECT key, revision FROM graphile_worker.jobs WHERE task_identifier = 'noop'`,
      );
      // one pending job, replaced once (revision 1) rather than added twice
      expect(rows).toEqual([{ key: 'poll-cycle', revision: 1 }]);
    } finally {
      await q.stop();
    }
  });
});
