import { Client } from 'pg';
import { seededRandom } from '../../src/common/seeded-random';
import { MllpClient } from '../../src/hl7';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { ackSummary, hl7Fixture } from '../helpers/hl7-fixtures';

/**
 * Many connections at once: the fast path commits the messages that arrive together in one
 * batch. Resends racing their original on another connection, and two different messages
 * racing to create the same order, must still give one order each, and every resend the
 * original's ACK byte for byte.
 */
describe('HL7v2 over MLLP, eight connections at once (batched commits)', () => {
  let adapter: TestAdapter;
  let db: Client;

  beforeAll(async () => {
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
  });

  /** The IHE SWF order with its own control id, placer and accession numbers. */
  function variant(controlId: string, placer: string): Buffer {
    return Buffer.from(
      hl7Fixture('orm-o01-v231-ihe-swf-zds')
        .toString('latin1')
        .replace('MSGID20240318144217', controlId)
        .replace(/PLC-100234/g, placer)
        .replace(/ACC-20240318-0042/g, `ACC-${placer}`),
      'latin1',
    );
  }

  it('creates each order once and answers every resend with the original ACK', async () => {
    // 120 distinct orders; each sent twice with the same MSH-10 (a resend) and the first 40
    // also under a new MSH-10 (the same order again), all shuffled over eight connections.
    const sends: Array<{ placer: string; controlId: string; raw: Buffer }> = [];
    for (let i = 0; i < 120; i++) {
      const placer = `PLC-C${i}`;
      const raw = variant(`CC-${i}`, placer);
      sends.push({ placer, controlId: `CC-${i}`, raw }, { placer, controlId: `CC-${i}`, raw });
      if (i < 40) sends.push({ placer, controlId: `CC-${i}-b`, raw: variant(`CC-${i}-b`, placer) });
    }
    const random = seededRandom(20261121);
    for (let i = sends.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [sends[i], sends[j]] = [sends[j]!, sends[i]!];
    }
    const seqScans = async () => {
      await new Promise((r) => setTimeout(r, 1_200)); // backends flush their counters ~1 s after
      const { rows } = await db.query(
        `SELECT seq_scan::int AS n FROM pg_stat_user_tables WHERE relname = 'orders'`,
      );
      return rows[0].n as number;
    };
    const seqScansBefore = await seqScans();
    const replies = new Map<string, Buffer[]>();
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        const client = new MllpClient({
          host: '127.0.0.1',
          port: adapter.mllpPort,
          responseTimeoutMs: 20_000,
        });
        try {
          while (next < sends.length) {
            const send = sends[next++]!;
            const reply = await client.send(send.raw);
            replies.set(send.controlId, [...(replies.get(send.controlId) ?? []), reply]);
          }
        } finally {
          await client.close();
        }
      }),
    );

    // every lookup of the intake went through an index: a cached generic plan that scans
    // orders once per message turns ingest quadratic (seen: 19 M rows read for 6,200 messages)
    expect((await seqScans()) - seqScansBefore).toBeLessThan(10);

    for (const [controlId, answers] of replies) {
      for (const answer of answers) {
        expect(ackSummary(answer)).toMatchObject({ code: 'AA', controlIdEchoed: controlId });
      }
      if (answers.length === 2) expect(Buffer.compare(answers[0]!, answers[1]!)).toBe(0);
    }
    const { rows } = await db.query(
      `SELECT placer_order_number, count(*)::int AS n FROM orders
        WHERE placer_order_number LIKE 'PLC-C%' GROUP BY 1`,
    );
    expect(rows).toHaveLength(120);
    expect(rows.every((r) => r.n === 1)).toBe(true);
    const outcomes = await db.query(
      `SELECT outcome, count(*)::int AS n FROM inbound_messages
        WHERE message_control_id LIKE 'CC-%' GROUP BY 1 ORDER BY 1`,
    );
    // every input kept: 160 accepted (120 + 40 under a new MSH-10), 120 resends recorded
    expect(outcomes.rows).toEqual([
      { outcome: 'accepted', n: 160 },
      { outcome: 'duplicate', n: 120 },
    ]);
    const duplicateOrders = await db.query(
      `SELECT count(*)::int AS n FROM audit_events WHERE kind = 'order.duplicate'`,
    );
    expect(duplicateOrders.rows[0].n).toBe(40);
    const jobs = await db.query(
      `SELECT count(*)::int AS n FROM (
         SELECT job_key FROM job_outbox WHERE task = 'order.place-upstream'
         UNION ALL SELECT key FROM graphile_worker.jobs WHERE task_identifier = 'order.place-upstream') j`,
    );
    expect(jobs.rows[0].n).toBe(120);

    // and the messages did share commits: some batches held more than one message
    const metrics = await (
      await fetch(`${adapter.httpUrl}/metrics`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
      })
    ).text();
    const single = Number(
      /adapter_intake_batch_messages_bucket\{le="1"\} (\d+)/.exec(metrics)?.[1],
    );
    const batches = Number(/adapter_intake_batch_messages_count (\d+)/.exec(metrics)?.[1]);
    const messages = Number(/adapter_intake_batch_messages_sum (\d+)/.exec(metrics)?.[1]);
    expect(batches).toBeGreaterThan(single);
    expect(messages).toBeGreaterThan(batches);
  });
});
