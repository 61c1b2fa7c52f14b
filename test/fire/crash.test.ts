import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client as PgClient } from 'pg';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import {
  account,
  adapterEnv,
  adminPost,
  connect,
  deadWorkerUnlocks,
  driveToEnd,
  expectExactlyOnceAndComplete,
  FireAdapter,
  lastAdminAnswer,
  LONG,
  prepareOrders,
  progress,
  reportFigures,
  scanLogs,
  sendOrders,
  startFirePeers,
  type FirePeers,
  type SentOrder,
} from './fire-support';
import { seededRandom } from '../../src/common/seeded-random';

const ORDERS = Number(process.env.FIRE_ORDERS ?? (LONG ? 10_000 : 200));
const EXTRA_KILLS = LONG ? 6 : 0;
jest.setTimeout(LONG ? 4 * 3600_000 : 600_000);

/**
 * Crash suite: orders flow in over MLLP and FHIR while the adapter process is killed with
 * SIGKILL mid-ingest, mid-upload and mid-publish, and started again each time on the same
 * ports, database and data directory. At the end every acknowledged order exists exactly
 * once in our database and once upstream (counted by correlation_id in the sandbox), every
 * order is delivered, each destination holds exactly one result per order after its
 * de-duplication, and nothing is stuck: a job a kill cut is unlocked by the dead-worker sweep
 * and a poll cycle a kill cut gives its lease back when the lease runs out, without any help
 * from the test.
 */
describe('crash suite: kill -9 at random points', () => {
  let db: TestDatabase;
  let pg: PgClient;
  let peers: FirePeers;
  let adapter: FireAdapter;
  const seed = Number(process.env.FIRE_SEED ?? 20261121);
  const random = seededRandom(seed);

  beforeAll(async () => {
    db = await createTestDatabase();
    pg = await connect(db.url);
    peers = await startFirePeers();
    adapter = await FireAdapter.create(() => adapterEnv(peers, db.url));
  });
  afterAll(async () => {
    await adapter?.stop();
    if (adapter && peers) {
      writeFileSync(join(peers.dir, 'adapter.log'), adapter.output());
      process.stdout.write(`adapter log: ${join(peers.dir, 'adapter.log')}\n`);
    }
    await pg?.end();
    await peers?.close();
    await db?.drop();
  });

  it('ends with every acknowledged order once upstream and every result once per destination', async () => {
    const started = Date.now();
    const sent: SentOrder[] = await prepareOrders(peers.orthanc, ORDERS);
    const prepared = Date.now();
    await adapter.start();
    const killedAt: Array<{ point: string; at: number; progress: unknown }> = [];
    const current = () => adapter;

    let running = true;
    // The minute tick, faster: lapsed leases resumed, a poll cycle when due.
    const ticker = (async () => {
      while (running) {
        if (adapter.alive) await adminPost(adapter, '/api/orders/poll-cycle');
        await sleep(1_000);
      }
    })();
    const sending = sendOrders(current, sent, Date.now() + (LONG ? 3 * 3600_000 : 300_000));

    const killRestart = async (point: string): Promise<void> => {
      killedAt.push({ point, at: Date.now() - prepared, progress: await progress(pg) });
      await adapter.kill();
      await sleep(200 + random() * 1_500);
      await adapter.start();
    };
    const until = async (what: string, fn: () => Promise<boolean>, ms = 120_000) => {
      const end = Date.now() + ms;
      while (Date.now() < end) {
        if (await fn()) return true;
        await sleep(100);
      }
      throw new Error(
        `never reached: ${what}; ${JSON.stringify(await progress(pg))} ${lastAdminAnswer}`,
      );
    };

    // 1. mid-ingest: a random share of the orders acknowledged, senders busy.
    const share = 0.15 + random() * 0.25;
    await until(
      'orders acknowledged',
      async () => sent.filter((o) => o.acked).length >= ORDERS * share,
    );
    await killRestart('mid-ingest');

    // 2. mid-upload: some order's upload in progress.
    await until(
      'an upload in progress',
      async () => ((await progress(pg)).states.uploading ?? 0) > 0,
    );
    await killRestart('mid-upload');

    // 3. mid-publish: results being delivered, some rows still pending.
    await until('results being published', async () => {
      const p = await progress(pg);
      return (p.outbox.pending ?? 0) > 0 && (p.outbox.delivered ?? 0) > 0;
    });
    await killRestart('mid-publish');

    // Long version: more kills at random moments while the run goes on.
    for (let i = 0; i < EXTRA_KILLS; i++) {
      await sleep(20_000 + random() * 40_000);
      await killRestart(`random-${i + 1}`);
    }

    await sending;
    const end = await driveToEnd(
      () => [adapter],
      pg,
      sent.filter((o) => o.acked).length,
      Date.now() + (LONG ? 3600_000 : 240_000),
    );
    running = false;
    await ticker;
    const acc = await account(pg, peers, sent);
    await adapter.stop();
    const logFindings = scanLogs(adapter.output(), sent);
    const unlocks = deadWorkerUnlocks(adapter.output());

    reportFigures('crash', {
      seed,
      orders: ORDERS,
      kills: adapter.kills,
      killPoints: killedAt.map((k) => k.point),
      durationSeconds: Math.round((Date.now() - prepared) / 1000),
      prepareSeconds: Math.round((prepared - started) / 1000),
      resends: sent.reduce((n, o) => n + o.resends, 0),
      finished: end.done,
      stuckByLockedJobs: end.last.lockedJobOrders,
      jobsLeft: end.jobs,
      deadWorkerSweeps: unlocks.sweeps,
      deadWorkerJobsUnlocked: unlocks.jobs,
      ...acc,
      logFindings: logFindings.length,
    });

    if (!end.done) {
      const upstream: Record<string, number> = {};
      for (const o of peers.sandbox.state.orders.values())
        upstream[o.status] = (upstream[o.status] ?? 0) + 1;
      writeFileSync(join(peers.dir, 'adapter.log'), adapter.output());
      throw new Error(
        `stuck: ${JSON.stringify(end.last)}; jobs ${JSON.stringify(end.jobs)}; upstream ${JSON.stringify(upstream)}; log ${join(peers.dir, 'adapter.log')}`,
      );
    }
    // Exactly once and complete, whatever was cut by the kills (fire-support.ts).
    expectExactlyOnceAndComplete(acc, end, ORDERS);
    expect(logFindings).toEqual([]);
  });
});
