import { randomUUID } from 'node:crypto';
import type { ImagingClient } from '../../src/imaging-client';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { generateUid } from '../helpers/dicom-factory';
import { startFaultyProxy } from './faulty-proxy';
import { buildClient, startTestSandbox } from './sandbox-harness';

let db: TestDatabase;
let peer: Awaited<ReturnType<typeof startTestSandbox>>;
beforeAll(async () => {
  db = await createTestDatabase();
  peer = await startTestSandbox();
});
afterAll(async () => {
  await peer?.close();
  await db?.drop();
});

async function ordersWithCorrelation(
  client: ImagingClient,
  correlationId: string,
): Promise<string[]> {
  const found: string[] = [];
  for (const order of await client.listOrders()) {
    const { metadata } = await client.getMetadata({ orderId: order.orderId });
    if (metadata.correlation_id === correlationId) found.push(order.orderId);
  }
  return found;
}

describe('POST /new-order is not idempotent: the client never creates an order twice', () => {
  it('finds the order when the connection drops after the upstream created it', async () => {
    let dropped = 0;
    const proxy = await startFaultyProxy(peer.sandbox.baseUrl, (method, path) =>
      method === 'POST' && path === '/new-order' && dropped++ < 3 ? 'drop-after' : 'pass',
    );
    const c = buildClient(proxy.baseUrl, { dataSource: db.dataSource });
    try {
      const correlationId = randomUUID();
      const result = await c.client.createOrder(
        { study_uid: generateUid(), modality: 'MR' },
        { correlationId },
      );
      expect(result.recovered).toBe(true);
      expect(proxy.hits.filter((h) => h.path === '/new-order')).toHaveLength(1);
      expect(await ordersWithCorrelation(c.client, correlationId)).toEqual([result.orderId]);
      // The next create, with the proxy no longer dropping, is an ordinary one.
      dropped = 99;
      const second = await c.client.createOrder(
        { study_uid: generateUid() },
        { correlationId: randomUUID() },
      );
      expect(second.recovered).toBe(false);
    } finally {
      await c.close();
      await proxy.close();
    }
  });

  it('finds the order when its answer arrives after our timeout', async () => {
    let slowed = 0;
    const proxy = await startFaultyProxy(peer.sandbox.baseUrl, (method, path) =>
      method === 'POST' && path === '/new-order' && slowed++ === 0 ? { delayMs: 1_500 } : 'pass',
    );
    const c = buildClient(proxy.baseUrl, { dataSource: db.dataSource, requestTimeoutMs: 400 });
    try {
      const correlationId = randomUUID();
      const result = await c.client.createOrder({ study_uid: generateUid() }, { correlationId });
      expect(result.recovered).toBe(true);
      expect(await ordersWithCorrelation(c.client, correlationId)).toEqual([result.orderId]);
    } finally {
      await c.close();
      await proxy.close();
    }
  });

  it('cancels the duplicate when the upstream acts on a timed-out create after our lookup', async () => {
    let held = 0;
    const proxy = await startFaultyProxy(peer.sandbox.baseUrl, (method, path) =>
      method === 'POST' && path === '/new-order' && held++ === 0 ? { holdMs: 1_200 } : 'pass',
    );
    const c = buildClient(proxy.baseUrl, {
      dataSource: db.dataSource,
      requestTimeoutMs: 300,
      createSettleMs: 2_000,
    });
    try {
      const correlationId = randomUUID();
      const result = await c.client.createOrder({ study_uid: generateUid() }, { correlationId });
      // Both requests reached the upstream: the retry first, the held one late.
      expect(proxy.hits.filter((h) => h.path === '/new-order')).toHaveLength(2);
      expect(await ordersWithCorrelation(c.client, correlationId)).toEqual([result.orderId]);
      const cancelled = c.records.filter(
        (r) => r.operation === 'cancel-order' && r.outcome === 'success',
      );
      expect(cancelled).toHaveLength(1);
      expect(cancelled[0].orderId).not.toBe(result.orderId);
      expect((await c.client.getStatus({ orderId: cancelled[0].orderId! })).status).toBe(
        'CANCELLED',
      );
    } finally {
      await c.close();
      await proxy.close();
    }
  });

  it('looks before creating when an earlier run may have created the order', async () => {
    const c = buildClient(peer.sandbox.baseUrl, { dataSource: db.dataSource });
    try {
      const correlationId = randomUUID();
      const started = Date.now();
      const first = await c.client.createOrder({ study_uid: generateUid() }, { correlationId });
      // A crash lost `first.orderId`; the job runs again.
      const again = await c.client.createOrder(
        { study_uid: generateUid() },
        { correlationId, previouslyAttempted: true, attemptedSince: started },
      );
      expect(again).toEqual({ orderId: first.orderId, recovered: true });
      const fresh = await c.client.createOrder(
        {},
        { correlationId: randomUUID(), previouslyAttempted: true },
      );
      expect(fresh.recovered).toBe(false);
    } finally {
      await c.close();
    }
  });
});

describe('finding a lost create costs calls for unknown orders only', () => {
  // Its own sandbox: the counts below assume no PENDING orders but this test's.
  let own: Awaited<ReturnType<typeof startTestSandbox>>;
  beforeAll(async () => {
    own = await startTestSandbox();
  });
  afterAll(async () => {
    await own?.close();
  });

  it('reads GET /metadata only of PENDING orders neither created here nor recorded elsewhere', async () => {
    const WAITING = 20;
    let dropNext = false;
    const proxy = await startFaultyProxy(own.sandbox.baseUrl, (method, path) => {
      if (method === 'POST' && path === '/new-order' && dropNext) {
        dropNext = false;
        return 'drop-after';
      }
      return 'pass';
    });
    const metadataReads = () => proxy.hits.filter((h) => h.path === '/metadata').length;
    const replicaA = buildClient(proxy.baseUrl, { dataSource: db.dataSource });
    const replicaB = buildClient(proxy.baseUrl, { dataSource: db.dataSource });
    try {
      // Orders waiting for their upload (PENDING), as under load: placed, not yet uploaded.
      const waiting: string[] = [];
      for (let i = 0; i < WAITING; i++) {
        const created = await replicaA.client.createOrder(
          { study_uid: generateUid() },
          { correlationId: randomUUID() },
        );
        waiting.push(created.orderId);
      }

      // The replica that created them knows them: its lookup reads only the lost order.
      let before = metadataReads();
      dropNext = true;
      const lostA = randomUUID();
      const a = await replicaA.client.createOrder(
        { study_uid: generateUid() },
        { correlationId: lostA },
      );
      expect(a.recovered).toBe(true);
      expect(metadataReads() - before).toBe(1);
      waiting.push(a.orderId);

      // Another replica (or a restarted one) knows them from the database.
      before = metadataReads();
      dropNext = true;
      const lostB = randomUUID();
      const asked: string[][] = [];
      const b = await replicaB.client.createOrder(
        { study_uid: generateUid() },
        {
          correlationId: lostB,
          knownElsewhere: (ids) => {
            asked.push(ids);
            return Promise.resolve(new Set(ids.filter((id) => waiting.includes(id))));
          },
        },
      );
      expect(b.recovered).toBe(true);
      expect(asked.length).toBeGreaterThan(0);
      expect(metadataReads() - before).toBe(1);

      // And each lost create was found as the one order with its correlation id.
      expect(await ordersWithCorrelation(replicaA.client, lostA)).toEqual([a.orderId]);
      expect(await ordersWithCorrelation(replicaA.client, lostB)).toEqual([b.orderId]);
    } finally {
      await replicaA.close();
      await replicaB.close();
      await proxy.close();
    }
  });
});
