import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TERMINAL_UPSTREAM_STATUSES } from '../../src/imaging-spec/imaging-spec';
import { parseSandboxEnv } from '../../src/sandbox/sandbox-options';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { createMrBrainSeries, generateUid, zipStudy } from '../helpers/dicom-factory';
import {
  buildClient,
  startTestSandbox,
  waitForStatus,
  type ClientUnderTest,
} from './sandbox-harness';

/**
 * The fault scenario: a fifth of all calls (API and storage) fail with 500/503, 429
 * or a dropped connection — including connections dropped after the upstream acted, the
 * case where a create must not be repeated. Every operation must still complete, and no
 * order may exist twice.
 */
const FAULTS = JSON.stringify({
  seed: 20261121,
  '*': { error5xx: 0.1, rate429: 0.05, drop: 0.025, dropAfter: 0.025 },
  '/new-order': { error5xx: 0.05, rate429: 0.05, drop: 0.05, dropAfter: 0.05 },
  storage: { error5xx: 0.1, rate429: 0.05, drop: 0.05 },
});

const terminal = (s: string) => (TERMINAL_UPSTREAM_STATUSES as readonly string[]).includes(s);

let db: TestDatabase;
let peer: Awaited<ReturnType<typeof startTestSandbox>>;
let c: ClientUnderTest;
let dir: string;

beforeAll(async () => {
  const env = parseSandboxEnv({ SANDBOX_FAULTS: FAULTS });
  if (!env.ok) throw new Error(env.errors.join('\n'));
  db = await createTestDatabase();
  peer = await startTestSandbox({ faults: env.options.faults });
  c = buildClient(peer.sandbox.baseUrl, {
    dataSource: db.dataSource,
    retry: { maxAttempts: 10, baseDelayMs: 10, maxDelayMs: 200 },
  });
  dir = await mkdtemp(join(tmpdir(), 'imaging-client-faults-'));
});

afterAll(async () => {
  await c?.close();
  await peer?.close();
  await db?.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function smallStudy(studyUid: string): Promise<string> {
  const path = join(dir, `${studyUid}.zip`);
  await writeFile(
    path,
    await zipStudy(createMrBrainSeries({ study: { studyInstanceUid: studyUid } })),
  );
  return path;
}

describe('ImagingClient under injected faults (SANDBOX_FAULTS)', () => {
  it('completes every operation and never creates an order twice', async () => {
    const ORDERS = 24;
    const studies = Array.from({ length: ORDERS }, () => ({
      studyUid: generateUid(),
      correlationId: randomUUID(),
    }));
    const created = await Promise.all(
      studies.map(async (s) => {
        const { orderId, recovered } = await c.client.createOrder(
          { study_uid: s.studyUid, patient_id: 'SBX-000123', modality: 'MR' },
          { correlationId: s.correlationId },
        );
        return { ...s, orderId, recovered };
      }),
    );

    // One active order per correlation id, and every id we were given is that order.
    const active = (await c.client.listOrders()).filter((o) => o.status === 'PENDING');
    const byCorrelation = new Map<string, string[]>();
    for (const order of active) {
      const { metadata } = await c.client.getMetadata({ orderId: order.orderId });
      const key = String(metadata.correlation_id);
      byCorrelation.set(key, [...(byCorrelation.get(key) ?? []), order.orderId]);
    }
    for (const s of created) expect(byCorrelation.get(s.correlationId)).toEqual([s.orderId]);
    expect(active).toHaveLength(ORDERS);

    // One multipart study among the single PUTs; storage is faulty too.
    const big = created[0];
    const bigPath = join(dir, 'big.zip');
    await writeFile(
      bigPath,
      await zipStudy(
        createMrBrainSeries({
          study: { studyInstanceUid: big.studyUid },
          series: { slices: 48, rows: 256, columns: 256 },
        }),
        [],
        { store: true },
      ),
    );
    await Promise.all(
      created.map(async (s, i) => {
        await c.client.addMetadata(
          { orderId: s.orderId },
          { priority: i % 2 ? 'routine' : 'urgent' },
        );
        await c.uploader.upload(s.orderId, s === big ? bigPath : await smallStudy(s.studyUid));
      }),
    );
    const finals = await Promise.all(
      created.map((s) => waitForStatus(c.client, s.orderId, terminal, 60_000)),
    );
    expect(finals).toEqual(created.map(() => 'DELIVERED'));
    for (const s of created.slice(0, 6)) {
      const doc = await c.client.getResults({ orderId: s.orderId }, 'JSON');
      expect(doc.body.length).toBeGreaterThan(0);
    }

    // The faults did happen, and were absorbed by retries.
    const retried = c.records.filter((r) => r.attempts > 1);
    expect(retried.length).toBeGreaterThan(5);
    // The only failed calls allowed are replays whose first answer was lost: a complete or a
    // single PUT refused with 409 because the first one landed (the uploader confirms it
    // from the order's status).
    const failed = c.records.filter((r) => r.outcome === 'error');
    const replays = ['multipart-complete', 'upload-single-put'];
    expect(failed.filter((r) => !(replays.includes(r.operation) && r.status === 409))).toEqual([]);
    expect(
      await db.dataSource.query('SELECT count(*)::int AS n FROM imaging_upload_progress'),
    ).toEqual([{ n: 0 }]);
  });
});
