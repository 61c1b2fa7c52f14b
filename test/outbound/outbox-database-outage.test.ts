import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import pino from 'pino';
import type { DataSource } from 'typeorm';
import { OutboxOrderEvents } from '../../src/outbound/outbox-order-events';
import { OutboxWorker } from '../../src/outbound/outbox.worker';
import { DESTINATIONS } from '../../src/outbound/outbound.settings';
import type { DeliveryResult, Publisher } from '../../src/outbound/publisher';
import { createDataSource } from '../../src/persistence/data-source.factory';
import {
  freePort,
  startEmbeddedPostgres,
  type RunningEmbeddedPostgres,
} from '../../src/persistence/embedded-postgres';
import { migrateUnderLock } from '../../src/persistence/migrator';
import { playStatus, seedOrder, testOutboundSettings } from './outbound-seed';

jest.setTimeout(120_000);

const settings = testOutboundSettings();

/**
 * The outbox when the database goes away between sending a document and recording it:
 * the worker (real PostgreSQL, embedded, stopped like a crash and started again) records
 * the delivery once the database is back, within seconds, and the document is sent once —
 * instead of waiting for its lease (2 minutes in production) and sending it again.
 */
describe('outbox: a database outage between delivery and its record', () => {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-outage-'));
  let pg: RunningEmbeddedPostgres | undefined;
  let port = 0;
  let url = '';
  let ds: DataSource;

  const startDatabase = () =>
    startEmbeddedPostgres({ dataDir: join(dir, 'pg'), port, database: 'outbox' });

  beforeAll(async () => {
    port = await freePort();
    pg = await startDatabase();
    url = pg.url;
    ds = createDataSource({ url, poolSize: 4 });
    await ds.initialize();
    await migrateUnderLock(ds, url);
  });
  afterAll(async () => {
    await ds?.destroy().catch(() => undefined);
    await pg?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const rowsOf = async (orderId: string) => {
    const c = new Client({ connectionString: url });
    await c.connect();
    try {
      return (
        await c.query<{ status: string; attempts: number; n: number }>(
          `SELECT o.status, o.attempts,
                  (SELECT count(*)::int FROM audit_events a
                    WHERE a.kind = 'outbound.attempt' AND a.detail->>'outboxId' = o.id::text) AS n
             FROM outbox o WHERE o.order_id = $1 ORDER BY o.id`,
          [orderId],
        )
      ).rows;
    } finally {
      await c.end();
    }
  };

  it('records the delivery once the database is back, and sends it once', async () => {
    const order = await seedOrder(ds);
    await playStatus(ds, new OutboxOrderEvents(settings), order, 'ANALYSIS_RUNNING');
    expect((await rowsOf(order.id)).map((r) => r.status)).toEqual(['pending']);

    let sent = 0;
    let stopped: Promise<void> | undefined;
    const publisher: Publisher = {
      destination: DESTINATIONS.fhir,
      async deliver(): Promise<DeliveryResult> {
        sent++;
        // The peer took the document; the database goes away before it is recorded.
        if (sent === 1) {
          const running = pg!;
          pg = undefined;
          stopped = running.stop('immediate');
          await stopped;
        }
        return { outcome: 'delivered', answer: '201 Created', detail: {} };
      },
      close: async () => undefined,
    };
    const worker = new OutboxWorker({
      dataSource: ds,
      settings,
      publishers: [publisher],
      logger: pino({ level: 'silent' }),
      pollMs: 50,
      concurrency: 1,
      leaseMs: 120_000,
    });
    worker.start();
    try {
      while (!stopped) await sleep(20);
      await stopped;
      await sleep(1_500);
      pg = await startDatabase();
      const backAt = Date.now();
      let rows = await rowsOf(order.id);
      while (rows[0]?.status !== 'delivered' && Date.now() - backAt < 20_000) {
        await sleep(100);
        rows = await rowsOf(order.id);
      }
      // Recorded within seconds of the database's return (the lease is 2 minutes), sent once,
      // one attempt, one audit entry.
      expect(rows).toEqual([{ status: 'delivered', attempts: 1, n: 1 }]);
      expect(Date.now() - backAt).toBeLessThan(15_000);
      expect(sent).toBe(1);
    } finally {
      await worker.stop();
    }
  });

  it('makes due again its own claim whose answer the restart lost, without waiting for the lease', async () => {
    const order = await seedOrder(ds);
    await playStatus(ds, new OutboxOrderEvents(settings), order, 'ANALYSIS_RUNNING');
    let sent = 0;
    const worker = new OutboxWorker({
      dataSource: ds,
      settings,
      publishers: [
        {
          destination: DESTINATIONS.fhir,
          deliver: async () => {
            sent++;
            return { outcome: 'delivered', answer: '201 Created', detail: {} };
          },
          close: async () => undefined,
        },
      ],
      logger: pino({ level: 'silent' }),
      pollMs: 50,
      concurrency: 1,
      leaseMs: 120_000,
    });
    // What a claim committed just before the crash leaves when its answer never arrives:
    // the row leased to this worker for 2 minutes, and no delivery holding it.
    await ds.query(
      `UPDATE outbox SET attempts = attempts + 1, claimed_by = $2,
              next_attempt_at = now() + interval '120 seconds' WHERE order_id = $1`,
      [order.id, worker.id],
    );
    const running = pg!;
    pg = undefined;
    await running.stop('immediate');
    worker.start();
    try {
      // The worker's claims fail while the database is away…
      await sleep(1_000);
      pg = await startDatabase();
      const backAt = Date.now();
      let rows = await rowsOf(order.id);
      while (rows[0]?.status !== 'delivered' && Date.now() - backAt < 20_000) {
        await sleep(100);
        rows = await rowsOf(order.id);
      }
      // …and once it is back, the lost claim is due again at once: sent once, recorded.
      expect(rows.map((r) => r.status)).toEqual(['delivered']);
      expect(Date.now() - backAt).toBeLessThan(15_000);
      expect(sent).toBe(1);
    } finally {
      await worker.stop();
    }
  });
});
