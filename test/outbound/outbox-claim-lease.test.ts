import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { OutboxOrderEvents } from '../../src/outbound/outbox-order-events';
import { OutboxWorker } from '../../src/outbound/outbox.worker';
import { DESTINATIONS } from '../../src/outbound/outbound.settings';
import type { DeliveryResult, Publisher } from '../../src/outbound/publisher';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { playStatus, seedOrder, testOutboundSettings } from './outbound-seed';

jest.setTimeout(60_000);

const settings = testOutboundSettings();

const LEASE_MS = 600;

/**
 * The outbox claim lease is short (a killed worker's rows are taken by another within it)
 * and renewed by the claiming worker while it delivers, so a delivery slower than the lease
 * (an RIS taking its time to ACK) keeps its row: two workers on one database (real
 * PostgreSQL), the first delivering for four leases, the second polling every 50 ms.
 */
describe('outbox: the claim lease is renewed while a delivery runs', () => {
  let db: TestDatabase;
  const workers: OutboxWorker[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop()));
    await db?.drop();
  });

  const worker = (publisher: Publisher) => {
    const w = new OutboxWorker({
      dataSource: db.dataSource,
      settings,
      publishers: [publisher],
      logger: pino({ level: 'silent' }),
      pollMs: 50,
      concurrency: 1,
      leaseMs: LEASE_MS,
    });
    workers.push(w);
    return w;
  };

  it('a delivery four leases long keeps its row; the other worker never sends it', async () => {
    const order = await seedOrder(db.dataSource);
    await playStatus(db.dataSource, new OutboxOrderEvents(settings), order, 'ANALYSIS_RUNNING');
    const rowOf = async () =>
      (
        await db.dataSource.query(
          `SELECT status, attempts, claimed_by,
                  extract(epoch FROM next_attempt_at - now()) * 1000 AS lease_left_ms
             FROM outbox WHERE order_id = $1`,
          [order.id],
        )
      )[0] as {
        status: string;
        attempts: number;
        claimed_by: string | null;
        lease_left_ms: number;
      };

    const sent: string[] = [];
    let slowStarted = false;
    const slow = worker({
      destination: DESTINATIONS.fhir,
      async deliver(): Promise<DeliveryResult> {
        sent.push('slow');
        slowStarted = true;
        await sleep(4 * LEASE_MS);
        return { outcome: 'delivered', answer: '201 Created', detail: {} };
      },
      close: async () => undefined,
    });
    const other = worker({
      destination: DESTINATIONS.fhir,
      async deliver(): Promise<DeliveryResult> {
        sent.push('other');
        return { outcome: 'delivered', answer: '201 Created', detail: {} };
      },
      close: async () => undefined,
    });
    slow.start();
    while (!slowStarted) await sleep(10);
    other.start();

    // While the slow delivery runs, the row stays claimed by it with a lease ahead of now.
    const leftMs: number[] = [];
    let row = await rowOf();
    while (row.status === 'pending') {
      expect(row.claimed_by).toBe(slow.id);
      leftMs.push(Number(row.lease_left_ms));
      await sleep(50);
      row = await rowOf();
    }
    expect(row).toMatchObject({ status: 'delivered', attempts: 1, claimed_by: null });
    expect(sent).toEqual(['slow']);
    // Renewed: the lease never ran out although the delivery outlasted it four times.
    expect(leftMs.length).toBeGreaterThan(10);
    expect(Math.min(...leftMs)).toBeGreaterThan(0);
  });
});
