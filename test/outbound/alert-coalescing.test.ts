import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { AlertWebhookPublisher } from '../../src/outbound/alert-webhook.publisher';
import { OutboxOrderEvents } from '../../src/outbound/outbox-order-events';
import { OutboxWorker } from '../../src/outbound/outbox.worker';
import { DESTINATIONS } from '../../src/outbound/outbound.settings';
import { destinationHealth } from '../../src/outbound/destination-health';
import { DestinationHealthRepository } from '../../src/persistence/destination-health.repository';
import type { DeliveryResult, Publisher } from '../../src/outbound/publisher';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { playStatus, seedOrder, testOutboundSettings } from './outbound-seed';

jest.setTimeout(180_000);

/** An EHR that refuses every Task (HTTP 422): each row is a dead letter at its first attempt. */
const refusingEhr: Publisher = {
  destination: DESTINATIONS.fhir,
  deliver: (): Promise<DeliveryResult> =>
    Promise.resolve({
      outcome: 'dead',
      answer: 'the EHR answered 422 to Task',
      detail: { httpStatus: 422 },
    }),
  close: () => Promise.resolve(),
};

interface Alert {
  kind: string;
  orderId?: string;
  deadLetter?: { destination: string };
  deadLetters?: { destination: string; reason: string; count: number; orderIds: string[] };
}

/**
 * An EHR refusing 300 results (each a dead letter) with ALERT_COALESCE_SECONDS set: the
 * webhook (a real HTTP server on loopback, counting POSTs) gets the first alert at once and the
 * rest grouped, every order named once, none lost. Before: one POST per dead letter (2,000
 * dead letters gave 2,000 POSTs at about 30 a second).
 */
describe('dead-letter alerts grouped per destination and reason (ALERT_COALESCE_SECONDS)', () => {
  let db: TestDatabase;
  let server: Server;
  let url: string;
  const posts: Array<{ at: number; body: Alert }> = [];
  /** The webhook answers 503 to the POSTs whose number is in here (retried by the outbox). */
  const failing = new Set<number>();

  beforeAll(async () => {
    db = await createTestDatabase();
    let n = 0;
    server = createServer((req: IncomingMessage, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        n += 1;
        if (failing.has(n)) {
          res.statusCode = 503;
          res.end();
          return;
        }
        posts.push({ at: Date.now(), body: JSON.parse(body) as Alert });
        res.end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/T0KEN`;
  });
  afterAll(async () => {
    server?.closeAllConnections();
    server?.close();
    await db?.drop();
  });

  it('300 dead letters: the first of a window POSTed at once, the rest in follow-ups of at most 100 orders, each order once', async () => {
    const windowMs = 15_000;
    const settings = testOutboundSettings({
      destinations: [DESTINATIONS.fhir, DESTINATIONS.alert],
      alertCoalesceMs: windowMs,
      maxAttempts: 5,
    });
    const events = new OutboxOrderEvents(settings);
    const orders: string[] = [];
    for (let i = 0; i < 300; i++) {
      const order = await seedOrder(db.dataSource, { hl7: null });
      await playStatus(db.dataSource, events, order, 'ANALYSIS_RUNNING'); // one Task row each
      orders.push(order.id);
    }
    failing.add(2); // the first follow-up's first POST fails: the outbox retries it
    const worker = new OutboxWorker({
      dataSource: db.dataSource,
      settings,
      publishers: [refusingEhr, new AlertWebhookPublisher({ url })],
      logger: pino({ level: 'silent' }),
      pollMs: 30,
      concurrency: 4,
    });
    const started = Date.now();
    worker.start();
    try {
      const named = () =>
        posts.flatMap((p) =>
          p.body.kind === 'dead-letter-summary'
            ? p.body.deadLetters!.orderIds
            : p.body.orderId
              ? [p.body.orderId]
              : [],
        );
      const deadline = Date.now() + 60_000;
      while (named().length < 300 && Date.now() < deadline) await sleep(100);
    } finally {
      await worker.stop();
    }
    // Measured: dead letters come at about 33 a second here (300 in 9 s), so a 4 s window
    // gave 3 windows of 1 alert at once + 1 to 2 follow-ups; a 15 s window, one. Asserted
    // whatever the machine's speed:
    const firsts = posts.filter((p) => p.body.kind === 'dead-letter');
    const summaries = posts.filter((p) => p.body.kind === 'dead-letter-summary');
    expect(firsts.length + summaries.length).toBe(posts.length);
    // the first alert of a window goes out at once, and the next only after the window
    expect(firsts[0]!.at - started).toBeLessThan(3000);
    for (let i = 1; i < firsts.length; i++)
      expect(firsts[i]!.at - firsts[i - 1]!.at).toBeGreaterThanOrEqual(windowMs - 500);
    for (const { body } of summaries) {
      expect(body.deadLetters).toMatchObject({ destination: 'ehr-fhir', reason: 'HTTP 422' });
      expect(body.deadLetters!.orderIds.length).toBeLessThanOrEqual(100);
      expect(body.deadLetters!.count).toBe(body.deadLetters!.orderIds.length);
    }
    // every dead letter in exactly one alert: none lost, none twice
    const named = [
      ...firsts.map((p) => p.body.orderId!),
      ...summaries.flatMap((p) => p.body.deadLetters!.orderIds),
    ];
    expect(named.sort()).toEqual([...orders].sort());
    // was 300 POSTs: one per dead letter
    expect(posts.length).toBeLessThanOrEqual(2 * Math.ceil((Date.now() - started) / windowMs) + 3);
    expect(posts.length).toBeLessThan(15);
    process.stdout.write(
      `300 dead letters in ${((summaries.at(-1)!.at - started) / 1000).toFixed(1)} s: ${posts.length} POSTs (${firsts.length} at once, ${summaries.length} follow-ups)\n`,
    );

    const alertRows = (await db.dataSource.query(
      `SELECT kind, status, attempts FROM outbox WHERE destination = 'alert-webhook' ORDER BY id`,
    )) as Array<{ kind: string; status: string; attempts: number }>;
    expect(alertRows.every((r) => r.status === 'delivered')).toBe(true);
    expect(alertRows.some((r) => r.kind === 'dead-letter-summary' && r.attempts === 2)).toBe(true);
  });

  it('after the window, the next dead letter of the group is alerted at once again', async () => {
    posts.length = 0;
    const settings = testOutboundSettings({
      destinations: [DESTINATIONS.fhir, DESTINATIONS.alert],
      alertCoalesceMs: 4000,
    });
    const events = new OutboxOrderEvents(settings);
    await sleep(15_000); // the first test's window is over
    const order = await seedOrder(db.dataSource, { hl7: null });
    await playStatus(db.dataSource, events, order, 'ANALYSIS_RUNNING');
    const worker = new OutboxWorker({
      dataSource: db.dataSource,
      settings,
      publishers: [refusingEhr, new AlertWebhookPublisher({ url })],
      logger: pino({ level: 'silent' }),
      pollMs: 30,
      concurrency: 2,
    });
    const started = Date.now();
    worker.start();
    try {
      while (posts.length === 0 && Date.now() - started < 20_000) await sleep(50);
    } finally {
      await worker.stop();
    }
    expect(Date.now() - started).toBeLessThan(3000);
    expect(posts.map((p) => p.body)).toEqual([
      expect.objectContaining({ kind: 'dead-letter', orderId: order.id }),
    ]);
  });

  // A follow-up waiting for its window's end is not a delivery late: it is counted from when
  // it is due. Counted from when it was written, a window longer than
  // OUTBOUND_DEGRADED_AFTER_SECONDS made the alert webhook `degraded` with nothing wrong.
  it('a follow-up waiting for its window is no backlog of the alert webhook in /health', async () => {
    posts.length = 0;
    await db.dataSource.query(`DELETE FROM alert_coalescing`);
    const settings = testOutboundSettings({
      destinations: [DESTINATIONS.fhir, DESTINATIONS.alert],
      alertCoalesceMs: 20_000,
    });
    const events = new OutboxOrderEvents(settings);
    for (let i = 0; i < 3; i++)
      await playStatus(
        db.dataSource,
        events,
        await seedOrder(db.dataSource, { hl7: null }),
        'ANALYSIS_RUNNING',
      );
    const worker = new OutboxWorker({
      dataSource: db.dataSource,
      settings,
      publishers: [refusingEhr, new AlertWebhookPublisher({ url })],
      logger: pino({ level: 'silent' }),
      pollMs: 30,
      concurrency: 2,
    });
    worker.start();
    try {
      const started = Date.now();
      while (posts.length === 0 && Date.now() - started < 20_000) await sleep(50);
      await sleep(2500);
      const [alert] = await destinationHealth(
        new DestinationHealthRepository(db.dataSource),
        [DESTINATIONS.alert],
        1,
      );
      expect(alert).toMatchObject({ status: 'up', pending: 1, oldestPendingSeconds: 0 });
    } finally {
      await worker.stop();
    }
  });
});
