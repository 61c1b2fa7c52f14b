import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client as PgClient } from 'pg';
import {
  freePort,
  startEmbeddedPostgres,
  type RunningEmbeddedPostgres,
} from '../../src/persistence/embedded-postgres';
import {
  account,
  adapterEnv,
  adminPost,
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
  type SenderAnswer,
  type SentOrder,
} from './fire-support';
import { seededRandom } from '../../src/common/seeded-random';

const ORDERS = Number(process.env.FIRE_ORDERS ?? (LONG ? 3_000 : 150));
/** Restarts at fixed points (mid-ingest, mid-upload, mid-publish), then more at random (long). */
const EXTRA_RESTARTS = LONG ? 8 : 0;
/** Orders are fed in small batches so that they still flow during every restart. */
const BATCH = 5;
const PACE_MS = Number(process.env.FIRE_PACE_MS ?? (LONG ? 500 : 2_000));
/** Time from one restart's end to the next one at the earliest. */
const GAP_MS = 8_000;
/** Refusals this long after the database is back still count as the outage's (reconnecting). */
const RECONNECT_GRACE_MS = 10_000;
jest.setTimeout(LONG ? 4 * 3600_000 : 600_000);

/** A client of our own that survives the restarts (reconnects when the old one broke). */
class Db {
  private client?: PgClient;
  constructor(private readonly url: string) {}

  async get(): Promise<PgClient> {
    for (let attempt = 0; ; attempt++) {
      if (this.client) return this.client;
      const c = new PgClient({ connectionString: this.url, connectionTimeoutMillis: 2_000 });
      c.on('error', () => {
        if (this.client === c) this.client = undefined;
      });
      try {
        await c.connect();
        this.client = c;
      } catch (error) {
        if (attempt > 100) throw error;
        await sleep(200);
      }
    }
  }

  drop(): void {
    const c = this.client;
    this.client = undefined;
    void c?.end().catch(() => undefined);
  }

  async end(): Promise<void> {
    await this.client?.end().catch(() => undefined);
    this.client = undefined;
  }
}

interface Outage {
  point: string;
  /**
   * ms since the run started: the stop began, the start began (no server until then), the
   * start returned (the server answers).
   */
  down: number;
  starting: number;
  up: number;
  progress: unknown;
}

/**
 * Database-restart suite (docs/fire.md): orders flow in over MLLP (to replica A) and FHIR (to
 * replica B) while the adapters' PostgreSQL — a private embedded server on a fixed port,
 * never the machine's shared one — is stopped like a crash (immediate shutdown) and started
 * again on the same port and data directory, mid-ingest, mid-upload and mid-publish. The
 * adapter processes are never restarted. During an outage the front doors refuse what they
 * cannot store (MLLP: AR with ERR 207; FHIR: 503 OperationOutcome), never accept it; after
 * it they accept again by themselves. At the end every acknowledged order exists once in our
 * database and once upstream, every result exactly once per destination, nothing is stuck,
 * no dead letters, and no live replica's jobs were taken as a dead worker's.
 */
describe('database-restart suite: PostgreSQL stopped like a crash mid-run', () => {
  let peers: FirePeers;
  let database: RunningEmbeddedPostgres | undefined;
  let dataDir = '';
  let port = 0;
  let url = '';
  let db: Db;
  const pgLog: string[] = [];
  let replicaA: FireAdapter;
  let replicaB: FireAdapter;
  const seed = Number(process.env.FIRE_SEED ?? 20261121);
  const random = seededRandom(seed);

  const startDatabase = () =>
    startEmbeddedPostgres({
      dataDir,
      port,
      database: 'adapter',
      // Crash recovery on a loaded machine has taken over 30 s.
      readyTimeoutMs: 120_000,
      log: (line) => pgLog.push(line),
    });

  beforeAll(async () => {
    peers = await startFirePeers();
    dataDir = join(peers.dir, 'pg');
    port = await freePort();
    database = await startDatabase();
    url = database.url;
    db = new Db(url);
    replicaA = await FireAdapter.create(() => adapterEnv(peers, url));
    replicaB = await FireAdapter.create(() => adapterEnv(peers, url));
  });
  afterAll(async () => {
    await replicaA?.stop();
    await replicaB?.stop();
    if (peers) {
      writeFileSync(join(peers.dir, 'adapter-a.log'), replicaA?.output() ?? '');
      writeFileSync(join(peers.dir, 'adapter-b.log'), replicaB?.output() ?? '');
      writeFileSync(join(peers.dir, 'postgres.log'), pgLog.join('\n'));
      process.stdout.write(`logs: ${peers.dir}/{adapter-a,adapter-b,postgres}.log\n`);
    }
    await db?.end();
    await database?.stop();
    await peers?.close();
  });

  it('accepts only what it stored, recovers by itself, and ends with everything once', async () => {
    const started = Date.now();
    const sent: SentOrder[] = await prepareOrders(peers.orthanc, ORDERS);
    const prepared = Date.now();
    await Promise.all([replicaA.start(), replicaB.start()]);
    const t = () => Date.now() - prepared;

    const answers: SenderAnswer[] = [];
    const onAnswer = (a: SenderAnswer) => answers.push({ ...a, at: a.at - prepared });
    let running = true;
    // The minute tick, faster (on replica A; the cluster runs one poll cycle at a time).
    const ticker = (async () => {
      while (running) {
        await adminPost(replicaA, '/api/orders/poll-cycle');
        await sleep(1_000);
      }
    })();
    const deadline = Date.now() + (LONG ? 3 * 3600_000 : 300_000);
    // MLLP orders go to replica A, FHIR orders to replica B, a few at a time.
    const feed = async (replica: FireAdapter, orders: SentOrder[]) => {
      for (let i = 0; i < orders.length; i += BATCH) {
        await sendOrders(() => replica, orders.slice(i, i + BATCH), deadline, 1, onAnswer);
        await sleep(PACE_MS);
      }
    };
    const sending = Promise.all([
      feed(
        replicaA,
        sent.filter((o) => o.via === 'hl7'),
      ),
      feed(
        replicaB,
        sent.filter((o) => o.via === 'fhir'),
      ),
    ]);

    const outages: Outage[] = [];
    const restart = async (point: string) => {
      const before = await progress(await db.get());
      const down = t();
      db.drop();
      const stopping = database!;
      database = undefined;
      await stopping.stop('immediate');
      await sleep(3_000 + random() * 2_000);
      const starting = t();
      database = await startDatabase();
      outages.push({ point, down, starting, up: t(), progress: before });
    };
    /** Waits until the last restart is GAP_MS behind. */
    const gap = async () => {
      const last = outages[outages.length - 1];
      if (last) await sleep(Math.max(0, last.up + GAP_MS - t()));
    };
    const until = async (what: string, fn: () => Promise<boolean>, ms = 120_000) => {
      const end = Date.now() + ms;
      while (Date.now() < end) {
        if (await fn()) return;
        await sleep(100);
      }
      throw new Error(
        `never reached: ${what}; ${JSON.stringify(await progress(await db.get()))} ${lastAdminAnswer}`,
      );
    };

    // 1. mid-ingest: a random share of the orders acknowledged, both senders busy.
    const share = 0.1 + random() * 0.15;
    await until(
      'orders acknowledged',
      async () => sent.filter((o) => o.acked).length >= ORDERS * share,
    );
    await restart('mid-ingest');

    // 2. mid-upload: some order's study being uploaded, orders still flowing in.
    await gap();
    await until(
      'an upload in progress',
      async () => ((await progress(await db.get())).states.uploading ?? 0) > 0,
    );
    await restart('mid-upload');

    // 3. mid-publish: results being delivered, some still pending.
    await gap();
    await until('results being published', async () => {
      const p = await progress(await db.get());
      return (p.outbox.pending ?? 0) > 0 && (p.outbox.delivered ?? 0) > 0;
    });
    await restart('mid-publish');

    // Long version: more restarts at random moments.
    for (let i = 0; i < EXTRA_RESTARTS; i++) {
      await sleep(20_000 + random() * 40_000);
      await restart(`random-${i + 1}`);
    }

    await sending;
    const end = await driveToEnd(
      () => [replicaA, replicaB],
      await db.get(),
      sent.filter((o) => o.acked).length,
      Date.now() + (LONG ? 3600_000 : 120_000),
    );
    running = false;
    await ticker;
    const pg = await db.get();
    const acc = await account(pg, peers, sent);
    const { rows: lockedRows } = await pg.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM graphile_worker._private_jobs
        WHERE locked_at IS NOT NULL AND locked_at < now() - interval '20 seconds'`,
    );
    const { rows: relayRows } = await pg.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM job_outbox`,
    );
    const bothAlive = replicaA.alive && replicaB.alive;
    await replicaA.stop();
    await replicaB.stop();
    const logs = replicaA.output() + replicaB.output();
    const lines = logs.split('\n');
    const unlocks = deadWorkerUnlocks(logs);
    const declaredDead = lines.filter((l) => l.includes('declared dead while it ran'));
    const unhandled = lines.filter((l) => l.includes('unhandled rejection'));
    let ownJobsSettled = 0;
    let superseded = 0;
    for (const l of lines.filter((x) => x.includes('whose end could not be recorded'))) {
      const j = JSON.parse(l) as { completed: number; released: number; superseded?: number };
      ownJobsSettled += j.completed + j.released;
      superseded += j.superseded ?? 0;
    }
    superseded += lines.filter((l) => l.includes('its replacement carries the work')).length;
    for (const l of lines.filter((x) => x.includes('whose failed run was recorded late'))) {
      superseded += (JSON.parse(l) as { superseded: number }).superseded;
    }

    // The senders' answers during each outage (from its stop until the database answers
    // again, plus the pools' reconnection), and how soon each front door accepted again.
    const outageOf = (a: SenderAnswer, graceMs = RECONNECT_GRACE_MS) =>
      outages.find((o) => a.at >= o.down && a.at <= o.up + graceMs);
    const refusals: Record<string, number> = {};
    for (const a of answers.filter((x) => !x.accepted)) {
      const key = `${a.via} ${a.answer}${outageOf(a) ? '' : ' (outside an outage)'}`;
      refusals[key] = (refusals[key] ?? 0) + 1;
    }
    // Accepted while no server ran at all. An answer read just after the stop may be for a
    // commit made just before it (and this busy process may read it late), so the first
    // second does not count; the server accepts connections before its start returns.
    const acceptedInOutage = answers
      .filter(
        (a) => a.accepted && outages.some((o) => a.at >= o.down + 1_000 && a.at <= o.starting),
      )
      .map((a) => ({ via: a.via, msAfterStop: a.at - outageOf(a, 0)!.down }));
    const recovery = outages.map((o) => {
      const first = (via: 'hl7' | 'fhir') => {
        const a = answers.find((x) => x.via === via && x.accepted && x.at > o.up);
        return a ? Math.round((a.at - o.up) / 100) / 10 : null;
      };
      return {
        point: o.point,
        outageSeconds: Math.round((o.up - o.down) / 100) / 10,
        acceptedAgainAfterSeconds: { hl7: first('hl7'), fhir: first('fhir') },
      };
    });
    const logFindings = scanLogs(logs, sent);

    reportFigures('db-restart', {
      seed,
      orders: ORDERS,
      replicas: 2,
      restarts: outages.length,
      restartPoints: outages.map((o) => o.point),
      recovery,
      adapterStarts: replicaA.starts + replicaB.starts,
      durationSeconds: Math.round((Date.now() - prepared) / 1000),
      prepareSeconds: Math.round((prepared - started) / 1000),
      resends: sent.reduce((n, o) => n + o.resends, 0),
      refusals,
      acceptedInOutage: acceptedInOutage.length,
      finished: end.done,
      stuckByLockedJobs: end.last.lockedJobOrders,
      jobsLeft: end.jobs,
      jobsLockedAtEnd: lockedRows[0]?.n,
      jobOutboxAtEnd: relayRows[0]?.n,
      deadWorkerJobsUnlocked: unlocks.jobs,
      declaredDeadWhileAlive: declaredDead.length,
      ownJobsSettled,
      supersededJobsDropped: superseded,
      unhandledRejections: unhandled.length,
      ...acc,
      logFindings: logFindings.length,
    });

    if (!end.done) {
      throw new Error(
        `stuck: ${JSON.stringify(end.last)}; jobs ${JSON.stringify(end.jobs)}; logs in ${peers.dir}`,
      );
    }
    // The adapters rode the outages out: no process was restarted.
    expect(bothAlive).toBe(true);
    expect(replicaA.starts + replicaB.starts).toBe(2);
    expect(outages).toHaveLength(3 + EXTRA_RESTARTS);
    // During an outage: refused so that the sender retries (AR 207 / 503 OperationOutcome),
    // never accepted; after it, both front doors accept again without help.
    expect(acceptedInOutage).toEqual([]);
    for (const key of Object.keys(refusals))
      expect(['hl7 AR 207', 'fhir 503 OperationOutcome']).toContain(key);
    for (const r of recovery) {
      expect(r.acceptedAgainAfterSeconds.hl7 ?? 0).toBeLessThan(RECONNECT_GRACE_MS / 1000);
      expect(r.acceptedAgainAfterSeconds.fhir ?? 0).toBeLessThan(RECONNECT_GRACE_MS / 1000);
    }
    // No live replica's jobs were unlocked as a dead worker's, and none thought it was.
    expect(unlocks.jobs).toBe(0);
    expect(declaredDead).toEqual([]);
    // Exactly once and complete (fire-support.ts); no job row left locked or unrelayed.
    expectExactlyOnceAndComplete(acc, end, ORDERS);
    expect(lockedRows[0]?.n).toBe(0);
    expect(relayRows[0]?.n).toBe(0);
    expect(logFindings).toEqual([]);
  });
});
