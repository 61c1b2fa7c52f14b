import { Client } from 'pg';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { orderIdByAccession, SEEDED, sendFixtures } from './audit-seed';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

jest.setTimeout(120_000);

/** One order's outbox as a long-lived order leaves it: 2,000 documents (corrections, replays). */
const ROWS = 2000;

/**
 * Seeds `ROWS` outbox rows for one order as the outbox workers leave them (an ORU of ~3 KB,
 * its last exchange with the text sent and the RIS's ACK, an `outbound.attempt` event each,
 * and for every tenth a dead letter and a replay), by SQL for volume.
 */
async function seedOutbox(db: Client, orderId: string): Promise<void> {
  const obx = Array.from(
    { length: 30 },
    (_, i) =>
      `OBX|${i + 1}|TX|LN-18782-3^Study observation^LN||Finding ${i + 1}: no nodule above 6 mm in segment ${i + 1}, stable since prior||||||F`,
  ).join('\r');
  const oru = [
    'MSH|^~\\&|AI_ADAPTER|HOSPA|RADIS1|IHEDEMO|20240318170000||ORU^R01^ORU_R01|ADP-__N__|P|2.5.1',
    'PID|1||PAT-4711^^^HOSPA^MR||SCHMIDT^ANNA^MARIA^^^^L||19560214|F',
    'OBR|1|PLC-100234^RADIS1|FIL-55012^DSS_OF|24627-2^CT Chest^LN|||||||||||||ACC-20240318-0042||||||CT|C',
    obx,
  ].join('\r');
  const ack =
    'MSH|^~\\&|RADIS1|IHEDEMO|AI_ADAPTER|HOSPA|20240318170001||ACK^R01^ACK|ACK-__N__|P|2.5.1\rMSA|AA|ADP-__N__';
  await db.query(
    `WITH x AS (
       INSERT INTO outbox (order_id, destination, kind, dedupe_key, payload, status, attempts, last_error,
                           created_at, updated_at, delivered_at, last_exchange, dead_xid)
       SELECT $1::uuid, 'ris-hl7', 'hl7-oru', 'oru:' || $1 || ':' || n,
              jsonb_build_object('hl7', replace($2, '__N__', n::text)),
              CASE WHEN n % 10 = 0 THEN 'dead' ELSE 'delivered' END, 1,
              CASE WHEN n % 10 = 0 THEN 'AR from the RIS' END,
              now() - (${ROWS} - n) * interval '1 minute', now() - (${ROWS} - n) * interval '1 minute',
              CASE WHEN n % 10 <> 0 THEN now() - (${ROWS} - n) * interval '1 minute' END,
              jsonb_build_object('attempt', 1, 'at', now(), 'outcome', 'delivered',
                'sent', jsonb_build_object('contentType', 'x-application/hl7-v2+er7', 'text', replace($2, '__N__', n::text)),
                'answer', jsonb_build_object('status', 'AA', 'contentType', 'x-application/hl7-v2+er7', 'text', replace($3, '__N__', n::text))),
              CASE WHEN n % 10 = 0 THEN pg_current_xact_id() END
         FROM generate_series(1, ${ROWS}) n
       RETURNING id, status)
     INSERT INTO audit_events (order_id, kind, severity, actor, summary, detail)
     SELECT $1::uuid, k.kind, k.severity, 'outbox-worker', k.kind || ' ORU^R01 to ris-hl7',
            jsonb_build_object('outboxId', x.id::text, 'destination', 'ris-hl7', 'attempt', 1,
                               'answer', jsonb_build_object('code', 'AA'), 'latencyMs', 3)
       FROM x CROSS JOIN LATERAL (VALUES ('outbound.attempt', 'info'),
                                         ('outbound.dead-letter', 'error'),
                                         ('outbound.replay', 'info')) k(kind, severity)
      WHERE k.kind = 'outbound.attempt' OR x.status = 'dead'
      ORDER BY x.id`,
    [orderId, oru, ack],
  );
}

describe('an order with 2,000 outbound documents: the order view and its outbound pages stay bounded', () => {
  let adapter: TestAdapter;
  let db: Client;
  let orderId: string;

  const get = async (path: string, role: keyof typeof TEST_TOKENS = 'analyst') => {
    const started = performance.now();
    const res = await fetch(`${adapter.httpUrl}${path}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS[role]}` },
    });
    const text = await res.text();
    const ms = Math.round(performance.now() - started);
    const bytes = Buffer.byteLength(text);
    const type = res.headers.get('content-type') ?? '';
    return {
      status: res.status,
      text,
      bytes,
      ms,
      body: type.includes('json') ? (JSON.parse(text) as Json) : undefined,
    };
  };

  beforeAll(async () => {
    adapter = await startTestAdapter({
      JOBS_ENABLED: 'false',
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: '9',
    });
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
    await sendFixtures(adapter);
    orderId = await orderIdByAccession(db, SEEDED.swf.accession);
    await seedOutbox(db, orderId);
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
  });

  it('the API answers the newest outbound documents and a bounded body; older ones by signed cursor', async () => {
    const detail = await get(`/api/audit/orders/${orderId}`);
    process.stdout.write(`order API: ${detail.bytes} bytes, ${detail.ms} ms\n`);
    expect(detail.status).toBe(200);
    expect(detail.bytes).toBeLessThan(2 * 1024 * 1024);
    const first = detail.body.outbound as Array<{ id: string }>;
    expect(first.length).toBeLessThanOrEqual(50);
    expect(detail.body.outboundTotal).toBe(ROWS);
    // newest first
    const ids = first.map((o) => BigInt(o.id));
    expect([...ids].sort((a, b) => (a > b ? -1 : a < b ? 1 : 0))).toEqual(ids);
    const { rows } = await db.query(`SELECT max(id)::text AS id FROM outbox WHERE order_id = $1`, [
      orderId,
    ]);
    expect(first[0]!.id).toBe(rows[0].id);
    // every document exactly once, page by page
    const seen = new Set(first.map((o) => o.id));
    let cursor: string | undefined = detail.body.outboundNextCursor;
    let pages = 0;
    while (cursor) {
      const page = await get(
        `/api/audit/orders/${orderId}/outbound?limit=200&cursor=${encodeURIComponent(cursor)}`,
      );
      expect(page.status).toBe(200);
      expect(page.bytes).toBeLessThan(8 * 1024 * 1024);
      for (const o of page.body.items as Array<{ id: string }>) {
        expect(seen.has(o.id)).toBe(false);
        seen.add(o.id);
      }
      cursor = page.body.nextCursor;
      pages += 1;
    }
    expect(seen.size).toBe(ROWS);
    expect(pages).toBeGreaterThan(5);
    // the first page of the list itself, and a refused cursor
    const own = await get(`/api/audit/orders/${orderId}/outbound?limit=200`);
    process.stdout.write(`outbound page of 200: ${own.bytes} bytes, ${own.ms} ms\n`);
    expect(own.body.items[0].id).toBe(rows[0].id);
    const forged = `${own.body.nextCursor.slice(0, -3)}AAA`;
    expect(
      (await get(`/api/audit/orders/${orderId}/outbound?cursor=${encodeURIComponent(forged)}`))
        .status,
    ).toBe(400);
    const deadLetters = await get('/api/audit/dead-letters?limit=1');
    expect(
      (
        await get(
          `/api/audit/orders/${orderId}/outbound?cursor=${encodeURIComponent(deadLetters.body.nextCursor)}`,
        )
      ).status,
    ).toBe(400);
    // another order's cursor is not this one's
    const other = await orderIdByAccession(db, 'ACC-20240320-0100').catch(() => undefined);
    if (other) {
      expect(
        (
          await get(
            `/api/audit/orders/${other}/outbound?cursor=${encodeURIComponent(own.body.nextCursor)}`,
          )
        ).status,
      ).toBe(400);
    }
  });

  it("the timeline holds the order's first and newest events and pages the older ones by the events list's signed cursor", async () => {
    const detail = await get(`/api/audit/orders/${orderId}`);
    process.stdout.write(`order API (timeline): ${detail.bytes} bytes, ${detail.ms} ms\n`);
    const timelineBytes = Buffer.byteLength(JSON.stringify(detail.body.timeline));
    process.stdout.write(`timeline: ${timelineBytes} bytes\n`);
    expect(timelineBytes).toBeLessThan(512 * 1024);
    expect(detail.bytes).toBeLessThan(1024 * 1024);
    const timeline = detail.body.timeline as Array<{ id: string; kind: string }>;
    expect(timeline.length).toBeLessThanOrEqual(1000);
    expect(detail.body.timelineOmitted).toBeGreaterThan(0);
    // intake first, the newest event last, the dead letters between kept
    expect(timeline[0]!.kind).toBe('inbound.received');
    const { rows } = await db.query(
      `SELECT max(id)::text AS id, count(*)::int AS n FROM audit_events WHERE order_id = $1`,
      [orderId],
    );
    expect(timeline[timeline.length - 1]!.id).toBe(rows[0].id);
    expect(timeline.filter((e) => e.kind === 'outbound.dead-letter').length).toBeGreaterThan(150);
    // the older events, newest first, from just below the newest shown
    const cursor = detail.body.timelineOlderCursor as string;
    expect(cursor).toBeTruthy();
    const older = await get(
      `/api/audit/events?orderId=${orderId}&limit=200&cursor=${encodeURIComponent(cursor)}`,
    );
    expect(older.status).toBe(200);
    const firstOlder = BigInt(older.body.items[0].id);
    const tail = timeline.filter(
      (e) => e.kind !== 'outbound.dead-letter' && e.kind !== 'outbound.replay',
    );
    expect(firstOlder).toBeLessThan(BigInt(tail[tail.length - 1]!.id));
    expect(older.body.nextCursor).toBeTruthy();
    // the page says where the rest is
    const page = await get(`/audit/orders/${orderId}`);
    expect(page.text).toContain('repeated events');
  });

  it('cuts a large body in a list and links to the whole document, itself bounded', async () => {
    // 60,000 OBX segments (3.4 MB): their values are masked, the segments stay
    const big = Array.from(
      { length: 60_000 },
      (_, i) => `OBX|${i + 1}|TX|LN-18782-3^Study observation^LN||finding ${i + 1}||||||F`,
    ).join('\r');
    const { rows } = await db.query<{ id: string }>(
      `INSERT INTO outbox (order_id, destination, kind, dedupe_key, payload, status, attempts, updated_at, last_error, dead_xid)
       VALUES ($1, 'ris-hl7', 'hl7-oru', 'oru:big', $2, 'dead', 8, now(), 'AR from the RIS', pg_current_xact_id())
       RETURNING id::text`,
      [
        orderId,
        {
          hl7: `MSH|^~\\&|AI_ADAPTER|HOSPA|RADIS1|IHEDEMO|20240318170000||ORU^R01^ORU_R01|ADP-BIG|P|2.5.1\rPID|1||PAT-4711^^^HOSPA^MR||SCHMIDT^ANNA^MARIA\r${big}`,
        },
      ],
    );
    const id = rows[0]!.id;
    try {
      const detail = await get(`/api/audit/orders/${orderId}`);
      expect(detail.bytes).toBeLessThan(2 * 1024 * 1024);
      const row = (detail.body.outbound as Array<{ id: string }>).find((o) => o.id === id) as Json;
      expect(row.bodiesCut).toBe(true);
      expect(row.fullPath).toBe(`/api/audit/outbound/${id}`);
      expect(detail.text).not.toContain('SCHMIDT');
      const dead = await get('/api/audit/dead-letters?limit=200');
      process.stdout.write(`dead letters, 200: ${dead.bytes} bytes, ${dead.ms} ms\n`);
      expect(dead.bytes).toBeLessThan(8 * 1024 * 1024);
      const full = await get(`/api/audit/outbound/${id}`);
      process.stdout.write(`whole document: ${full.bytes} bytes, ${full.ms} ms\n`);
      expect(full.status).toBe(200);
      expect(full.bytes).toBeLessThan(4 * 1024 * 1024);
      expect(full.text).not.toContain('SCHMIDT');
      expect(full.body.document.cut).toMatchObject({ totalCharacters: expect.any(Number) });
    } finally {
      await db.query(`DELETE FROM outbox WHERE id = $1`, [id]);
    }
  });

  it('the order page shows the newest outbound documents and links to the older ones', async () => {
    const page = await get(`/audit/orders/${orderId}`);
    process.stdout.write(`order page: ${page.bytes} bytes, ${page.ms} ms\n`);
    expect(page.status).toBe(200);
    expect(page.bytes).toBeLessThan(3 * 1024 * 1024);
    const older = /href="(\/audit\/orders\/[^"]+\/outbound\?cursor=[^"]+)"/.exec(page.text);
    expect(older).toBeTruthy();
    const next = await get(older![1]!.replace(/&amp;/g, '&'));
    expect(next.status).toBe(200);
    expect(next.bytes).toBeLessThan(3 * 1024 * 1024);
  });
});
