import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client as PgClient } from 'pg';
import { orderDiagnostics } from '../e2e/e2e-support';
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

/** `REPLICAS_LONG=1` (or `CRASH_LONG=1`) selects the long version. */
const REPLICAS_LONG = LONG || process.env.REPLICAS_LONG === '1';
/**
 * The long version's size is bounded by the test EHR, not the adapter: its in-memory search
 * (Medplum's MemoryRepository) is linear, and at 2,000 orders (~10,000 resources) it kept the
 * Jest process — which also hosts the sandbox and the RIS — so busy that RIS ACKs came after
 * the adapter's 5 s timeout for minutes and 12 ORUs were dead-lettered although the RIS held
 * every one (docs/fire.md).
 */
const ORDERS = Number(process.env.FIRE_ORDERS ?? (REPLICAS_LONG ? 1_000 : 100));
/** Two targeted kills (mid-ingest, then mid-upload or mid-publish), then more at random. */
const EXTRA_KILLS = REPLICAS_LONG ? 8 : 0;
jest.setTimeout(REPLICAS_LONG ? 4 * 3600_000 : 600_000);
/** Orders sent per wave (a third per channel), and the pause between waves. */
const WAVE = REPLICAS_LONG ? 60 : ORDERS;
const WAVE_GAP_MS = 8_000;

/**
 * Replicas suite: two adapter processes share one database and one data volume, as two
 * replicas behind one service would. A RIS sends ORM^O01 over MLLP to each of them (one
 * connection per replica, resending to the same replica until it answers AA), an EHR posts
 * ServiceRequests to the first; each replica runs its share of every job. One replica —
 * chosen at random each time — is killed with SIGKILL at random points (mid-ingest, then
 * mid-upload or mid-publish, more at random moments in the long version) and started again
 * on its ports while the other goes on. At the end every acknowledged order exists once in
 * the database and once upstream, every result arrived once per destination, nothing is
 * stuck, nothing dead-lettered: whatever the killed replica held (jobs, upload and
 * acquisition leases, the poll lease) came back to the cluster on its own.
 */
describe('replicas suite: two adapters on one database, one killed at random points', () => {
  let db: TestDatabase;
  let pg: PgClient;
  let peers: FirePeers;
  const replicas: FireAdapter[] = [];
  /** Process ids of every incarnation of each replica (to attribute audited work). */
  const pids: Array<Set<number>> = [new Set(), new Set()];
  const seed = Number(process.env.FIRE_SEED ?? 20261121);
  const random = seededRandom(seed);
  /** Cleared when the run ends, however it ends: the senders and the tick stop. */
  let running = true;

  const start = async (i: number): Promise<void> => {
    await replicas[i]!.start();
    pids[i]!.add(replicas[i]!.proc!.child.pid!);
  };
  const logs = () => replicas.map((r) => r.output()).join('\n');

  beforeAll(async () => {
    db = await createTestDatabase();
    pg = await connect(db.url);
    peers = await startFirePeers();
    for (let i = 0; i < 2; i++)
      replicas.push(await FireAdapter.create(() => adapterEnv(peers, db.url)));
  });
  afterAll(async () => {
    running = false;
    for (const r of replicas) await r.stop();
    if (peers) {
      replicas.forEach((r, i) => writeFileSync(join(peers.dir, `replica-${i}.log`), r.output()));
      process.stdout.write(`replica logs: ${join(peers.dir, 'replica-{0,1}.log')}\n`);
    }
    await pg?.end();
    await peers?.close();
    await db?.drop();
  });

  it('ends with every acknowledged order once upstream and every result once per destination', async () => {
    const started = Date.now();
    // A third of the orders over FHIR (to replica 0), the rest over MLLP to both replicas.
    const sent: SentOrder[] = await prepareOrders(peers.orthanc, ORDERS, 1 / 3);
    const prepared = Date.now();
    // Replica 0 runs the migrations; replica 1 then finds them applied.
    await start(0);
    await start(1);

    const hl7 = sent.filter((o) => o.via === 'hl7');
    const channels = {
      'mllp-0': hl7.filter((_, i) => i % 2 === 0),
      'mllp-1': hl7.filter((_, i) => i % 2 === 1),
      'fhir-0': sent.filter((o) => o.via === 'fhir'),
    };
    const sendUntil = Date.now() + (REPLICAS_LONG ? 3 * 3600_000 : 300_000);
    const deadline = () => (running ? sendUntil : 0);
    let ingestSeconds = 0;
    // The CI version sends everything at once; the long one in waves, so that orders are
    // still arriving at every kill.
    const sending = (async () => {
      const perChannel = Math.ceil(WAVE / 3);
      const longest = Math.max(...Object.values(channels).map((c) => c.length));
      for (let from = 0; from < longest && running; from += perChannel) {
        const wave = (orders: SentOrder[]) => orders.slice(from, from + perChannel);
        await Promise.all([
          sendOrders(() => replicas[0]!, wave(channels['mllp-0']), deadline, 1),
          sendOrders(() => replicas[1]!, wave(channels['mllp-1']), deadline, 1),
          sendOrders(() => replicas[0]!, wave(channels['fhir-0']), deadline, 1),
        ]);
        if (from + perChannel < longest) await sleep(WAVE_GAP_MS);
      }
      ingestSeconds = Math.round((Date.now() - prepared) / 1000);
    })();

    // The minute tick, faster, on whichever replica answers (an operator's cron would too).
    const ticker = (async () => {
      for (let n = 0; running; n++) {
        const alive = replicas.filter((r) => r.alive);
        if (alive.length > 0) await adminPost(alive[n % alive.length]!, '/api/orders/poll-cycle');
        await sleep(1_000);
      }
    })();

    const kills: Array<{ point: string; replica: number; at: number; progress: unknown }> = [];
    const killRestart = async (point: string): Promise<void> => {
      const victim = random() < 0.5 ? 0 : 1;
      kills.push({
        point,
        replica: victim,
        at: Math.round((Date.now() - prepared) / 1000),
        progress: await progress(pg),
      });
      await replicas[victim]!.kill();
      await sleep(200 + random() * 1_500);
      await start(victim);
    };
    const until = async (what: string, fn: () => Promise<boolean>, ms = 120_000) => {
      const end = Date.now() + ms;
      while (Date.now() < end) {
        if (await fn()) return;
        await sleep(100);
      }
      throw new Error(
        `never reached: ${what}; ${JSON.stringify(await progress(pg))} ${lastAdminAnswer}`,
      );
    };

    // 1. mid-ingest: a random 15–40 % of the (first wave's) orders acknowledged, every
    // sender busy.
    const share = 0.15 + random() * 0.25;
    await until(
      'orders acknowledged',
      async () => sent.filter((o) => o.acked).length >= Math.min(ORDERS, WAVE) * share,
    );
    await killRestart('mid-ingest');

    // 2. mid-upload or mid-publish, at random.
    if (random() < 0.5) {
      await until(
        'an upload in progress',
        async () => ((await progress(pg)).states.uploading ?? 0) > 0,
      );
      await killRestart('mid-upload');
    } else {
      await until('results being published', async () => {
        const p = await progress(pg);
        return (p.outbox.pending ?? 0) > 0 && (p.outbox.delivered ?? 0) > 0;
      });
      await killRestart('mid-publish');
    }

    // Long version: more kills at random moments while the run goes on.
    for (let i = 0; i < EXTRA_KILLS; i++) {
      await sleep(15_000 + random() * 30_000);
      await killRestart(`random-${i + 1}`);
    }

    await sending;
    const end = await driveToEnd(
      () => replicas,
      pg,
      sent.filter((o) => o.acked).length,
      Date.now() + (REPLICAS_LONG ? 3600_000 : 240_000),
    );
    running = false;
    await ticker;
    const acc = await account(pg, peers, sent);
    const work = await workByReplica(pg, pids);
    // What held the tail: the slowest order's timeline (printed, not asserted).
    const { rows: slowest } = await pg.query(
      `SELECT order_id::text AS id, max(occurred_at) - min(occurred_at) AS took FROM audit_events
        WHERE order_id IS NOT NULL GROUP BY order_id ORDER BY 2 DESC LIMIT 1`,
    );
    if (slowest[0]) {
      process.stdout.write(`slowest order:\n${await orderDiagnostics(pg, slowest[0].id)}\n`);
    }
    for (const r of replicas) await r.stop();
    const logFindings = scanLogs(logs(), sent);
    const unlocks = deadWorkerUnlocks(logs());

    reportFigures('replicas', {
      long: REPLICAS_LONG,
      seed,
      orders: ORDERS,
      replicas: replicas.length,
      kills: kills.length,
      killPoints: kills.map((k) => `${k.point}@replica-${k.replica}`),
      killedAtSeconds: kills.map((k) => k.at),
      ingestSeconds,
      durationSeconds: Math.round((Date.now() - prepared) / 1000),
      prepareSeconds: Math.round((prepared - started) / 1000),
      ackedByChannel: Object.fromEntries(
        Object.entries(channels).map(([c, orders]) => [c, orders.filter((o) => o.acked).length]),
      ),
      resends: sent.reduce((n, o) => n + o.resends, 0),
      finished: end.done,
      stuckByLockedJobs: end.last.lockedJobOrders,
      jobsLeft: end.jobs,
      deadWorkerSweeps: unlocks.sweeps,
      deadWorkerJobsUnlocked: unlocks.jobs,
      ...work,
      ...acc,
      logFindings: logFindings.length,
    });

    if (!end.done) {
      const upstream: Record<string, number> = {};
      for (const o of peers.sandbox.state.orders.values())
        upstream[o.status] = (upstream[o.status] ?? 0) + 1;
      replicas.forEach((r, i) => writeFileSync(join(peers.dir, `replica-${i}.log`), r.output()));
      throw new Error(
        `stuck: ${JSON.stringify(end.last)}; jobs ${JSON.stringify(end.jobs)}; upstream ${JSON.stringify(upstream)}; logs ${peers.dir}`,
      );
    }
    // Exactly once and complete, whichever replica did the work (fire-support.ts).
    expectExactlyOnceAndComplete(acc, end, ORDERS);
    // Both replicas did their share of the work (the cluster is not one worker and a spare).
    expect(work.uploadsByReplica[0]).toBeGreaterThan(0);
    expect(work.uploadsByReplica[1]).toBeGreaterThan(0);
    expect(logFindings).toEqual([]);
  });
});

/**
 * Who did the work: completed uploads per replica (the audited `worker` of each
 * uploading → processing transition carries the process id), and uploads one run took over
 * from another (a lease that lapsed with its process). Outbox rows whose claimed attempt
 * was never recorded were cut by a kill and waited for their claim's lease: how many, and
 * how long they and the slowest of all took from being written to being delivered.
 */
async function workByReplica(
  pg: PgClient,
  pids: Array<Set<number>>,
): Promise<{
  uploadsByReplica: number[];
  uploadsTakenOver: number;
  outboxClaimsCutByKill: number;
  slowestCutDeliverySeconds: number;
  slowestDeliverySeconds: number;
}> {
  const { rows } = await pg.query(
    `SELECT detail->>'worker' AS worker FROM audit_events
      WHERE kind = 'order.transition' AND detail->>'from' = 'uploading' AND detail->>'to' = 'processing'`,
  );
  const uploadsByReplica = pids.map(() => 0);
  for (const r of rows) {
    const pid = Number(String(r.worker ?? '').split(':')[1]);
    const i = pids.findIndex((set) => set.has(pid));
    if (i >= 0) uploadsByReplica[i]!++;
  }
  const taken = await pg.query(
    `SELECT count(*)::int AS n FROM audit_events
      WHERE kind = 'order.updated' AND summary LIKE 'upload resumed by another run%'`,
  );
  const outbox = await pg.query(
    `WITH recorded AS (
       SELECT detail->>'outboxId' AS id, count(*)::int AS n FROM audit_events
        WHERE kind = 'outbound.attempt' GROUP BY 1)
     SELECT o.attempts > coalesce(r.n, 0) AS cut,
            extract(epoch FROM o.delivered_at - o.created_at)::float AS seconds
       FROM outbox o LEFT JOIN recorded r ON r.id = o.id::text
      WHERE o.status = 'delivered'`,
  );
  const rows2 = outbox.rows as Array<{ cut: boolean; seconds: number }>;
  const cut = rows2.filter((r) => r.cut);
  const slowest = (list: typeof rows2) => Math.round(Math.max(0, ...list.map((r) => r.seconds)));
  return {
    uploadsByReplica,
    uploadsTakenOver: taken.rows[0].n as number,
    outboxClaimsCutByKill: cut.length,
    slowestCutDeliverySeconds: slowest(cut),
    slowestDeliverySeconds: slowest(rows2),
  };
}
