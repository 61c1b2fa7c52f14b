import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
import { freePort } from '../../src/persistence/embedded-postgres';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { TEST_TOKENS } from '../helpers/adapter';
import { spawnAdapter, waitHealthy, type AdapterProcess } from '../helpers/adapter-process';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { ackSummary } from '../helpers/hl7-fixtures';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import {
  newOrderSpec,
  orderByPlacer,
  orderDiagnostics,
  ormMessage,
  SANDBOX_CLIENT,
  studyFor,
  waitFor,
  writeSiteConfig,
} from './e2e-support';

jest.setTimeout(300_000);

interface Replica {
  proc: AdapterProcess;
  httpUrl: string;
  mllpPort: number;
}

/**
 * Two adapter processes on one database. The study is large enough for a multipart upload
 * and the sandbox's storage answers each part slowly, so the replica holding the upload can
 * be killed (SIGKILL) in the middle of it. The other replica takes the upload over once the
 * lease lapses and resumes it: one upstream order, one completed upload.
 */
describe('two replicas, one killed mid-upload', () => {
  let db: TestDatabase;
  let pg: PgClient;
  let orthanc: RunningOrthanc;
  let sandbox: RunningSandbox;
  let dir: string;
  const replicas: Replica[] = [];

  /** The order's state and audit timeline, plus where each replica's log was written. */
  const diagnose = async (orderId: string): Promise<string> => {
    const logs = replicas.map((r, i) => {
      const path = join(dir, `replica-${i}.log`);
      writeFileSync(path, r.proc.output());
      const { exitCode, signalCode } = r.proc.child;
      const state =
        exitCode === null && signalCode === null ? 'alive' : `exited ${signalCode ?? exitCode}`;
      return `replica ${i} (pid ${r.proc.child.pid}, ${state}): log ${path}`;
    });
    return `${await orderDiagnostics(pg, orderId)}\n${logs.join('\n')}`;
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'e2e-replicas-'));
    db = await createTestDatabase();
    pg = new PgClient({ connectionString: db.url });
    await pg.connect();
    orthanc = await startOrthanc();
    sandbox = await startSandbox({
      port: 0,
      host: '127.0.0.1',
      dataDir: join(dir, 'sandbox'),
      faults: { endpoints: { storage: { slowMs: 1_500, slowShare: 1 } } },
    });
    const config = writeSiteConfig(dir);
    // Replica 0 starts first and runs the migrations; replica 1 then finds them applied.
    for (let i = 0; i < 2; i++) {
      const httpPort = await freePort();
      const mllpPort = await freePort();
      const proc = spawnAdapter({
        DATABASE_URL: db.url,
        HTTP_PORT: String(httpPort),
        HTTP_HOST: '127.0.0.1',
        MLLP_PORT: String(mllpPort),
        MLLP_HOST: '127.0.0.1',
        // Replicas on one host share the study store, as they would share a volume.
        DATA_DIR: join(dir, 'data'),
        IMAGING_BASE_URL: sandbox.baseUrl,
        ...SANDBOX_CLIENT,
        IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true',
        IMAGING_UPLOAD_PART_CONCURRENCY: '1',
        ORDER_LEASE_SECONDS: '3',
        DICOMWEB_URL: orthanc.dicomWebUrl,
        STUDY_QUIET_PERIOD_SECONDS: '1',
        CONFIG_FILE: config,
        POLL_INTERVAL_SECONDS: '3600',
        LOG_LEVEL: process.env.E2E_LOG_LEVEL ?? 'warn',
        API_TOKENS: Object.entries(TEST_TOKENS)
          .map(([role, token]) => `${role}:${token}`)
          .join(','),
      });
      const httpUrl = `http://127.0.0.1:${httpPort}`;
      await waitHealthy(httpUrl, 90_000, proc);
      replicas.push({ proc, httpUrl, mllpPort });
    }
  });
  afterAll(async () => {
    for (const r of replicas) {
      if (r.proc.child.exitCode === null && r.proc.child.signalCode === null) {
        r.proc.child.kill('SIGTERM');
        await r.proc.exited;
      }
    }
    await pg?.end();
    await sandbox?.close();
    await orthanc?.stop();
    await db?.drop();
  });

  it('ends with exactly one upstream order and one upload', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    // 48 slices of 512 x 512 x 16 bit: about 24 MiB, three 10 MiB parts.
    for (const instance of studyFor({ ...spec, slices: 48, rows: 512 })) {
      await orthanc.store(instance.bytes);
    }
    const mllp = new MllpClient({
      host: '127.0.0.1',
      port: replicas[0]!.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    } finally {
      await mllp.close();
    }
    const order = await waitFor('the order', () => orderByPlacer(pg, spec.placer));

    // Wait until one replica holds the upload and has sent at least one part. Both replicas
    // must still be alive, and the upload not yet past: either would make the wait hopeless,
    // so it ends at once with the order's timeline.
    const holder = await waitFor(
      'a part uploaded',
      async () => {
        const { rows } = await pg.query(
          `SELECT o.state, o.lease_owner, p.parts FROM orders o
             LEFT JOIN imaging_upload_progress p ON p.order_id = o.upstream_order_id
            WHERE o.id = $1`,
          [order.id],
        );
        const row = rows[0] as
          | { state: string; lease_owner: string | null; parts: Record<string, string> | null }
          | undefined;
        const dead = replicas.filter((r) => r.proc.child.exitCode !== null);
        if (dead.length > 0 || ['processing', 'delivered', 'failed'].includes(row?.state ?? '')) {
          throw new Error(
            `${dead.length > 0 ? 'a replica died before the kill' : `the order went ${row?.state} before a part was seen`}\n${await diagnose(order.id)}`,
          );
        }
        return row?.state === 'uploading' && Object.keys(row.parts ?? {}).length >= 1
          ? row.lease_owner
          : undefined;
      },
      120_000,
      100,
      () => diagnose(order.id),
    );
    const pid = Number(holder.split(':')[1]);
    const victim = replicas.find((r) => r.proc.child.pid === pid);
    expect(victim).toBeDefined();
    victim!.proc.child.kill('SIGKILL');
    await victim!.proc.exited;
    const survivor = replicas.find((r) => r !== victim)!;

    // The survivor's tick finds the lapsed lease and resumes the upload (the cron tick runs
    // every minute; an operator, or this test, can run it at once).
    await waitFor(
      'the upload resumed and completed',
      async () => {
        await fetch(`${survivor.httpUrl}/api/orders/poll-cycle`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
        });
        const { rows } = await pg.query(`SELECT state FROM orders WHERE id = $1`, [order.id]);
        return ['processing', 'delivered'].includes(rows[0].state as string);
      },
      120_000,
      2_000,
      () => diagnose(order.id),
    );

    const upstream = [...sandbox.state.orders.values()];
    expect(upstream).toHaveLength(1);
    expect(sandbox.state.completedUploads).toHaveLength(1);
    const { rows } = await pg.query(
      `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'order.transition' AND detail->>'from' = 'uploading' AND detail->>'to' = 'processing'`,
      [order.id],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].detail).toMatchObject({ mode: 'multipart' });
    expect(rows[0].detail.resumedParts).toBeGreaterThanOrEqual(1);
    expect(rows[0].detail.worker).not.toBe(holder);
  });
});
