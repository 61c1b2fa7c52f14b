import { Client } from 'pg';
import { MllpClient } from '../../src/hl7';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { ackSummary, hl7Fixture, withControlId } from '../helpers/hl7-fixtures';

describe('HL7v2 orders over MLLP (real adapter, real socket, real PostgreSQL)', () => {
  let adapter: TestAdapter;
  let client: MllpClient;
  let db: Client;

  beforeAll(async () => {
    // ingest in isolation: no lifecycle worker moves the orders on while we look at them
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
    client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    db = new Client({ connectionString: adapter.db.url });
    db.on('error', () => undefined); // terminated on purpose in the database-down case
    await db.connect();
  });
  afterAll(async () => {
    await client?.close();
    await db?.end();
    await adapter?.close();
  });

  const count = async (sql: string, params: unknown[] = []) =>
    Number((await db.query(sql, params)).rows[0].n);

  it('accepts an IHE SWF ORM^O01 only after storing the order, the raw bytes and the audit trail', async () => {
    const raw = hl7Fixture('orm-o01-v231-ihe-swf-zds');
    const reply = await client.send(raw);
    const ack = ackSummary(reply);
    expect(ack).toMatchObject({ code: 'AA', controlIdEchoed: 'MSGID20240318144217' });

    const { rows: orders } = await db.query(
      `SELECT o.*, m.raw FROM orders o JOIN inbound_messages m ON m.id = o.inbound_message_id WHERE o.placer_order_number = 'PLC-100234'`,
    );
    expect(orders).toHaveLength(1);
    const order = orders[0];
    expect(order).toMatchObject({
      state: 'received',
      accession_number: 'ACC-20240318-0042',
      patient_id: 'PAT-4711',
      study_instance_uid: '1.2.276.0.7230010.3.1.2.2831176988.12345.1710769337.1',
      sender: 'RADIS1^IHEDEMO',
    });
    expect(Buffer.compare(order.raw, raw)).toBe(0);
    const kinds = (
      await db.query(`SELECT kind FROM audit_events WHERE order_id = $1 ORDER BY id`, [order.id])
    ).rows.map((r) => r.kind);
    expect(kinds).toEqual(['order.created', 'mapping.applied']);
    const lineage = (
      await db.query(
        `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'mapping.applied'`,
        [order.id],
      )
    ).rows[0].detail.lineage as Array<{ target: string; source: string }>;
    expect(lineage).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ target: 'accessionNumber', source: 'OBR-18' }),
      ]),
    );
    expect(
      await count(
        `SELECT (SELECT count(*) FROM graphile_worker.jobs WHERE task_identifier = 'order.place-upstream' AND key = $1)
              + (SELECT count(*) FROM job_outbox WHERE task = 'order.place-upstream' AND job_key = $1) AS n`,
        [`place:${order.id}`],
      ),
    ).toBe(1);
  });

  it('answers a resend (same sender, same MSH-10) with the stored ACK and creates nothing', async () => {
    const raw = hl7Fixture('orm-o01-v231-ihe-swf-zds');
    const before = await count(`SELECT count(*) AS n FROM orders`);
    const firstAck = (
      await db.query(
        `SELECT response FROM inbound_messages WHERE message_control_id = 'MSGID20240318144217' AND outcome = 'accepted'`,
      )
    ).rows[0].response as Buffer;
    const reply = await client.send(raw);
    expect(Buffer.compare(reply, firstAck)).toBe(0);
    expect(await count(`SELECT count(*) AS n FROM orders`)).toBe(before);
    expect(
      await count(
        `SELECT count(*) AS n FROM inbound_messages WHERE message_control_id = 'MSGID20240318144217' AND outcome = 'duplicate'`,
      ),
    ).toBe(1);
  });

  it('does not double an order resent under a new MSH-10', async () => {
    const raw = withControlId(hl7Fixture('orm-o01-v231-ihe-swf-zds'), 'MSGID-NEW-1');
    const reply = await client.send(raw);
    expect(ackSummary(reply).code).toBe('AA');
    expect(
      await count(`SELECT count(*) AS n FROM orders WHERE placer_order_number = 'PLC-100234'`),
    ).toBe(1);
    expect(
      await count(`SELECT count(*) AS n FROM audit_events WHERE kind = 'order.duplicate'`),
    ).toBe(1);
  });

  it('handles the real-world quirks: LF + BOM + escapes (v2.3), Latin-1 + CRLF (v2.4), UTF-8 OMI with IPC (v2.5.1)', async () => {
    for (const name of [
      'orm-o01-v23-lf-bom-escapes',
      'orm-o01-v24-latin1-crlf',
      'omi-o23-v251-ihe-ipc',
    ]) {
      const reply = await client.send(hl7Fixture(name));
      expect({ name, code: ackSummary(reply).code }).toEqual({ name, code: 'AA' });
    }
    const latin = (
      await db.query(
        `SELECT request FROM orders WHERE sender LIKE '%' AND request->'patient'->'name'->>'family' LIKE '%ü%' OR request->'patient'->'name'->>'family' LIKE '%Ü%'`,
      )
    ).rows;
    expect(latin.length).toBeGreaterThanOrEqual(1);
    const quirks = (
      await db.query(
        `SELECT quirks FROM inbound_messages WHERE outcome = 'accepted' AND quirks::text LIKE '%bom%'`,
      )
    ).rows;
    expect(quirks.length).toBe(1);
  });

  it('answers an enhanced-mode OMI^O23 with two orders with CA and creates both', async () => {
    const reply = await client.send(hl7Fixture('omi-o23-v28-multi-order'));
    expect(ackSummary(reply).code).toBe('CA');
    const msg = (
      await db.query(
        `SELECT id FROM inbound_messages WHERE message_type = 'OMI^O23' AND outcome = 'accepted' ORDER BY received_at DESC LIMIT 1`,
      )
    ).rows[0];
    expect(
      await count(`SELECT count(*) AS n FROM orders WHERE inbound_message_id = $1`, [msg.id]),
    ).toBe(2);
    const groups = (
      await db.query(
        `SELECT DISTINCT placer_group_number FROM orders WHERE inbound_message_id = $1`,
        [msg.id],
      )
    ).rows;
    expect(groups).toHaveLength(1);
    expect(groups[0].placer_group_number).toBeTruthy();
  });

  it('refuses what it cannot take with a specific AE/AR and ERR, and keeps the raw bytes', async () => {
    const cases: Array<[string, string, RegExp]> = [
      ['broken-orm-missing-pid3', 'AE', /PID\^1\^3\^.*101/],
      ['broken-oru-r01-unsupported', 'AR', /200/],
      ['broken-orm-bad-version', 'AR', /203/],
      ['broken-orm-bad-orc1', 'AE', /ORC\^1\^1.*103/],
    ];
    for (const [name, code, err] of cases) {
      const raw = hl7Fixture(name);
      const ack = ackSummary(await client.send(raw));
      expect({ name, code: ack.code }).toEqual({ name, code });
      expect({ name, err: ack.errors.join('\n') }).toEqual({
        name,
        err: expect.stringMatching(err),
      });
      const stored = (
        await db.query(`SELECT raw, outcome, response_code FROM inbound_messages WHERE raw = $1`, [
          raw,
        ])
      ).rows;
      expect(stored).toEqual([
        expect.objectContaining({ outcome: 'rejected', response_code: code }),
      ]);
    }
    expect(
      await count(`SELECT count(*) AS n FROM audit_events WHERE kind = 'inbound.rejected'`),
    ).toBe(4);
  });

  it('answers garbage that is not HL7 with AR and keeps it', async () => {
    const raw = Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    const ack = ackSummary(await client.send(raw));
    expect(ack.code).toBe('AR');
    expect(
      await count(
        `SELECT count(*) AS n FROM inbound_messages WHERE raw = $1 AND outcome = 'rejected'`,
        [raw],
      ),
    ).toBe(1);
  });

  it('cancels (CA) an open order and changes (XO) another; a cancel for an unknown order is AE 204', async () => {
    const xoReply = await client.send(hl7Fixture('orm-o01-v251-change-xo'));
    expect(ackSummary(xoReply).code).toBe('AA');
    expect(xoReply.toString('latin1')).toMatch(/\rORC\|XR\|PLC-100234/);
    const caReply = await client.send(hl7Fixture('orm-o01-v251-cancel-ca'));
    const ca = ackSummary(caReply);
    expect(ca.code).toBe('AA');
    // the placer learns per order that the cancel was done: ORR^O02 with ORC-1 CR
    expect(caReply.toString('latin1')).toMatch(/^MSH\|[^\r]*\|ORR\^O02\^ORR_O02\|/);
    expect(caReply.toString('latin1')).toMatch(/\rORC\|CR\|PLC-100234/);
    const order = (
      await db.query(
        `SELECT id, cancel_requested_at, request FROM orders WHERE placer_order_number = 'PLC-100234'`,
      )
    ).rows[0];
    expect(order.cancel_requested_at).not.toBeNull();
    expect(order.request.priority).toBe('stat');
    expect(
      await count(
        `SELECT (SELECT count(*) FROM graphile_worker.jobs WHERE key = $1)
              + (SELECT count(*) FROM job_outbox WHERE job_key = $1) AS n`,
        [`cancel:${order.id}`],
      ),
    ).toBe(1);

    // the same cancel under a new control id for an order nobody placed
    const unknown = withControlId(hl7Fixture('orm-o01-v251-cancel-ca'), 'CA-UNKNOWN-1');
    const text = unknown
      .toString('latin1')
      .replace(/PLC-100234/g, 'PLC-999999')
      .replace(/FIL-55012/g, 'FIL-999999');
    const ack = ackSummary(await client.send(Buffer.from(text, 'latin1')));
    expect(ack.code).toBe('AE');
    expect(ack.errors.join()).toMatch(/204/);
  });

  it('answers UC (unable to cancel) when the order already reached its end', async () => {
    const swap = (raw: Buffer, id: string) =>
      withControlId(
        Buffer.from(
          raw
            .toString('latin1')
            .replace(/PLC-100234/g, 'PLC-DONE-1')
            .replace(/FIL-55012/g, 'FIL-DONE-1'),
          'latin1',
        ),
        id,
      );
    expect(
      ackSummary(await client.send(swap(hl7Fixture('orm-o01-v231-ihe-swf-zds'), 'DONE-NW-1'))).code,
    ).toBe('AA');
    await db.query(
      `UPDATE orders SET state = 'delivered' WHERE placer_order_number = 'PLC-DONE-1'`,
    );
    const reply = await client.send(swap(hl7Fixture('orm-o01-v251-cancel-ca'), 'DONE-CA-1'));
    expect(ackSummary(reply).code).toBe('AA');
    expect(reply.toString('latin1')).toMatch(/\rORC\|UC\|PLC-DONE-1/);
    const order = (
      await db.query(
        `SELECT id, cancel_requested_at FROM orders WHERE placer_order_number = 'PLC-DONE-1'`,
      )
    ).rows[0];
    expect(order.cancel_requested_at).toBeNull();
    expect(
      await count(
        `SELECT count(*) AS n FROM audit_events WHERE order_id = $1 AND kind = 'order.cancel-refused'`,
        [order.id],
      ),
    ).toBe(1);

    // a change (XO) of the ended order: UX (unable to change), and the order stays as it was
    const change = await client.send(swap(hl7Fixture('orm-o01-v251-change-xo'), 'DONE-XO-1'));
    expect(ackSummary(change).code).toBe('AA');
    expect(change.toString('latin1')).toMatch(/\rORC\|UX\|PLC-DONE-1/);
    const after = (
      await db.query(`SELECT request FROM orders WHERE placer_order_number = 'PLC-DONE-1'`)
    ).rows[0];
    expect(after.request.priority).not.toBe('stat');
    expect(
      await count(
        `SELECT count(*) AS n FROM audit_events WHERE order_id = $1 AND kind = 'order.change-refused'`,
        [order.id],
      ),
    ).toBe(1);
    expect(
      await count(
        `SELECT count(*) AS n FROM job_outbox WHERE payload->>'orderId' = $1 AND task = 'order.update-metadata'`,
        [order.id],
      ),
    ).toBe(0);
  });

  /**
   * The ORC of an ORR^O02 names the order by the EI the placer sent, whole: an IHE RAD-4 order
   * from a French RIS names the issuer of each number by OID (as the PAM-FR style order of
   * test/fixtures/hl7/omi-o23-v251-nir-before-pi.hl7), a filler number with its OID only.
   */
  it('answers a cancel with the placer and filler numbers as the placer sent them', async () => {
    const numbers = (bytes: Buffer, id: string) =>
      Buffer.from(
        withControlId(bytes, id)
          .toString('latin1')
          .replace(/PLC-100234\^RADIS1/g, 'PLC-EI-7^RADIS1^1.2.250.1.999.1.2^ISO')
          .replace(/FIL-55012\^DSS_OF/g, 'FIL-EI-7^^1.2.250.1.999.2^ISO')
          .replace(/ACC-20240318-0042/g, 'ACC-EI-7'),
        'latin1',
      );
    const nw = await client.send(numbers(hl7Fixture('orm-o01-v231-ihe-swf-zds'), 'EI-NW-7'));
    expect(ackSummary(nw).code).toBe('AA');
    const ca = await client.send(numbers(hl7Fixture('orm-o01-v251-cancel-ca'), 'EI-CA-7'));
    expect(ackSummary(ca).code).toBe('AA');
    expect(ca.toString('latin1')).toMatch(
      /\rORC\|CR\|PLC-EI-7\^RADIS1\^1\.2\.250\.1\.999\.1\.2\^ISO\|FIL-EI-7\^\^1\.2\.250\.1\.999\.2\^ISO\r/,
    );
  });

  it('keys a message without MSH-10 by a hash of its content: a resend is answered, not processed again', async () => {
    const text = hl7Fixture('orm-o01-v231-ihe-swf-zds')
      .toString('latin1')
      .replace('|MSGID20240318144217|', '||')
      .replace(/PLC-100234/g, 'PLC-NOID-1');
    const raw = Buffer.from(text, 'latin1');
    const first = await client.send(raw);
    expect(ackSummary(first).code).toBe('AA');
    const again = await client.send(raw);
    expect(Buffer.compare(again, first)).toBe(0);
    expect(
      await count(`SELECT count(*) AS n FROM orders WHERE placer_order_number = 'PLC-NOID-1'`),
    ).toBe(1);
    const keys = (
      await db.query(
        `SELECT idempotency_key FROM inbound_messages WHERE raw = $1 AND outcome = 'accepted'`,
        [raw],
      )
    ).rows;
    expect(keys[0].idempotency_key).toMatch(/\|sha256:[0-9a-f]{64}$/);
  });

  it('never answers AA when the message cannot be stored (database refusing connections)', async () => {
    const admin = new Client({ connectionString: process.env.TEST_DATABASE_SERVER_URL });
    await admin.connect();
    const name = adapter.db.name;
    try {
      await admin.query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS false`);
      await admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
        [name],
      );
      const raw = withControlId(hl7Fixture('orm-o01-v231-ihe-swf-zds'), 'MSG-DB-DOWN-1');
      const ack = ackSummary(await client.send(raw));
      expect(ack.code).toBe('AR');
      expect(ack.errors.join()).toMatch(/207/);
      await admin.query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`);
      // the sender resends once the database is back: now it is taken
      let code: string | undefined;
      for (let i = 0; i < 20 && code !== 'AA'; i++) {
        code = ackSummary(await client.send(raw)).code;
        if (code !== 'AA') await new Promise((r) => setTimeout(r, 250));
      }
      expect(code).toBe('AA');
    } finally {
      await admin.query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`);
      await admin.end();
      await db.end().catch(() => undefined);
      db = new Client({ connectionString: adapter.db.url });
      db.on('error', () => undefined);
      await db.connect();
    }
  });
});
