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

describe('waits for budget and slots are bounded', () => {
  it('an upload slot that never frees: acquire gives up at its bound instead of waiting for ever', async () => {
    const slots = new PgUploadSlots(db.dataSource, {
      limit: 1,
      leaseMs: 60_000,
      pollMs: 20,
      maxWaitMs: 400,
    });
    const held = await slots.acquire('org-bound');
    const started = Date.now();
    const second = slots.acquire('org-bound').then(
      () => 'acquired',
      (e: unknown) => (e as Error).name,
    );
    const outcome = await Promise.race([
      second,
      new Promise((resolve) => setTimeout(() => resolve('still waiting after 5 s'), 5_000)),
    ]);
    expect(outcome).toBe('WaitBoundExceeded');
    expect(Date.now() - started).toBeLessThan(2_000);
    await held();
    // Free again: taken at once.
    await (
      await slots.acquire('org-bound')
    )();
  });

  it('rate-limit budget that frees only after the call deadline: the call fails fast as deadline (transient), nothing counted', async () => {
    const { startTestSandbox } = await import('./sandbox-harness');
    const { createProductionImagingClient, silentLogger, ImagingClientError } =
      await import('../../src/imaging-client');
    const peer = await startTestSandbox();
    const built = createProductionImagingClient({
      config: {
        baseUrl: peer.sandbox.baseUrl,
        clientId: 'sandbox-client',
        clientSecret: 'sandbox-secret',
        organizationId: 'sandbox-org',
        retry: { deadlineMs: 1_000 },
      },
      dataSource: db.dataSource,
      logger: silentLogger,
      limits: { totalPerMinute: 2, perEndpointPerMinute: 2 },
      rateLimitScope: 'bounded-wait-test',
    });
    try {
      // token + test-token: the minute's budget is spent.
      await expect(built.client.testToken()).resolves.toMatchObject({ valid: true });
      const started = Date.now();
      const outcome = await Promise.race([
        built.client.testToken().then(
          () => 'answered',
          (e: unknown) => e,
        ),
        new Promise((resolve) => setTimeout(() => resolve('still waiting after 10 s'), 10_000)),
      ]);
      expect(outcome).toBeInstanceOf(ImagingClientError);
      expect(outcome).toMatchObject({ code: 'deadline', operation: 'test-token' });
      expect((outcome as InstanceType<typeof ImagingClientError>).transient).toBe(true);
      expect(Date.now() - started).toBeLessThan(3_000);
      const counted: Array<{ n: number }> = await db.dataSource.query(
        `SELECT sum(count)::int AS n FROM imaging_rate_limit_buckets WHERE key = 'bounded-wait-test|total'`,
      );
      expect(counted[0].n).toBe(2);
    } finally {
      await built.client.close();
      await peer.close();
    }
  }, 30_000);
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
