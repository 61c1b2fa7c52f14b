import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PgUploadProgressStore, type UploadedPart } from '../../src/imaging-client';
import { TERMINAL_UPSTREAM_STATUSES } from '../../src/imaging-spec/imaging-spec';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { createMrBrainSeries, generateUid, zipEntries } from '../helpers/dicom-factory';
import { startFaultyProxy } from './faulty-proxy';
import { buildClient, startTestSandbox, waitForStatus } from './sandbox-harness';

const MIB = 1024 * 1024;
const terminal = (s: string) => (TERMINAL_UPSTREAM_STATUSES as readonly string[]).includes(s);

let db: TestDatabase;
let dir: string;
let study: { path: string; studyUid: string };

beforeAll(async () => {
  db = await createTestDatabase();
  dir = await mkdtemp(join(tmpdir(), 'imaging-client-upload-'));
  study = { path: join(dir, 'study.zip'), studyUid: generateUid() };
  await writeFile(study.path, await bigStudy(study.studyUid, 24 * MIB));
});

afterAll(async () => {
  await db?.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/**
 * A real DICOM study of about `size` bytes, stored uncompressed: a few generated 512×512
 * slices, each also written under further instance numbers until the size is reached
 * (cheap to build; pixel data is incompressible noise-free brain phantom).
 */
async function bigStudy(studyUid: string, size: number): Promise<Buffer> {
  const series = createMrBrainSeries({
    study: { studyInstanceUid: studyUid },
    series: { slices: 4, rows: 512, columns: 512 },
  });
  const entries = [];
  let total = 0;
  for (let i = 0; total < size; i++) {
    const inst = series[i % series.length];
    entries.push({
      name: `DICOM/S1/IM${String(i + 1).padStart(4, '0')}.dcm`,
      data: inst.bytes,
      store: true,
    });
    total += inst.bytes.length;
  }
  return zipEntries(entries);
}

/** The adapter "crashes" after `after` parts are recorded: the store fails like a dead process would stop. */
class CrashingProgressStore extends PgUploadProgressStore {
  recorded = 0;
  constructor(
    ds: ConstructorParameters<typeof PgUploadProgressStore>[0],
    private readonly after: number,
  ) {
    super(ds);
  }
  override async recordPart(orderId: string, uploadId: string, part: UploadedPart): Promise<void> {
    if (this.recorded >= this.after) throw new Error('process killed');
    this.recorded++;
    await super.recordPart(orderId, uploadId, part);
  }
}

describe('study uploads against the sandbox', () => {
  it('resumes a multipart upload after a restart, sending only the missing parts', async () => {
    const peer = await startTestSandbox();
    const first = buildClient(peer.sandbox.baseUrl, {
      dataSource: db.dataSource,
      progress: new CrashingProgressStore(db.dataSource, 1),
      upload: { partConcurrency: 1 },
    });
    try {
      const { orderId } = await first.client.createOrder(
        { study_uid: study.studyUid },
        { correlationId: randomUUID() },
      );
      await expect(first.uploader.upload(orderId, study.path)).rejects.toThrow('process killed');
      await first.close();
      const kept = await new PgUploadProgressStore(db.dataSource).load(orderId);
      expect(kept).toMatchObject({ orderId, partCount: 3, parts: [{ partNumber: 1 }] });
      expect(
        JSON.stringify(await db.dataSource.query('SELECT * FROM imaging_upload_progress')),
      ).not.toMatch(/http/);
      expect(await first.client.getStatus({ orderId }).catch(() => 'closed')).toBe('closed');

      // A new process: fresh client, same database.
      const second = buildClient(peer.sandbox.baseUrl, { dataSource: db.dataSource });
      try {
        const result = await second.uploader.upload(orderId, study.path);
        expect(result).toMatchObject({
          mode: 'multipart',
          partCount: 3,
          resumedParts: 1,
          uploadId: kept?.uploadId,
        });
        const sent = second.records.filter((r) => r.operation === 'upload-part');
        expect(sent).toHaveLength(2);
        expect(second.records.some((r) => r.operation === 'multipart-initiate')).toBe(false);
        expect(await waitForStatus(second.client, orderId, terminal)).toBe('DELIVERED');
        expect(await new PgUploadProgressStore(db.dataSource).load(orderId)).toBeNull();
      } finally {
        await second.close();
      }
    } finally {
      await peer.close();
    }
  });

  it('a complete whose answer was lost, retried while the service still says PENDING, waits for the order to move on instead of aborting the upload', async () => {
    // The service took the first complete (the answer never came back), refuses the retry as
    // already completed, and still answers PENDING for a while: assembling a large multipart
    // object takes time. Before: one look at the status, PENDING, so the retry's 409 counted as
    // a refusal for good and the upload was aborted, the study never analysed.
    const peer = await startTestSandbox();
    let completes = 0;
    let pendingAnswers = 0;
    const proxy = await startFaultyProxy(peer.sandbox.baseUrl, (method, path) => {
      if (method === 'POST' && path === '/upload/multipart/complete' && completes++ === 0)
        return 'drop-after';
      if (method === 'GET' && path === '/status' && completes > 0 && pendingAnswers < 3) {
        pendingAnswers++;
        return {
          rewrite: (body: Buffer) =>
            JSON.stringify({ ...(JSON.parse(body.toString()) as object), status: 'PENDING' }),
        };
      }
      return 'pass';
    });
    const c = buildClient(proxy.baseUrl, { dataSource: db.dataSource });
    try {
      const { orderId } = await c.client.createOrder(
        { study_uid: study.studyUid },
        { correlationId: randomUUID() },
      );
      expect(await c.uploader.upload(orderId, study.path)).toMatchObject({
        mode: 'multipart',
        partCount: 3,
      });
      expect(completes).toBe(2);
      expect(pendingAnswers).toBe(3);
      expect(proxy.hits.filter((h) => h.path === '/upload/multipart/abort')).toHaveLength(0);
      expect(await waitForStatus(c.client, orderId, terminal)).toBe('DELIVERED');
    } finally {
      await c.close();
      await proxy.close();
      await peer.close();
    }
  });

  it('gets fresh URLs (and a fresh token) when an hour passes in the middle of an upload', async () => {
    const peer = await startTestSandbox();
    let advanced = false;
    class TimeWarpStore extends PgUploadProgressStore {
      override async recordPart(
        orderId: string,
        uploadId: string,
        part: UploadedPart,
      ): Promise<void> {
        await super.recordPart(orderId, uploadId, part);
        if (!advanced) {
          advanced = true;
          await peer.sandbox.advance(61 * 60_000);
        }
      }
    }
    const c = buildClient(peer.sandbox.baseUrl, {
      dataSource: db.dataSource,
      progress: new TimeWarpStore(db.dataSource),
      upload: { partConcurrency: 1 },
    });
    try {
      const { orderId } = await c.client.createOrder(
        { study_uid: study.studyUid },
        { correlationId: randomUUID() },
      );
      await c.uploader.upload(orderId, study.path);
      expect(advanced).toBe(true);
      const urlCalls = c.records.filter((r) => r.operation === 'multipart-presigned-urls');
      expect(urlCalls.length).toBeGreaterThanOrEqual(2);
      expect(c.records.filter((r) => r.operation === 'token').length).toBeGreaterThanOrEqual(2);
      expect(await waitForStatus(c.client, orderId, (s) => s !== 'PENDING')).not.toBe('PENDING');
    } finally {
      await c.close();
      await peer.close();
    }
  });

  it('holds at most the configured number of uploads at once for the organization', async () => {
    const peer = await startTestSandbox({ maxConcurrentUploads: 2 });
    const c = buildClient(peer.sandbox.baseUrl, {
      dataSource: db.dataSource,
      upload: { maxConcurrentUploads: 2 },
    });
    const files = await Promise.all(
      [0, 1, 2, 3, 4].map(async (i) => {
        const studyUid = generateUid();
        const path = join(dir, `conc-${i}.zip`);
        await writeFile(path, await bigStudy(studyUid, 6 * MIB));
        return { path, studyUid };
      }),
    );
    let maxHeld = 0;
    const sampler = setInterval(() => {
      db.dataSource
        .query(
          `SELECT count(*)::int AS n FROM imaging_upload_slots WHERE organization_id = 'sandbox-org'`,
        )
        .then(([row]: Array<{ n: number }>) => (maxHeld = Math.max(maxHeld, row.n)))
        .catch(() => undefined);
    }, 5);
    try {
      const orders = await Promise.all(
        files.map((f) =>
          c.client.createOrder({ study_uid: f.studyUid }, { correlationId: randomUUID() }),
        ),
      );
      await Promise.all(orders.map((o, i) => c.uploader.upload(o.orderId, files[i].path)));
      expect(maxHeld).toBeLessThanOrEqual(2);
      expect(maxHeld).toBeGreaterThan(0);
      const initiates = c.records.filter((r) => r.operation === 'multipart-initiate');
      expect(initiates).toHaveLength(5);
      expect(initiates.every((r) => r.attempts === 1 && r.status === 201)).toBe(true);
    } finally {
      clearInterval(sampler);
      await c.close();
      await peer.close();
    }
  });
});
