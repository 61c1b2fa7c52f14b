import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { ImagingClientError } from '../../src/imaging-client';
import { DEFAULT_STEP_SECONDS } from '../../src/sandbox/sandbox-options';
import { TERMINAL_UPSTREAM_STATUSES } from '../../src/imaging-spec/imaging-spec';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import {
  createMrBrainSeries,
  DEFAULT_PATIENT,
  generateUid,
  zipStudy,
} from '../helpers/dicom-factory';
import { codeOf } from './error-code';
import {
  buildClient,
  startTestSandbox,
  waitForStatus,
  type ClientUnderTest,
} from './sandbox-harness';

const terminal = (s: string) => (TERMINAL_UPSTREAM_STATUSES as readonly string[]).includes(s);

let db: TestDatabase;
let peer: Awaited<ReturnType<typeof startTestSandbox>>;
let c: ClientUnderTest;
let dir: string;

beforeAll(async () => {
  db = await createTestDatabase();
  // The QC bypass verdict is held back (30 s) so a pending request can still be withdrawn.
  peer = await startTestSandbox({ steps: { ...DEFAULT_STEP_SECONDS, bypassVerdict: 3_000 } });
  c = buildClient(peer.sandbox.baseUrl, { dataSource: db.dataSource });
  dir = await mkdtemp(join(tmpdir(), 'imaging-client-it-'));
});

afterAll(async () => {
  await c?.close();
  await peer?.close();
  await db?.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

function metadataFor(studyUid: string, extra: Record<string, unknown> = {}) {
  return {
    patient_id: DEFAULT_PATIENT.patientId,
    patient_name: DEFAULT_PATIENT.patientName.replace(/\^+$/, ''),
    patient_birth_date: DEFAULT_PATIENT.birthDate,
    patient_sex: DEFAULT_PATIENT.sex,
    accession_number: `ACC${Date.now() % 1_000_000}`,
    study_uid: studyUid,
    modality: 'MR',
    priority: 'routine',
    ...extra,
  };
}

async function studyZip(
  name: string,
  slices: number,
  size: number,
  studyUid: string,
): Promise<string> {
  const series = createMrBrainSeries({
    study: { studyInstanceUid: studyUid },
    series: { slices, rows: size, columns: size },
  });
  const path = join(dir, name);
  await writeFile(path, await zipStudy(series, [], { store: true }));
  return path;
}

describe('ImagingClient against the sandbox', () => {
  it('authenticates and checks the token', async () => {
    const check = await c.client.testToken();
    expect(check.valid).toBe(true);
  });

  it('lists products with UDI and fda_desc', async () => {
    const products = await c.client.getProducts();
    expect(products.length).toBeGreaterThan(0);
    for (const p of products) {
      expect(p).toHaveProperty('UDI');
      expect(p).toHaveProperty('fda_desc');
    }
  });

  it('creates an order, adds metadata, uploads a small study by single PUT and gets the results', async () => {
    const studyUid = generateUid();
    const [product] = await c.client.getProducts();
    const correlationId = randomUUID();
    const { orderId, recovered } = await c.client.createOrder(
      metadataFor(studyUid, { products: [product.id] }),
      {
        correlationId,
      },
    );
    expect(recovered).toBe(false);
    expect(await c.client.getStatus({ orderId })).toMatchObject({ orderId, status: 'PENDING' });

    const updated = await c.client.addMetadata(
      { orderId },
      { referring_physician: 'Referrer^Rita' },
    );
    expect(updated.metadata).toMatchObject({
      referring_physician: 'Referrer^Rita',
      correlation_id: correlationId,
    });
    expect((await c.client.getMetadata({ orderId })).metadata.study_uid).toBe(studyUid);
    expect(await c.client.findOrderByCorrelationId(correlationId)).toBe(orderId);

    const path = await studyZip('small.zip', 4, 32, studyUid);
    await expect(c.uploader.upload(orderId, path)).resolves.toMatchObject({ mode: 'single' });
    expect(await waitForStatus(c.client, orderId, terminal)).toBe('DELIVERED');

    const pdf = await c.client.getResults({ orderId }, 'PDF');
    expect(pdf.body.subarray(0, 5).toString()).toBe('%PDF-');
    const report = await c.client.getResults({ studyUid }, 'JSON');
    expect(() => JSON.parse(report.body.toString())).not.toThrow();
    expect(await c.client.getRecentActivity()).toEqual(
      expect.arrayContaining([expect.objectContaining({ orderId })]),
    );

    const polled = await c.client.pollReports();
    const mine = polled.filter((r) => r.order_id === orderId);
    expect(mine.length).toBeGreaterThan(0);
    const ack = await c.client.acknowledgeReports(mine.map((r) => r.report_id));
    expect(ack.acknowledged).toBe(mine.length);
    expect((await c.client.pollReports()).filter((r) => r.order_id === orderId)).toEqual([]);
  });

  it('uploads a study of 5 MB or more by multipart and the order processes', async () => {
    const studyUid = generateUid();
    const path = await studyZip('multi.zip', 48, 256, studyUid);
    const { orderId } = await c.client.createOrder(metadataFor(studyUid), {
      correlationId: randomUUID(),
    });
    const result = await c.uploader.upload(orderId, path);
    expect(result).toMatchObject({ mode: 'multipart', partCount: 1 });
    expect(await waitForStatus(c.client, orderId, terminal)).toBe('DELIVERED');
    const parts = c.records.filter((r) => r.operation === 'upload-part' && r.orderId === orderId);
    expect(parts.every((r) => r.endpoint === '<presigned-url>' && r.status === 200)).toBe(true);
    expect(await db.dataSource.query('SELECT * FROM imaging_upload_progress')).toEqual([]);
  });

  it('handles a QC rejection: QC report with its round, no failure report, bypass and withdrawal', async () => {
    const studyUid = generateUid();
    const { orderId } = await c.client.createOrder(
      metadataFor(studyUid, { sandbox_outcome: 'qc_failed' }),
      {
        correlationId: randomUUID(),
      },
    );
    await c.uploader.upload(orderId, await studyZip('qc.zip', 4, 32, studyUid));
    expect(await waitForStatus(c.client, orderId, (s) => s === 'QC_FAILED' || terminal(s))).toBe(
      'QC_FAILED',
    );
    const qc = await c.client.getQcReport(orderId, 'results', 'latest');
    expect(qc.round).toBe('original');
    const failure = (await c.client
      .getFailureReport({ orderId }, 'JSON')
      .catch((e: unknown) => e)) as ImagingClientError;
    expect(failure.code).toBe('not_found');
    expect(failure.operation).toBe('failure-report');
    await expect(
      c.client.requestQcBypass(orderId, { reason: 'motion acceptable per radiologist' }),
    ).resolves.toMatchObject({
      bypassRequested: true,
    });
    await expect(c.client.requestQcBypass(orderId, { withdraw: true })).resolves.toMatchObject({
      bypassRequested: false,
    });
  });

  it('gets the failure report of a failed order', async () => {
    const studyUid = generateUid();
    const { orderId } = await c.client.createOrder(
      metadataFor(studyUid, { sandbox_outcome: 'failed' }),
      {
        correlationId: randomUUID(),
      },
    );
    await c.uploader.upload(orderId, await studyZip('failed.zip', 4, 32, studyUid));
    expect(await waitForStatus(c.client, orderId, terminal)).toBe('FAILED');
    for (const type of ['CSV', 'TXT', 'JSON'] as const) {
      const doc = await c.client.getFailureReport({ orderId }, type);
      expect(doc.body.length).toBeGreaterThan(0);
    }
  });

  it('groups orders in a batch and refuses a products mismatch', async () => {
    const products = (await c.client.getProducts()).map((p) => p.id);
    const { batchId } = await c.client.createBatch([products[0]]);
    const { orderId } = await c.client.createOrder(
      metadataFor(generateUid(), { products: [products[0]] }),
      {
        correlationId: randomUUID(),
      },
    );
    await expect(c.client.associateOrderToBatch(orderId, batchId)).resolves.toEqual({
      orderId,
      batchId,
    });
    const aggregated = await c.client.getBatchReport(batchId, 'JSON');
    expect(JSON.parse(aggregated.body.toString())).toMatchObject({ study_group: batchId });
    expect((await c.client.listOrders()).find((o) => o.orderId === orderId)?.batchId).toBe(batchId);
    if (products.length > 1) {
      const other = await c.client.createOrder(
        metadataFor(generateUid(), { products: [products[1]] }),
        {
          correlationId: randomUUID(),
        },
      );
      const error = (await c.client
        .associateOrderToBatch(other.orderId, batchId)
        .catch((e: unknown) => e)) as ImagingClientError;
      expect(error.code).toBe('conflict');
    }
  });

  it('cancels an order, and a second cancel is a conflict', async () => {
    const { orderId } = await c.client.createOrder(metadataFor(generateUid()), {
      correlationId: randomUUID(),
    });
    await expect(c.client.cancelOrder(orderId)).resolves.toMatchObject({
      orderId,
      status: 'CANCELLED',
    });
    expect(await codeOf(c.client.cancelOrder(orderId))).toBe('conflict');
    expect(await codeOf(c.client.getStatus({ orderId: randomUUID() }))).toBe('not_found');
  });

  it('sends agent reports and reads the agent heartbeat', async () => {
    const studyUid = generateUid();
    const { orderId } = await c.client.createOrder(metadataFor(studyUid), {
      correlationId: randomUUID(),
    });
    // The sandbox registers an Agent by its first heartbeat.
    expect(Array.isArray(await c.client.agentHeartbeat('agent-1'))).toBe(true);
    const result = await c.client.sendAgentReports('agent-1', [
      { orderId, kind: 'failure', content: { reason: 'pixel data incomplete' } },
    ]);
    expect(result.accepted + result.rejected.length).toBe(1);
  });

  it('refuses bad metadata with a typed, non-retried error', async () => {
    const error = (await c.client
      .createOrder(metadataFor(generateUid(), { patient_sex: 'X', priority: 'whenever' }), {
        correlationId: randomUUID(),
      })
      .catch((e: unknown) => e)) as ImagingClientError;
    expect(error).toBeInstanceOf(ImagingClientError);
    expect(error.code).toBe('bad_request');
    expect(error.operation).toBe('new-order');
    expect(error.attempts).toBe(1);
  });

  it('left a metric-ready record for every call, with no presigned URL anywhere', async () => {
    expect(c.records.length).toBeGreaterThan(10);
    expect(JSON.stringify(c.records)).not.toMatch(/signature|sig=|X-Amz/i);
    expect(c.health.snapshot()).toMatchObject({ state: 'ok', lastError: undefined });
  });
});
