import pino from 'pino';
import type { DiagnosticReport } from '@medplum/fhirtypes';
import { parseHl7 } from '../../src/hl7/hl7-message';
import { FhirResultPublisher } from '../../src/outbound/fhir-result.publisher';
import { Hl7ResultPublisher } from '../../src/outbound/hl7-result.publisher';
import { OutboxOrderEvents } from '../../src/outbound/outbox-order-events';
import { OutboxWorker } from '../../src/outbound/outbox.worker';
import { DESTINATIONS, type OutboundSettings } from '../../src/outbound/outbound.settings';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { startAckingRis, startValidatingEhr, type TestEhr, type TestRis } from './outbound-peers';
import {
  playStatus,
  RESULT_DOCS,
  seedOrder,
  type SeededOrder,
  storeDocuments,
  testOutboundSettings,
} from './outbound-seed';

jest.setTimeout(60_000);

const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

/**
 * A dead letter replayed after a later document of the same order and destination was
 * delivered must not move the clinic's view backwards. The first result's DiagnosticReport
 * and ORU die (the EHR unreachable, the RIS refusing with AR), the upstream's correction is
 * delivered (`corrected`, OBR-25 C), then an analyst replays the old dead letters: before,
 * the EHR's DiagnosticReport (one resource per order, conditional update on our identifier)
 * went back to `final` with the first result, and the RIS took an ORU F after the C.
 * Real PostgreSQL, a validating FHIR engine and an MLLP RIS on loopback.
 */
describe('outbox: a replayed dead letter older than a delivered result', () => {
  let db: TestDatabase;
  let ehr: TestEhr;
  let ris: TestRis;
  let refusingRis: TestRis;
  let slowRis: TestRis;

  beforeAll(async () => {
    db = await createTestDatabase();
    ehr = await startValidatingEhr();
    ris = await startAckingRis();
    refusingRis = await startAckingRis(() => 'AR');
    // Takes 1.5 s to acknowledge each message: a delivery in flight long enough to replay into.
    slowRis = await startAckingRis(
      () => 'AA',
      undefined,
      () => 1500,
    );
  });
  afterAll(async () => {
    await ris?.close();
    await refusingRis?.close();
    await slowRis?.close();
    await ehr?.close();
    await db?.drop();
  });

  const settings: OutboundSettings = testOutboundSettings({
    destinations: [DESTINATIONS.fhir, DESTINATIONS.hl7],
  });

  function worker(fhirUrl: string, risPort: number, connections = 1): OutboxWorker {
    return new OutboxWorker({
      dataSource: db.dataSource,
      settings,
      logger,
      pollMs: 20,
      concurrency: 2,
      leaseMs: 30_000,
      publishers: [
        new FhirResultPublisher({ baseUrl: fhirUrl, dataSource: db.dataSource }),
        new Hl7ResultPublisher({
          host: '127.0.0.1',
          port: risPort,
          responseTimeoutMs: 2000,
          settings: settings.hl7,
          connections,
        }),
      ],
    });
  }

  async function drain(w: OutboxWorker, orderId: string): Promise<void> {
    w.start();
    const end = Date.now() + 20_000;
    try {
      for (;;) {
        const [{ n }] = (await db.dataSource.query(
          `SELECT count(*)::int AS n FROM outbox WHERE order_id = $1 AND status = 'pending'`,
          [orderId],
        )) as Array<{ n: number }>;
        if (n === 0) return;
        if (Date.now() > end) throw new Error('outbox not drained');
        await new Promise((r) => setTimeout(r, 30));
      }
    } finally {
      await w.stop();
    }
  }

  /** The upstream corrects the result: the documents are stored again (the next revision). */
  async function correct(events: OutboxOrderEvents, order: SeededOrder): Promise<void> {
    await db.dataSource.query(`DELETE FROM order_documents WHERE order_id = $1`, [order.id]);
    await db.dataSource.transaction(async (manager) => {
      const stored = await storeDocuments(manager, order.id, 'DELIVERED', RESULT_DOCS);
      await events.documentsStored(manager, {
        order: order.snapshot,
        upstreamStatus: 'DELIVERED',
        documents: stored,
      });
    });
  }

  const rowsOf = async (orderId: string) =>
    (await db.dataSource.query(
      `SELECT id::text AS id, kind, status, payload->>'revision' AS revision FROM outbox
        WHERE order_id = $1 ORDER BY id`,
      [orderId],
    )) as Array<{ id: string; kind: string; status: string; revision: string | null }>;

  it('the first result replayed after its correction was delivered is not sent', async () => {
    const events = new OutboxOrderEvents(settings);
    const order = await seedOrder(db.dataSource);
    await playStatus(db.dataSource, events, order, 'DELIVERED', { documents: RESULT_DOCS });
    // Nothing listens on port 9 (discard): the EHR is unreachable, the RIS refuses.
    await drain(worker('http://127.0.0.1:9/fhir', refusingRis.port), order.id);
    const first = (await rowsOf(order.id)).filter(
      (r) => r.kind === 'fhir-diagnostic-report' || r.kind === 'hl7-oru',
    );
    expect(first.map((r) => `${r.kind}/${r.status}`)).toEqual([
      'fhir-diagnostic-report/dead',
      'hl7-oru/dead',
    ]);

    // The upstream corrects the result: the documents are stored again (revision 1).
    await correct(events, order);
    const before = ris.received.length;
    await drain(worker(ehr.baseUrl, ris.port), order.id);
    const corrected = (await rowsOf(order.id)).filter(
      (r) => !first.some((f) => f.id === r.id) && r.kind !== 'fhir-task',
    );
    expect(corrected.map((r) => `${r.kind}/${r.status}/${r.revision}`)).toEqual([
      'fhir-diagnostic-report/delivered/1',
      'hl7-oru/delivered/1',
    ]);
    expect(parseHl7(ris.received.at(-1)!).get('OBR-25')).toBe('C');
    const sentAfterCorrection = ris.received.length;
    expect(sentAfterCorrection).toBe(before + 1);

    // An analyst replays the old dead letters (what POST /api/audit/dead-letters/{id}/replay does).
    await db.dataSource.query(
      `UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = now(), updated_at = now()
        WHERE id = ANY($1::bigint[])`,
      [first.map((r) => r.id)],
    );
    await drain(worker(ehr.baseUrl, ris.port), order.id);

    const [report] = await ehr.search<DiagnosticReport>(
      'DiagnosticReport',
      `identifier=urn:imaging-ai-adapter:diagnostic-report|${order.id}`,
    );
    expect(report!.status).toBe('corrected');
    expect(ris.received.length).toBe(sentAfterCorrection);
    const replayed = (await db.dataSource.query(
      `SELECT status, last_error FROM outbox WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [first.map((r) => r.id)],
    )) as Array<{ status: string }>;
    expect(replayed.map((r) => r.status)).toEqual(['delivered', 'delivered']);
    const attempts = (await db.dataSource.query(
      `SELECT summary FROM audit_events
        WHERE order_id = $1 AND kind = 'outbound.attempt' AND detail ? 'supersededBy' ORDER BY id`,
      [order.id],
    )) as Array<{ summary: string }>;
    expect(attempts).toHaveLength(2);
  });

  // A replay while the correction is on its way: the old ORU was claimed at once (no earlier
  // row of the order pending) and sent beside the correction, or queued behind it on the
  // connection: the RIS took the F after the C. Now a row waits while a later row of its
  // order and destination is in flight, and is then superseded.
  it('the first result replayed while its correction is in flight is not sent after it', async () => {
    const hl7Only = testOutboundSettings({ destinations: [DESTINATIONS.hl7] });
    const events = new OutboxOrderEvents(hl7Only);
    const order = await seedOrder(db.dataSource);
    await playStatus(db.dataSource, events, order, 'DELIVERED', { documents: RESULT_DOCS });
    await drain(worker('http://127.0.0.1:9/fhir', refusingRis.port), order.id);
    const [first] = (await rowsOf(order.id)).filter((r) => r.kind === 'hl7-oru');
    expect(first!.status).toBe('dead');

    await correct(events, order);
    const before = slowRis.received.length;
    const w = worker(ehr.baseUrl, slowRis.port, 2);
    w.start();
    try {
      // The correction is being delivered (the RIS takes 1.5 s to answer): replay the old one.
      const end = Date.now() + 10_000;
      while (slowRis.received.length === before && Date.now() < end) {
        await new Promise((r) => setTimeout(r, 10));
      }
      expect(slowRis.received.length).toBe(before + 1);
      await db.dataSource.query(
        `UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = now(), updated_at = now()
          WHERE id = $1::bigint`,
        [first!.id],
      );
      for (;;) {
        const [{ n }] = (await db.dataSource.query(
          `SELECT count(*)::int AS n FROM outbox WHERE order_id = $1 AND status = 'pending'`,
          [order.id],
        )) as Array<{ n: number }>;
        if (n === 0) break;
        if (Date.now() > end) throw new Error('outbox not drained');
        await new Promise((r) => setTimeout(r, 30));
      }
    } finally {
      await w.stop();
    }
    const sent = slowRis.received.slice(before).map((m) => parseHl7(m).get('OBR-25'));
    expect(sent).toEqual(['C']);
    const [replayed] = (await db.dataSource.query(
      `SELECT status, attempts FROM outbox WHERE id = $1::bigint`,
      [first!.id],
    )) as Array<{ status: string }>;
    expect(replayed!.status).toBe('delivered');
  });
});
