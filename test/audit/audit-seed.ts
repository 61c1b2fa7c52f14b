import { Client } from 'pg';
import { MllpClient } from '../../src/hl7';
import { hl7Fixture } from '../helpers/hl7-fixtures';
import type { TestAdapter } from '../helpers/adapter';

/** The orders the audit suites work on, sent over real MLLP through the real front door. */
export const SEEDED = {
  /** IHE SWF ORM^O01 v2.3.1: PID-5 SCHMIDT^ANNA^MARIA, PID-7 19560214, PID-3 PAT-4711. */
  swf: {
    accession: 'ACC-20240318-0042',
    patientId: 'PAT-4711',
    placer: 'PLC-100234',
    msh10: 'MSGID20240318144217',
    changeMsh10: 'MSGID20240318152210',
    studyUid: '1.2.276.0.7230010.3.1.2.2831176988.12345.1710769337.1',
  },
  rejectedMsh10: 'MSGID20240321090000',
  fixtures: [
    'orm-o01-v231-ihe-swf-zds',
    'orm-o01-v251-change-xo',
    'omi-o23-v251-ihe-ipc',
    'omi-o23-v28-multi-order',
    'orm-o01-v23-lf-bom-escapes',
    'orm-o01-v24-latin1-crlf',
    'broken-orm-missing-pid3',
  ],
} as const;

export async function sendFixtures(adapter: TestAdapter): Promise<void> {
  const client = new MllpClient({
    host: '127.0.0.1',
    port: adapter.mllpPort,
    responseTimeoutMs: 10_000,
  });
  try {
    for (const name of SEEDED.fixtures) {
      await client.send(hl7Fixture(name));
      // distinct created_at per order, as in real traffic (the list is ordered by it)
      await new Promise((r) => setTimeout(r, 5));
    }
  } finally {
    await client.close();
  }
}

/**
 * A result message that gave up after its retries, as the outbound workers leave it: an
 * outbox row in `dead` with its attempts, plus the attempt and dead-letter audit events.
 * (The outbound workers belong to the results issue; the rows have their shape.)
 */
export async function addDeadLetter(
  db: Client,
  orderId: string,
  destination = 'ris-hl7',
): Promise<string> {
  const oru = [
    'MSH|^~\\&|AI_ADAPTER|HOSPA|RADIS1|IHEDEMO|20240318170000||ORU^R01^ORU_R01|ADP-0001|P|2.5.1',
    'PID|1||PAT-4711^^^HOSPA^MR||SCHMIDT^ANNA^MARIA^^^^L||19560214|F',
    'OBR|1|PLC-100234^RADIS1|FIL-55012^DSS_OF|24627-2^CT Chest^LN|||||||||||||ACC-20240318-0042||||||CT|F',
    'OBX|1|TX|LN-18782-3^Study observation^LN||No nodule above 6 mm||||||F',
  ].join('\r');
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO outbox (order_id, destination, kind, dedupe_key, payload, status, attempts, last_error, updated_at)
     VALUES ($1, $2, 'hl7.oru', $3, $4, 'dead', 8, 'ECONNREFUSED 127.0.0.1:2576 (8 attempts over 2 h)', now())
     RETURNING id::text`,
    [orderId, destination, `oru:${orderId}:${Date.now()}`, { hl7: oru }],
  );
  const id = rows[0]!.id;
  await db.query(
    `INSERT INTO audit_events (order_id, kind, severity, actor, summary, detail) VALUES
       ($1, 'outbound.attempt', 'warning', 'outbox-worker', 'ORU^R01 to ris-hl7: connection refused', $2),
       ($1, 'outbound.dead-letter', 'error', 'outbox-worker', 'ORU^R01 to ris-hl7 gave up after 8 attempts', $3)`,
    [
      orderId,
      { outboxId: id, destination, attempt: 8, answer: { error: 'ECONNREFUSED' }, latencyMs: 3 },
      { outboxId: id, destination, attempts: 8, lastError: 'ECONNREFUSED' },
    ],
  );
  return id;
}

export async function orderIdByAccession(db: Client, accession: string): Promise<string> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM orders WHERE accession_number = $1`,
    [accession],
  );
  if (!rows[0]) throw new Error(`no order with accession ${accession}`);
  return rows[0].id;
}
