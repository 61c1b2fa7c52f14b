import { PgUploadProgressStore, PgUploadSlots } from '../../src/imaging-client';
import { createTestDatabase, type TestDatabase } from '../helpers/database';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

describe('PgUploadProgressStore', () => {
  it('keeps every part recorded concurrently, and starts clean on a new upload id', async () => {
    const store = new PgUploadProgressStore(db.dataSource);
    const base = {
      orderId: 'order-a',
      uploadId: 'up-1',
      organizationId: 'org',
      sizeBytes: 1_073_741_824,
      partSizeBytes: 10_737_419,
      partCount: 100,
      fileFingerprint: '1073741824:1763700000000',
    };
    await store.begin(base);
    await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        store.recordPart('order-a', 'up-1', { partNumber: i + 1, etag: `"e${i + 1}"` }),
      ),
    );
    // A part reported for an upload that is no longer the order's is ignored.
    await store.recordPart('order-a', 'up-0', { partNumber: 99, etag: '"stale"' });
    const loaded = await store.load('order-a');
    expect(loaded).toMatchObject({ ...base });
    expect(loaded?.parts.map((p) => p.partNumber)).toEqual(
      Array.from({ length: 40 }, (_, i) => i + 1),
    );
    expect(loaded?.parts[9]).toEqual({ partNumber: 10, etag: '"e10"' });
    expect((await store.listUnfinished()).map((p) => p.orderId)).toContain('order-a');

    await store.begin({ ...base, uploadId: 'up-2' });
    expect((await store.load('order-a'))?.parts).toEqual([]);
    await store.delete('order-a');
    expect(await store.load('order-a')).toBeNull();
  });
});

describe('PgUploadSlots', () => {
  it('bounds uploads per organization, and a dead holder’s slot returns when its lease lapses', async () => {
    const slots = new PgUploadSlots(db.dataSource, { limit: 2, leaseMs: 300, pollMs: 20 });
    const a = await slots.acquire('org-x');
    // A replica that died holding a slot: its lease is never renewed.
    await db.dataSource.query(
      `INSERT INTO imaging_upload_slots (organization_id, holder, expires_at) VALUES ('org-x', 'dead', clock_timestamp() + interval '400 milliseconds')`,
    );
    let third = false;
    const waiting = slots.acquire('org-x').then((release) => {
      third = true;
      return release;
    });
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(third).toBe(false);
    // Other organizations are not held back.
    const other = await slots.acquire('org-y');
    // The live holder keeps renewing past its 300 ms lease; the dead one lapses.
    const releaseThird = await waiting;
    expect(third).toBe(true);
    const holders: Array<{ holder: string }> = await db.dataSource.query(
      `SELECT holder FROM imaging_upload_slots WHERE organization_id = 'org-x'`,
    );
    expect(holders).toHaveLength(2);
    expect(holders.map((h) => h.holder)).not.toContain('dead');
    await Promise.all([a(), releaseThird(), other()]);
    expect(await db.dataSource.query(`SELECT * FROM imaging_upload_slots`)).toEqual([]);
  });
});

describe('createProductionImagingClient', () => {
  it('wires the PostgreSQL limiter, health and extra observers to a working client', async () => {
    const { startTestSandbox } = await import('./sandbox-harness');
    const { createProductionImagingClient, silentLogger } =
      await import('../../src/imaging-client');
    const peer = await startTestSandbox();
    const seen: string[] = [];
    const built = createProductionImagingClient({
      config: {
        baseUrl: peer.sandbox.baseUrl,
        clientId: 'sandbox-client',
        clientSecret: 'sandbox-secret',
        organizationId: 'sandbox-org',
      },
      dataSource: db.dataSource,
      logger: silentLogger,
      rateLimitScope: 'factory-test',
      observers: [{ onCall: (r) => seen.push(`${r.operation} ${r.status}`) }],
    });
    try {
      await expect(built.client.testToken()).resolves.toMatchObject({ valid: true });
      expect(seen).toEqual(['token 200', 'test-token 200']);
      expect(built.health.snapshot().state).toBe('ok');
      const counted: Array<{ n: number }> = await db.dataSource.query(
        `SELECT sum(count)::int AS n FROM imaging_rate_limit_buckets WHERE key = 'factory-test|total'`,
      );
      expect(counted[0].n).toBe(2);
    } finally {
      await built.client.close();
      await peer.close();
    }
  });
});
