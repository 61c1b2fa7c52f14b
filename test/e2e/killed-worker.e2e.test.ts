import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client as PgClient } from 'pg';
import pino from 'pino';
import { MllpClient } from '../../src/hl7';
import { JobQueue } from '../../src/jobs/job-queue';
import { POLL_LEASE_MS } from '../../src/orders/order-poller.service';
import { freePort } from '../../src/persistence/embedded-postgres';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { OUTBOX_CLAIM_LEASE_MS } from '../../src/outbound/outbox.worker';
import { ACQUISITION_LEASE_MS } from '../../src/studies/study-acquirer.service';
import { TEST_TOKENS } from '../helpers/adapter';
import { spawnAdapter, waitHealthy, type AdapterProcess } from '../helpers/adapter-process';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { ackSummary } from '../helpers/hl7-fixtures';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import { startFaultyProxy } from '../imaging-client/faulty-proxy';
import { startAckingRis, type TestRis } from '../outbound/outbound-peers';
import {
  newOrderSpec,
  orderByPlacer,
  orderState,
  ormMessage,
  SANDBOX_CLIENT,
  studyFor,
  waitFor,
  writeSiteConfig,
} from './e2e-support';

jest.setTimeout(300_000);

const DEAD_AFTER_S = 10;

/** An HL7 message whose ORC-2 (placer order number, EI) is this placer's. */
const aboutPlacer = (message: string, placer: string) =>
  message
    .split(/\r\n?|\n/)
    .some((seg) => seg.startsWith('ORC|') && seg.split('|')[2]?.split('^')[0] === placer);

/**
 * kill -9 of a real adapter process (`src/main.ts`) while it holds something, then a restart
 * on the same database: (1) a job running when the process dies (placing an order, its
 * `POST /new-order` held by a proxy) runs again within the dead-worker threshold
 * (JOB_WORKER_DEAD_AFTER_SECONDS) instead of graphile-worker's 4 hours, and is never taken
 * from the process while it lives; (2) a poll cycle killed mid-way (its `GET /list-orders`
 * held) blocks polling for at most the short poll lease instead of 10 minutes; (3) a study
 * acquisition killed mid-way (its PACS request held) holds the order for at most the short
 * acquisition lease instead of 30 minutes; (4) a result message killed mid-delivery (the RIS
 * holding its ACK) goes out again after the short outbox claim lease instead of 2 minutes.
 */
describe('a killed process frees its jobs and its leases', () => {
  let db: TestDatabase;
  let pg: PgClient;
  let sandbox: RunningSandbox;
  let orthanc: RunningOrthanc;
  let proxy: Awaited<ReturnType<typeof startFaultyProxy>>;
  let pacsProxy: Awaited<ReturnType<typeof startFaultyProxy>>;
  let env: Record<string, string>;
  let httpUrl: string;
  let mllpPort: number;
  let proc: AdapterProcess | undefined;
  let ris: TestRis;
  /** While set, the RIS holds its ACK of the next message about this placer order (then AA). */
  let risHold: { placer: string; ms: number } | undefined;
  /** A held call: an upstream path, or `pacs` for every request to the PACS. */
  let hold: { path: string; gate: Promise<void>; open: () => void } | undefined;

  const holdCalls = (path: string) => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    hold = { path, gate, open };
    return () => {
      hold = undefined;
      open();
    };
  };
  const hits = (path: string) => proxy.hits.filter((h) => h.path === path).length;

  const start = async (): Promise<number> => {
    proc = spawnAdapter(env);
    await waitHealthy(httpUrl, 90_000, proc);
    return Date.now();
  };
  const kill = async (): Promise<number> => {
    proc!.child.kill('SIGKILL');
    await proc!.exited;
    return Date.now();
  };

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'e2e-killed-'));
    db = await createTestDatabase();
    pg = new PgClient({ connectionString: db.url });
    await pg.connect();
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', dataDir: join(dir, 'sandbox') });
    proxy = await startFaultyProxy(sandbox.baseUrl, (_method, path) =>
      hold && path === hold.path ? { until: hold.gate } : 'pass',
    );
    orthanc = await startOrthanc();
    pacsProxy = await startFaultyProxy(orthanc.dicomWebUrl, () =>
      hold?.path === 'pacs' ? { until: hold.gate } : 'pass',
    );
    ris = await startAckingRis(
      () => 'AA',
      undefined,
      (_n, message) => {
        if (!risHold || !aboutPlacer(message, risHold.placer)) return 0;
        const { ms } = risHold;
        risHold = undefined;
        return ms;
      },
    );
    const httpPort = await freePort();
    mllpPort = await freePort();
    httpUrl = `http://127.0.0.1:${httpPort}`;
    env = {
      DATABASE_URL: db.url,
      HTTP_PORT: String(httpPort),
      HTTP_HOST: '127.0.0.1',
      MLLP_PORT: String(mllpPort),
      MLLP_HOST: '127.0.0.1',
      DATA_DIR: join(dir, 'data'),
      IMAGING_BASE_URL: proxy.baseUrl,
      ...SANDBOX_CLIENT,
      IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true',
      DICOMWEB_URL: pacsProxy.baseUrl,
      // Status messages to the RIS: the outbox rows of case (4).
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: String(ris.port),
      RIS_ORM_STATUS_MESSAGES: 'true',
      RIS_MLLP_TIMEOUT_SECONDS: '120',
      STUDY_QUIET_PERIOD_SECONDS: '1',
      CONFIG_FILE: writeSiteConfig(dir),
      POLL_INTERVAL_SECONDS: '3600',
      JOB_WORKER_DEAD_AFTER_SECONDS: String(DEAD_AFTER_S),
      API_TOKENS: Object.entries(TEST_TOKENS)
        .map(([role, token]) => `${role}:${token}`)
        .join(','),
    };
    await start();
  });
  afterAll(async () => {
    hold?.open();
    if (proc && proc.child.exitCode === null && proc.child.signalCode === null) {
      proc.child.kill('SIGTERM');
      await proc.exited;
    }
    await pg?.end();
    await proxy?.close();
    await pacsProxy?.close();
    await ris?.close();
    await orthanc?.stop();
    await sandbox?.close();
    await db?.drop();
  });

  it('a job cut by kill -9 runs again within the threshold after a restart, and only then', async () => {
    const release = holdCalls('/new-order');
    const spec = newOrderSpec('sandbox-outcome: delivered');
    const mllp = new MllpClient({ host: '127.0.0.1', port: mllpPort, responseTimeoutMs: 10_000 });
    try {
      expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    } finally {
      await mllp.close();
    }
    const order = await waitFor('the order', () => orderByPlacer(pg, spec.placer));
    await waitFor('the place job calling upstream', async () => hits('/new-order') > 0);

    // The running job is locked by the process's worker pool, which has a heartbeat row.
    const lock = async () =>
      (
        await pg.query(
          `SELECT j.locked_by, h.process FROM graphile_worker._private_jobs j
             LEFT JOIN job_worker_heartbeats h ON h.worker_id = j.locked_by
            WHERE j.key = $1`,
          [`place:${order.id}`],
        )
      ).rows[0] as { locked_by: string | null; process: string | null } | undefined;
    const held = await lock();
    expect(held?.locked_by).toMatch(/^pool-/);
    expect(held?.process).toMatch(new RegExp(`:${proc!.child.pid}$`));

    // Alive and held past the threshold: a sweep (here from the test, as another replica
    // would) never frees it, and upstream saw one create.
    const sweeper = new JobQueue({
      url: db.url,
      concurrency: 1,
      logger: pino({ level: 'silent' }),
      deadWorkerAfterMs: DEAD_AFTER_S * 1000,
    });
    try {
      const until = Date.now() + (DEAD_AFTER_S + 3) * 1000;
      while (Date.now() < until) {
        expect(await sweeper.sweepDeadWorkers()).toEqual([]);
        await sleep(1_000);
      }
    } finally {
      await sweeper.stop();
    }
    expect((await lock())?.locked_by).toBe(held!.locked_by);
    expect(hits('/new-order')).toBe(1);

    const killedAt = await kill();
    // The dead process's request reaches the upstream after all (it acted, nobody heard).
    release();
    const restartedAt = await start();
    const placed = await waitFor(
      'the order placed after the restart',
      async () => (await orderByPlacer(pg, spec.placer))?.upstream_order_id,
      4 * DEAD_AFTER_S * 1000,
      100,
    );
    const placedAt = Date.now();
    const figures = {
      deadAfterSeconds: DEAD_AFTER_S,
      restartSeconds: (restartedAt - killedAt) / 1000,
      placedAfterKillSeconds: (placedAt - killedAt) / 1000,
      placedAfterRestartSeconds: (placedAt - restartedAt) / 1000,
    };
    process.stdout.write(`KILLED-WORKER ${JSON.stringify(figures)}\n`);
    // Not before the heartbeat is stale; within threshold + the restarted sweeper's own
    // healthy period (one threshold) + a heartbeat period and a poll, with CI slack.
    expect(placedAt - killedAt).toBeGreaterThanOrEqual(DEAD_AFTER_S * 1000);
    expect(placedAt - restartedAt).toBeLessThan((2 * DEAD_AFTER_S + 5) * 1000);
    // One upstream order for it: the re-run found the dead run's order by correlation id.
    const upstream = [...sandbox.state.orders.values()].filter(
      (o) => (o.apiMetadata as Record<string, unknown>).correlation_id === order.id,
    );
    expect(upstream.map((o) => o.orderId)).toEqual([placed]);
    expect(proc!.output()).toContain('jobs of dead job workers unlocked');
  });

  it('a poll cycle cut by kill -9 blocks polling only for the short lease', async () => {
    const release = holdCalls('/list-orders');
    const before = hits('/list-orders');
    const admin = { authorization: `Bearer ${TEST_TOKENS.admin}` };
    void fetch(`${httpUrl}/api/orders/poll-cycle`, { method: 'POST', headers: admin }).catch(
      () => undefined,
    );
    await waitFor('a poll cycle calling upstream', async () => hits('/list-orders') > before);
    const { rows } = await pg.query(
      `SELECT running_owner FROM poll_schedule WHERE name = 'upstream-poll'`,
    );
    expect(rows[0].running_owner).toMatch(new RegExp(`:${proc!.child.pid}:`));

    const killedAt = await kill();
    release();
    const restartedAt = await start();
    let skipped = 0;
    await waitFor(
      'a poll cycle after the restart',
      async () => {
        const res = await fetch(`${httpUrl}/api/orders/poll-cycle`, {
          method: 'POST',
          headers: admin,
        });
        const body = (await res.json()) as { skipped?: boolean; upstreamCalls?: number };
        if (body.skipped) skipped++;
        return res.status === 200 && !body.skipped && body.upstreamCalls !== undefined;
      },
      POLL_LEASE_MS + 30_000,
      250,
    );
    const polledAt = Date.now();
    process.stdout.write(
      `KILLED-POLL ${JSON.stringify({
        leaseSeconds: POLL_LEASE_MS / 1000,
        restartSeconds: (restartedAt - killedAt) / 1000,
        polledAfterKillSeconds: (polledAt - killedAt) / 1000,
        skippedWhileLeaseHeld: skipped,
      })}\n`,
    );
    // The dead cycle's lease held (the lease is real) but not longer than its length.
    expect(polledAt - killedAt).toBeLessThan(POLL_LEASE_MS + 5_000);
    if (restartedAt - killedAt < POLL_LEASE_MS - 2_000) expect(skipped).toBeGreaterThan(0);
  });
  it('a study acquisition cut by kill -9 holds the order only for the short acquisition lease', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    for (const instance of studyFor({ ...spec, slices: 2 })) await orthanc.store(instance.bytes);
    const release = holdCalls('pacs');
    const before = pacsProxy.hits.length;
    const mllp = new MllpClient({ host: '127.0.0.1', port: mllpPort, responseTimeoutMs: 10_000 });
    try {
      expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    } finally {
      await mllp.close();
    }
    const order = await waitFor('the order', () => orderByPlacer(pg, spec.placer));
    // Its acquisition holds the lease while its PACS request is held.
    const leftMs = await waitFor(
      'the acquisition holding its lease, asking the PACS',
      async () => {
        const { rows } = await pg.query(
          `SELECT extract(epoch FROM lease_until - now()) * 1000 AS left_ms FROM study_acquisitions
            WHERE order_id = $1 AND lease_until > now()`,
          [order.id],
        );
        return rows[0] && pacsProxy.hits.length > before ? Number(rows[0].left_ms) : undefined;
      },
      60_000,
      100,
    );
    expect(leftMs).toBeLessThanOrEqual(ACQUISITION_LEASE_MS);

    const killedAt = await kill();
    release();
    const restartedAt = await start();
    await waitFor(
      'the study acquired after the restart',
      async () => (await orderState(pg, order.id)) !== 'placed',
      ACQUISITION_LEASE_MS + 60_000,
      250,
    );
    const acquiredAt = Date.now();
    process.stdout.write(
      `KILLED-ACQUIRE ${JSON.stringify({
        acquisitionLeaseSeconds: ACQUISITION_LEASE_MS / 1000,
        restartSeconds: (restartedAt - killedAt) / 1000,
        acquiredAfterKillSeconds: (acquiredAt - killedAt) / 1000,
      })}\n`,
    );
    expect(await orderState(pg, order.id)).not.toBe('failed');
    // The lease the dead run left, a retry period (5 s) and a job poll, with CI slack.
    expect(acquiredAt - killedAt).toBeLessThan(ACQUISITION_LEASE_MS + 20_000);
  });

  it('a result message cut by kill -9 goes out again after the short claim lease', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    for (const instance of studyFor({ ...spec, slices: 2 })) await orthanc.store(instance.bytes);
    const mllp = new MllpClient({ host: '127.0.0.1', port: mllpPort, responseTimeoutMs: 10_000 });
    try {
      expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    } finally {
      await mllp.close();
    }
    const order = await waitFor('the order', () => orderByPlacer(pg, spec.placer));
    const hl7Rows = async () =>
      (
        await pg.query(
          `SELECT id::text, status, attempts, claimed_by,
                  extract(epoch FROM next_attempt_at - now()) * 1000 AS lease_left_ms
             FROM outbox WHERE order_id = $1 AND destination = 'ris-hl7' ORDER BY id`,
          [order.id],
        )
      ).rows as Array<{
        id: string;
        status: string;
        attempts: number;
        claimed_by: string | null;
        lease_left_ms: number;
      }>;
    // The first status message to the RIS: its ACK is held (longer than a lease) while the
    // adapter waits, so the row is claimed and its delivery in flight when the process dies.
    const admin = { authorization: `Bearer ${TEST_TOKENS.admin}` };
    const receivedBefore = ris.received.length;
    risHold = { placer: spec.placer, ms: 90_000 };
    const held = await waitFor(
      'a status message to the RIS in flight',
      async () => {
        await fetch(`${httpUrl}/api/orders/poll-cycle`, { method: 'POST', headers: admin });
        const rows = await hl7Rows();
        return !risHold && rows[0]?.claimed_by ? rows[0] : undefined;
      },
      120_000,
      500,
    );
    expect(held.status).toBe('pending');
    expect(Number(held.lease_left_ms)).toBeLessThanOrEqual(OUTBOX_CLAIM_LEASE_MS);
    // Held for two thirds of the lease: renewed (every third of it) rather than running out,
    // the lease left is at least two thirds of it (without renewal: under a third).
    await sleep((2 * OUTBOX_CLAIM_LEASE_MS) / 3 + 2_000);
    const renewed = (await hl7Rows())[0]!;
    expect(renewed).toMatchObject({ id: held.id, status: 'pending', attempts: 1 });
    expect(Number(renewed.lease_left_ms)).toBeGreaterThan(OUTBOX_CLAIM_LEASE_MS / 2);

    const killedAt = await kill();
    const restartedAt = await start();
    const delivered = await waitFor(
      'the status message delivered after the restart',
      async () => {
        const row = (await hl7Rows()).find((r) => r.id === held.id);
        return row?.status === 'delivered' ? row : undefined;
      },
      OUTBOX_CLAIM_LEASE_MS + 60_000,
      250,
    );
    const deliveredAt = Date.now();
    process.stdout.write(
      `KILLED-OUTBOX ${JSON.stringify({
        claimLeaseSeconds: OUTBOX_CLAIM_LEASE_MS / 1000,
        restartSeconds: (restartedAt - killedAt) / 1000,
        deliveredAfterKillSeconds: (deliveredAt - killedAt) / 1000,
        attempts: delivered.attempts,
      })}\n`,
    );
    // Taken again once the dead process's lease lapsed (it was renewed, so up to one lease
    // after the kill), not after the former 2-minute lease; a second attempt, no more.
    expect(delivered.attempts).toBe(2);
    expect(deliveredAt - killedAt).toBeLessThan(OUTBOX_CLAIM_LEASE_MS + 15_000);
    // The RIS got the message twice under one MSH-10 (a resend it can de-duplicate).
    const controlIds = ris.received
      .slice(receivedBefore)
      .filter((m) => aboutPlacer(m, spec.placer))
      .map((m) => m.split(/\r|\n/)[0]!.split('|')[9]);
    const counts = new Map<string, number>();
    for (const id of controlIds) counts.set(id!, (counts.get(id!) ?? 0) + 1);
    expect([...counts.values()].some((n) => n === 2)).toBe(true);
  });
});
