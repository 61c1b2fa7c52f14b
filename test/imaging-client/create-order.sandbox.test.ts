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
