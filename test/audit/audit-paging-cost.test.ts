import { Client } from 'pg';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { hl7Fixture } from '../helpers/hl7-fixtures';
import { SEEDED, sendFixtures } from './audit-seed';

jest.setTimeout(180_000);

/**
 * What one page of the audit log costs the database when the analyst pages back in time, on a
 * running adapter with a history behind it: rows of `audit_events` read (heap tuples fetched
 * through an index and read by sequential scans, from pg_stat_user_tables), not wall time,
 * which the shared machine makes noisy.
 */
describe('audit paging cost (real adapter, real PostgreSQL, two months of events and messages)', () => {
  let adapter: TestAdapter;
  let db: Client;
  const EVENTS = 120_000;
  const MESSAGES = 60_000;
  const DAYS = 60;

  beforeAll(async () => {
    adapter = await startTestAdapter();
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
    await sendFixtures(adapter); // real orders over MLLP: the order and message lists
    // Two months of upstream calls, appended in time order as the imaging client writes them
    // (ids grow with time), then analysed as autovacuum would.
    await db.query(
      `INSERT INTO audit_events (occurred_at, kind, severity, actor, summary, detail)
       SELECT now() - interval '${DAYS} days' + g * (interval '${DAYS} days' / $1::int),
              'upstream.call', 'info', 'poller', 'GET /v1/orders/{id}: 200',
              jsonb_build_object('endpoint', 'GET /v1/orders/{id}', 'status', 200, 'latencyMs', 40)
         FROM generate_series(1, $1::int) g ORDER BY g`,
      [EVENTS],
    );
    await db.query(`VACUUM ANALYZE audit_events`);
    // and the messages those two months brought, all accepted (the IHE SWF order's bytes)
    await db.query(
      `INSERT INTO inbound_messages (received_at, transport, sender, message_type, message_control_id,
                                     idempotency_key, content_type, raw, outcome, response_code)
       SELECT now() - interval '${DAYS} days' + g * (interval '${DAYS} days' / $1::int),
              'mllp', 'RADIS1^IHEDEMO', 'ORM^O01', 'SEED-' || g, 'RADIS1^IHEDEMO|SEED-' || g,
              'application/hl7-v2', $2::bytea, 'accepted', 'AA'
         FROM generate_series(1, $1::int) g ORDER BY g`,
      [MESSAGES, hl7Fixture('orm-o01-v231-ihe-swf-zds')],
    );
    await db.query(`VACUUM ANALYZE inbound_messages`);
  });

  afterAll(async () => {
    await db?.end();
    await adapter?.close();
  });

  const get = async (path: string) => {
    const res = await fetch(`${adapter.httpUrl}${path}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
    });
    expect(res.status).toBe(200);
    return (await res.json()) as { items: Array<{ id: string }>; nextCursor?: string };
  };

  /**
   * Rows of `table` the work read. A backend flushes its counters when it goes idle at
   * most once a second, else after 10 s idle (PostgreSQL 15+): wait that out on both sides.
   */
  const rowsRead = async (work: () => Promise<unknown>, table = 'audit_events') => {
    const counted = async () => {
      await new Promise((r) => setTimeout(r, 11_000));
      const { rows } = await db.query<{ n: string }>(
        `SELECT (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::text AS n
           FROM pg_stat_user_tables WHERE relname = $1`,
        [table],
      );
      return Number(rows[0]!.n);
    };
    const before = await counted();
    await work();
    return (await counted()) - before;
  };

  it("an older page of events a month back reads that page's rows, not every event above it", async () => {
    // 35 days back: fewer events older than `to` than after it, so the first page is read
    // through the time index; the second walked it too, the whole range below its boundary
    // (51,239 rows; 30 days back sits on the estimates' tie and failed in one final CI only).
    const to = new Date(Date.now() - 35 * 86_400_000).toISOString();
    const first = await get(`/api/audit/events?to=${to}&limit=20`);
    expect(first.items).toHaveLength(20);
    const cursor = first.nextCursor!;
    let second: Awaited<ReturnType<typeof get>> | undefined;
    const read = await rowsRead(async () => {
      second = await get(`/api/audit/events?to=${to}&limit=20&cursor=${cursor}`);
    });
    // the next 20, older than the first page's last
    expect(second!.items).toHaveLength(20);
    expect(BigInt(second!.items[0]!.id)).toBeLessThan(BigInt(first.items[19]!.id));
    // Before: the late-commit check (rows that committed after page 1 was read) walked the id
    // index down from the newest event to the boundary, 60,000 events; now it reads the events
    // not older than the page's horizon through the occurred_at index (a few BRIN ranges).
    expect(read).toBeLessThan(10_000);
  });

  it('events of one day a month back are read through the time index: that day, not every event after it', async () => {
    const day = new Date(Date.now() - 30 * 86_400_000).toISOString().slice(0, 10);
    const next = new Date(Date.parse(day) + 86_400_000).toISOString().slice(0, 10);
    let page: Awaited<ReturnType<typeof get>> | undefined;
    const read = await rowsRead(async () => {
      page = await get(`/api/audit/events?from=${day}&to=${next}&limit=20`);
    });
    // that day's newest 20, newest first
    expect(page!.items).toHaveLength(20);
    const { rows } = await db.query<{ id: string }>(
      `SELECT id::text FROM audit_events WHERE occurred_at >= $1 AND occurred_at < $2
        ORDER BY id DESC LIMIT 20`,
      [day, next],
    );
    expect(page!.items.map((e) => e.id)).toEqual(rows.map((r) => r.id));
    // Before: the id index walked down from the newest event, 58,000 events after the day
    // (0.35 s for a day two months back at 3,000,000); now that day's 2,000 through the BRIN.
    expect(read).toBeLessThan(10_000);
  });

  it("the message browser's refused messages are read through their own index, not through every message", async () => {
    let page: { items: Array<{ id: string; messageControlId: string; outcome: string }> };
    const read = await rowsRead(async () => {
      page = (await get(`/api/audit/messages?outcome=refused`)) as unknown as typeof page;
    }, 'inbound_messages');
    // the refused fixture (no PID-3) is there, and only refused messages
    expect(page!.items.map((m) => m.messageControlId)).toContain(SEEDED.rejectedMsh10);
    expect(page!.items.every((m) => m.outcome === 'rejected' || m.outcome === 'error')).toBe(true);
    const { rows } = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM inbound_messages WHERE outcome IN ('rejected', 'error')`,
    );
    expect(page!.items).toHaveLength(rows[0]!.n);
    // Before: inbound_messages_received_at_idx walked through all 60,000 accepted messages to
    // keep the few refused; now inbound_messages_refused_idx holds only those.
    expect(read).toBeLessThan(1_000);
  });

  it('a cursor this list did not hand out is refused before it is read: edited, forged, or taken from another list', async () => {
    const first = await get(`/api/audit/events?limit=5`);
    const handedOut = first.nextCursor!;
    // what a page's cursor says: boundary, horizon, snapshot (docs/audit.md, late commits)
    const [text, mac] = handedOut.split('.') as [string, string];
    const [, , , snapshot] = Buffer.from(text, 'base64url').toString('utf8').split('/');
    expect(snapshot).toMatch(/^\d+:\d+:/);
    // the epoch as boundary and horizon: every event "above" the page and not older than it
    const forged = Buffer.from(`0/1/0/${snapshot}`).toString('base64url');
    const refused = { status: 400, detail: 'cursor is not valid' };
    const answer = async (path: string) => {
      const res = await fetch(`${adapter.httpUrl}${path}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
      });
      const body = (await res.json()) as { detail?: string };
      return { status: res.status, detail: body.detail };
    };
    const read = await rowsRead(async () => {
      // before: 200, after reading all 120,000 events (0.8 s at 3,000,000)
      expect(await answer(`/api/audit/events?cursor=${forged}`)).toEqual(refused);
      // the same with the cursor's own signature, or with its text edited under it
      expect(await answer(`/api/audit/events?cursor=${forged}.${mac}`)).toEqual(refused);
    });
    expect(read).toBeLessThan(1_000);
    // the list's own cursor still pages on
    expect((await get(`/api/audit/events?limit=5&cursor=${handedOut}`)).items).toHaveLength(5);

    // one list's cursor is not another's, even where both page by UUIDs (orders, messages)
    const orders = await get(`/api/audit/orders?limit=1`);
    expect(orders.nextCursor).toBeDefined();
    expect(await answer(`/api/audit/messages?cursor=${orders.nextCursor}`)).toEqual(refused);
    expect((await get(`/api/audit/orders?limit=1&cursor=${orders.nextCursor}`)).items).toHaveLength(
      1,
    );
  });
});
