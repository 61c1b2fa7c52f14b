import { ORDER_STATES } from '../../src/domain/order-state';
import { Client } from 'pg';
import { AuditRetentionService } from '../../src/audit/audit-retention.service';
import { JOB_QUEUE } from '../../src/jobs/jobs.tokens';
import { OutboxRepository } from '../../src/persistence/outbox.repository';
import type { JobQueue } from '../../src/jobs/job-queue';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { addDeadLetter, orderIdByAccession, SEEDED, sendFixtures } from './audit-seed';

type Role = keyof typeof TEST_TOKENS;
/** Response bodies are asserted field by field; their types are the OpenAPI document's. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

describe('audit API (real adapter, real MLLP ingest, real PostgreSQL)', () => {
  let adapter: TestAdapter;
  let db: Client;
  let swfOrderId: string;
  let deadLetterId: string;

  const get = async (path: string, role: Role | null = 'analyst') => {
    const res = await fetch(`${adapter.httpUrl}${path}`, {
      headers: role ? { authorization: `Bearer ${TEST_TOKENS[role]}` } : {},
    });
    const text = await res.text();
    return { status: res.status, text, body: text ? (JSON.parse(text) as Json) : undefined };
  };
  const post = async (path: string, body: unknown, role: Role = 'admin') => {
    const res = await fetch(`${adapter.httpUrl}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS[role]}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, text, body: text ? (JSON.parse(text) as Json) : undefined };
  };

  beforeAll(async () => {
    // the lifecycle workers would move the seeded orders on (and call the upstream) while
    // the searches look at them: this suite reads a still picture; the retention test starts
    // the job queue itself
    // A RIS configured (nothing listens on port 9): its dead letters can be replayed.
    adapter = await startTestAdapter({
      JOBS_ENABLED: 'false',
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: '9',
    });
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
    await sendFixtures(adapter);
    swfOrderId = await orderIdByAccession(db, SEEDED.swf.accession);
    deadLetterId = await addDeadLetter(db, swfOrderId);
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
  });

  describe('search', () => {
    it.each([
      ['accession', SEEDED.swf.accession],
      ['patientId', SEEDED.swf.patientId],
      // PID-3's second repetition (998877665^^^SSA^SS): any identifier of the patient the order
      // was placed with finds it, not only the record number our indexes key it by (before: an
      // empty list for every repetition but that one)
      ['patientId', '998877665'],
      ['placer', SEEDED.swf.placer],
      ['msh10', SEEDED.swf.msh10],
      ['msh10', SEEDED.swf.changeMsh10], // a later message (XO) that touched the same order
      ['studyInstanceUid', SEEDED.swf.studyUid],
      ['orderId', '__order__'],
      // our order id is the id of the ServiceRequest and the Task we serve: the EHR shows it
      // as a reference or a URL, which the analyst copies (before: an empty list)
      ['orderId', 'ServiceRequest/__order__'],
      ['orderId', 'Task/__order__'],
      ['orderId', 'https://adapter.example/fhir/ServiceRequest/__order__/_history/3'],
    ])('finds the IHE SWF order by %s %s', async (name, value) => {
      const v = value.replace('__order__', swfOrderId);
      const { status, body } = await get(`/api/audit/orders?${name}=${encodeURIComponent(v)}`);
      expect(status).toBe(200);
      expect(body.items.map((o: { id: string }) => o.id)).toEqual([swfOrderId]);
      expect(body.nextCursor).toBeUndefined();
    });

    it('combines filters (AND) and finds nothing for unknown keys', async () => {
      const both = await get(
        `/api/audit/orders?accession=${SEEDED.swf.accession}&source=hl7v2&state=received`,
      );
      expect(both.body.items).toHaveLength(1);
      const none = await get(`/api/audit/orders?accession=${SEEDED.swf.accession}&state=failed`);
      expect(none.body.items).toEqual([]);
      expect((await get('/api/audit/orders?accession=NOPE-1')).body.items).toEqual([]);
      expect((await get('/api/audit/orders?orderId=not-a-uuid')).body.items).toEqual([]);
    });

    it('filters by time range, sender, destination and errors only', async () => {
      const all = (await get('/api/audit/orders?limit=200')).body.items as Array<{
        id: string;
        createdAt: string;
      }>;
      const { rows } = await db.query(`SELECT count(*)::int AS n FROM orders`);
      expect(all.length).toBe(rows[0].n);
      expect(all.length).toBeGreaterThanOrEqual(5);
      const future = new Date(Date.now() + 3600_000).toISOString();
      expect((await get(`/api/audit/orders?from=${future}`)).body.items).toEqual([]);
      const past = new Date(Date.now() - 3600_000).toISOString();
      expect((await get(`/api/audit/orders?from=${past}&to=${future}`)).body.items).toHaveLength(
        all.length,
      );
      expect(
        (await get(`/api/audit/orders?sender=${encodeURIComponent('RADIS1^IHEDEMO')}`)).body.items,
      ).toHaveLength(1);
      expect(
        (await get('/api/audit/orders?destination=ris-hl7')).body.items.map(
          (o: { id: string }) => o.id,
        ),
      ).toEqual([swfOrderId]);
      expect(
        (await get('/api/audit/orders?errorsOnly=true')).body.items.map(
          (o: { id: string }) => o.id,
        ),
      ).toEqual([swfOrderId]);
    });

    it('lists inbound messages by MSH-10, rejected ones included', async () => {
      const { body } = await get(`/api/audit/messages?msh10=${SEEDED.rejectedMsh10}`);
      expect(body.items).toHaveLength(1);
      expect(body.items[0]).toMatchObject({ outcome: 'rejected', responseCode: 'AE' });
      // a rejected message has no order
      expect((await get(`/api/audit/orders?msh10=${SEEDED.rejectedMsh10}`)).body.items).toEqual([]);
    });

    it('browses every inbound message by outcome, transport and text of our answer', async () => {
      const all = (await get('/api/audit/messages')).body.items as Array<{ outcome: string }>;
      expect(all.length).toBe(SEEDED.fixtures.length);
      const refused = await get('/api/audit/messages?outcome=refused&transport=mllp');
      expect(refused.body.items).toEqual([
        expect.objectContaining({
          messageControlId: SEEDED.rejectedMsh10,
          outcome: 'rejected',
          answerText: expect.stringMatching(/PID-3/),
        }),
      ]);
      expect((await get('/api/audit/messages?text=PID-3')).body.items).toHaveLength(1);
      expect((await get('/api/audit/messages?transport=carrier-pigeon')).status).toBe(400);
    });

    it('serves the dashboard figures', async () => {
      const { status, body } = await get('/api/audit/dashboard');
      expect(status).toBe(200);
      expect(body.messagesIn).toMatchObject({
        hour: SEEDED.fixtures.length,
        refusedHour: 1,
      });
      const day = (body.ordersByState as Array<{ day: number }>).reduce((n, c) => n + c.day, 0);
      const { rows } = await db.query(`SELECT count(*)::int AS n FROM orders`);
      expect(day).toBe(rows[0].n);
      expect(body.deadLetters.total).toBe(1);
    });

    it('searches events: errors only and by destination', async () => {
      const errors = await get('/api/audit/events?errorsOnly=true');
      // newest first: the dead letter, then the rejection of the message without PID-3
      expect(errors.body.items.map((e: { kind: string }) => e.kind)).toEqual([
        'outbound.dead-letter',
        'inbound.rejected',
      ]);
      const dest = await get('/api/audit/events?destination=ris-hl7');
      expect(dest.body.items.map((e: { kind: string }) => e.kind)).toEqual([
        'outbound.dead-letter',
        'outbound.attempt',
      ]);
    });

    it('answers a malformed filter with 400 problem JSON', async () => {
      const res = await get('/api/audit/orders?state=bogus');
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ status: 400, title: 'bad_request' });
      expect(res.body.detail).toMatch(/state/);
      expect((await get('/api/audit/orders?cursor=%%%')).status).toBe(400);
      expect((await get('/api/audit/orders?from=yesterday')).status).toBe(400);
    });

    it.each([
      ['/api/audit/orders?state=bogus', `state must be one of: ${ORDER_STATES.join(', ')}`],
      [
        `/api/audit/orders?accession=${'A'.repeat(4097)}`,
        'accession is longer than 4096 characters',
      ],
      ['/api/audit/orders?limit=0', 'limit must be at least 1'],
      ['/api/audit/orders?limit=1.5', 'limit must be a whole number'],
      ['/api/audit/orders?limit=ten', 'limit must be a number'],
      ['/api/audit/orders?source=fax', 'source must be one of: hl7v2, fhir, api'],
      ['/api/audit/events?errorsOnly=maybe', 'errorsOnly must be one of: 0, 1, true, false, on'],
      [
        '/api/audit/messages?transport=carrier-pigeon',
        'transport must be one of: mllp, fhir-rest, fhir-subscription',
      ],
      ['/api/audit/messages?text=a', 'text is shorter than 2 characters'],
      ['/api/audit/messages?sender=%20%20', 'sender must not be empty'],
      [
        '/api/audit/orders?from=2026-11-25T10:00:00.0005Z',
        'from: must not be finer than a millisecond (at most 3 digits after the second)',
      ],
    ])('a refused parameter is named with what is allowed (case %#)', async (path, detail) => {
      // Before: zod's own words (`state: Invalid option: expected one of "received"|...`,
      // `accession: Too big: expected string to have <=4096 characters`, `Invalid input`).
      const res = await get(path);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ status: 400, title: 'bad_request' });
      expect(res.body.detail).toContain(detail);
      expect(res.body.detail).not.toMatch(/Invalid|Too big|Too small|expected/);
    });
    // A page size is written in digits: before, JavaScript's number reading took `0x10` as
    // 16, `1e2` as 100, `0b11` as 3 and `+5` as 5 (a different page than asked for, answered
    // 200), read a blank as 0 ("must be at least 1") and answered a 20-digit one twice.
    it.each([
      ['/api/audit/orders?limit=0x10', 'limit must be a number'],
      ['/api/audit/events?limit=1e2', 'limit must be a number'],
      ['/api/audit/messages?limit=0b11', 'limit must be a number'],
      ['/api/audit/dead-letters?limit=%2B5', 'limit must be a number'],
      ['/api/audit/orders?limit=%20', 'limit must be a number'],
      ['/api/audit/events?limit=99999999999999999999', 'limit must be at most 200'],
    ])('refuses a page size not written as a whole number in digits: %s', async (path, detail) => {
      const res = await get(path);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ status: 400, title: 'bad_request' });
      expect(res.body.detail).toBe(detail);
    });
  });

  // The dead-letter page read `cursor` and `replayed` by name and dropped everything else:
  // `limit=1&limit=2`, `cursor[]=x` or a typo answered the first page as if it had matched,
  // and a repeated cursor was a 400 error page saying the cursor was not valid.
  it.each([
    ['x=1', 'unknown filter x (the filters are cursor, limit, replayed)'],
    ['cursor[]=abc', 'unknown filter cursor[]'],
    ['limit=1&limit=2', 'limit: give one value (it came 2 times)'],
    ['cursor=a&cursor=b', 'cursor: give one value (it came 2 times)'],
    ['limit=0x10', 'limit must be a number'],
    ['cursor=%00', 'cursor is not valid'],
  ])('the dead-letter page refuses ?%s in words above the list', async (query, detail) => {
    const res = await fetch(`${adapter.httpUrl}/audit/dead-letters?${query}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}`, accept: 'text/html' },
    });
    const html = await res.text();
    expect(res.status).toBe(200);
    expect(html).toContain(`<div class="notice err" role="alert">${detail}`);
    expect(html).toContain('<h1>Dead letters</h1>');
  });

  it('the dead-letter page takes a page size and keeps it on its Older link', async () => {
    const extra = await addDeadLetter(db, swfOrderId);
    try {
      const res = await fetch(`${adapter.httpUrl}/audit/dead-letters?limit=1`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}`, accept: 'text/html' },
      });
      const html = await res.text();
      expect(res.status).toBe(200);
      expect(html).not.toContain('role="alert"');
      expect(html.match(/Replay…|<tr>\s*<td>/g)?.length).toBe(1);
      expect(html).toMatch(/href="\/audit\/dead-letters\?limit=1&amp;cursor=[^"]+">Older/);
    } finally {
      await db.query(`DELETE FROM audit_events WHERE detail->>'outboxId' = $1`, [extra]);
      await db.query(`DELETE FROM outbox WHERE id = $1::bigint`, [extra]);
    }
  });

  describe('paging', () => {
    it('walks every order exactly once, newest first, by cursor', async () => {
      const all = (await get('/api/audit/orders?limit=200')).body.items.map(
        (o: { id: string }) => o.id,
      );
      const seen: string[] = [];
      const created: string[] = [];
      let cursor: string | undefined;
      let pages = 0;
      do {
        const { body } = await get(
          `/api/audit/orders?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
        );
        expect(body.items.length).toBeLessThanOrEqual(2);
        for (const o of body.items) {
          seen.push(o.id);
          created.push(o.createdAt);
        }
        cursor = body.nextCursor;
        pages += 1;
      } while (cursor && pages < 10);
      expect(seen).toEqual(all);
      expect(new Set(seen).size).toBe(seen.length);
      expect(pages).toBe(Math.ceil(all.length / 2));
      expect([...created].sort().reverse()).toEqual(created);
    });

    // created_at / received_at / occurred_at (and a dead letter's updated_at) are the writing
    // transaction's start (now()): a row whose transaction is slow sorts above rows that
    // committed before it (events: its id was taken before theirs). Two connections: `slow`
    // holds its row uncommitted while the analyst reads page 1 and the others commit.
    type LateCase = {
      list: string;
      key: string;
      /** The list's path with a filter that holds only this case's rows, if it has one. */
      path: () => string;
      /** The audit page's list, if there is one that takes `limit`. */
      page?: string;
      add: (c: Client, value: string) => Promise<unknown>;
      touch: string;
      cleanup: string;
    };
    const pending = async (value: string) =>
      (
        await db.query<{ id: string }>(
          `INSERT INTO outbox (order_id, destination, kind, dedupe_key, payload)
           VALUES ($1, 'late-test', 'hl7.oru', $2, '{}'::jsonb) RETURNING id::text`,
          [swfOrderId, `late:${value}:${Date.now()}`],
        )
      ).rows[0]!.id;
    // the outbox worker's own markDead, on the given connection (its transaction)
    const markDead = (c: Client, id: string, value: string) =>
      new OutboxRepository({
        query: async <T>(sql: string, params?: unknown[]) => (await c.query(sql, params)).rows as T,
      }).markDead(id, 0, value);
    const lateCases: LateCase[] = [
      {
        list: 'orders',
        key: 'accessionNumber',
        path: () => `/api/audit/orders?sender=${encodeURIComponent('LATE|orders')}`,
        page: `/audit/orders?sender=${encodeURIComponent('LATE|orders')}`,
        add: (c, value) =>
          c.query(
            `INSERT INTO orders (source, sender, state, accession_number, request)
              VALUES ('api', 'LATE|orders', 'received', $1, '{}'::jsonb)`,
            [value],
          ),
        touch: `UPDATE orders SET state = 'processing' WHERE accession_number = $1`,
        cleanup: `DELETE FROM orders WHERE sender = 'LATE|orders'`,
      },
      {
        list: 'messages',
        key: 'messageControlId',
        path: () => `/api/audit/messages?sender=${encodeURIComponent('LATE|messages')}`,
        page: `/audit/messages?sender=${encodeURIComponent('LATE|messages')}`,
        add: (c, value) =>
          c.query(
            `INSERT INTO inbound_messages (transport, sender, message_type, message_control_id, raw, outcome)
             VALUES ('mllp', 'LATE|messages', 'ORM^O01', $1, '\\x4d5348'::bytea, 'accepted')`,
            [value],
          ),
        touch: `UPDATE inbound_messages SET outcome = 'error' WHERE message_control_id = $1`,
        cleanup: `DELETE FROM inbound_messages WHERE sender = 'LATE|messages'`,
      },
      {
        list: 'events',
        key: 'summary',
        path: () => `/api/audit/events?destination=late-events`,
        add: (c, value) =>
          c.query(
            `INSERT INTO audit_events (order_id, kind, severity, actor, summary, detail)
             VALUES ($1, 'outbound.attempt', 'info', 'test', $2, '{"destination":"late-events"}'::jsonb)`,
            [swfOrderId, value],
          ),
        touch: `UPDATE audit_events SET severity = 'warning' WHERE summary = $1`,
        cleanup: `DELETE FROM audit_events WHERE detail->>'destination' = 'late-events'`,
      },
      {
        // no filter: the seeded dead letter is older than these, and further down the list
        list: 'dead-letters',
        key: 'lastError',
        path: () => `/api/audit/dead-letters?`,
        add: async (c, value) => markDead(c, await pending(value), value),
        touch: `UPDATE outbox SET attempts = attempts + 1 WHERE last_error = $1`,
        cleanup: `DELETE FROM outbox WHERE destination = 'late-test'`,
      },
    ];
    it.each(lateCases)(
      'shows on a later page a row of $list that committed after the page above it was read',
      async ({ key, path: listPath, add, touch, cleanup }) => {
        const pause = () => new Promise((r) => setTimeout(r, 5));
        const ours = (values: string[]) => values.filter((v) => v?.startsWith('LATE-'));
        await add(db, 'LATE-C1');
        await pause();
        await add(db, 'LATE-C2');
        await pause();
        const slow = new Client({ connectionString: adapter.db.url });
        await slow.connect();
        try {
          await slow.query('BEGIN');
          await add(slow, 'LATE-SLOW');
          await pause();
          await add(db, 'LATE-C3');
          const path = `${listPath()}&limit=2`;
          const page1 = (await get(path)).body;
          expect(page1.items.map((o: Json) => o[key])).toEqual(['LATE-C3', 'LATE-C2']);
          await slow.query('COMMIT');
          // a row the analyst already saw changes meanwhile: it must not come back
          await db.query(touch, ['LATE-C3']);
          const seen: string[] = page1.items.map((o: Json) => o[key]);
          const late: number[] = [];
          let cursor: string | undefined = page1.nextCursor;
          for (let pages = 0; cursor && pages < 5; pages += 1) {
            const body = (await get(`${path}&cursor=${encodeURIComponent(cursor)}`)).body;
            seen.push(...body.items.map((o: Json) => o[key]));
            late.push(body.lateCommits ?? 0);
            cursor = body.nextCursor;
          }
          // before: ['LATE-C3', 'LATE-C2', 'LATE-C1'], the slow row found by no page
          expect(ours(seen)).toEqual(['LATE-C3', 'LATE-C2', 'LATE-SLOW', 'LATE-C1']);
          expect(late[0]).toBe(1);
          expect(late.slice(1).every((n) => n === 0)).toBe(true);
        } finally {
          await slow.end();
          await db.query(cleanup);
        }
      },
    );

    // A slow transaction can commit any number of rows: a bulk import, a sender's backlog.
    it.each(lateCases)(
      'caps the late commits of $list at the page size and says there are more and where',
      async ({ key, path: listPath, page, add, cleanup }) => {
        const pause = () => new Promise((r) => setTimeout(r, 5));
        const ours = (values: string[]) => values.filter((v) => v?.startsWith('LATE-'));
        await add(db, 'LATE-C1');
        await pause();
        await add(db, 'LATE-C2');
        await pause();
        const slow = new Client({ connectionString: adapter.db.url });
        await slow.connect();
        try {
          await slow.query('BEGIN');
          for (let i = 1; i <= 5; i += 1) await add(slow, `LATE-SLOW${i}`);
          await pause();
          await add(db, 'LATE-C3');
          const path = `${listPath()}&limit=2`;
          const page1 = (await get(path)).body;
          expect(page1.items.map((o: Json) => o[key])).toEqual(['LATE-C3', 'LATE-C2']);
          await slow.query('COMMIT');
          const page2 = (await get(`${path}&cursor=${encodeURIComponent(page1.nextCursor)}`)).body;
          // before: all 5 late rows and the page's own (6 items for limit=2, without bound)
          const items = ours(page2.items.map((o: Json) => o[key]));
          expect(items).toHaveLength(3);
          expect(items.slice(0, 2).every((v) => v.startsWith('LATE-SLOW'))).toBe(true);
          expect(items[2]).toBe('LATE-C1');
          expect(page2.lateCommits).toBe(2);
          expect(page2.moreLateCommits).toBe(true);
          if (page) {
            // the page says so in words and links to its first page with the same filters
            const res = await fetch(
              `${adapter.httpUrl}${page}&limit=2&cursor=${encodeURIComponent(page1.nextCursor)}`,
              { headers: { authorization: `Bearer ${TEST_TOKENS.analyst}`, accept: 'text/html' } },
            );
            const html = await res.text();
            expect(res.status).toBe(200);
            expect(html).toContain('committed after the page before was read; the 2 newest');
            expect(html).toContain(
              `<a href="${page.replace(/&/g, '&amp;')}&amp;limit=2">search again from the first page</a>`,
            );
          }
          // the first page, searched again, shows every one of them
          const again = (await get(listPath().replace(/[?&]$/, ''))).body;
          const all = ours(again.items.map((o: Json) => o[key]));
          for (let i = 1; i <= 5; i += 1) expect(all).toContain(`LATE-SLOW${i}`);
        } finally {
          await slow.end();
          await db.query(cleanup);
        }
      },
    );

    it('pages events and dead letters the same way', async () => {
      const first = await get('/api/audit/events?limit=1');
      expect(first.body.items).toHaveLength(1);
      const second = await get(
        `/api/audit/events?limit=1&cursor=${encodeURIComponent(first.body.nextCursor)}`,
      );
      expect(Number(second.body.items[0].id)).toBeLessThan(Number(first.body.items[0].id));
      const dead = await get('/api/audit/dead-letters?limit=1');
      expect(dead.body.items.map((d: { id: string }) => d.id)).toEqual([deadLetterId]);
    });
  });

  describe('order timeline and lineage', () => {
    it('says in words what an order not yet placed waits for: in the API, the list and the order page', async () => {
      const { body } = await get(`/api/audit/orders/${swfOrderId}`);
      expect(body.order.state).toBe('received'); // the job queue is off: a still picture
      // before: "waits for to be placed upstream since …"
      expect(body.waiting.for).toBe('its placement upstream');
      for (const path of ['/audit/orders', `/audit/orders/${swfOrderId}`]) {
        const res = await fetch(`${adapter.httpUrl}${path}`, {
          headers: { authorization: `Bearer ${TEST_TOKENS.analyst}`, accept: 'text/html' },
        });
        const html = await res.text();
        expect(html).toMatch(
          /waits for its placement upstream since <time datetime="[^"]+Z">\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ<\/time>/,
        );
        expect(html).not.toContain('waits for to be');
      }
    });

    it("shows the order's whole path: messages, events, lineage with rules, outbound with answers", async () => {
      const { status, body } = await get(`/api/audit/orders/${swfOrderId}`);
      expect(status).toBe(200);
      const kinds = body.timeline.map((e: { kind: string }) => e.kind);
      expect(kinds).toEqual(
        expect.arrayContaining([
          'inbound.received',
          'order.created',
          'mapping.applied',
          'outbound.attempt',
          'outbound.dead-letter',
        ]),
      );
      expect(kinds.indexOf('inbound.received')).toBeLessThan(kinds.indexOf('mapping.applied'));
      expect(body.messages.map((m: { messageControlId: string }) => m.messageControlId)).toEqual(
        expect.arrayContaining([SEEDED.swf.msh10, SEEDED.swf.changeMsh10]),
      );
      expect(body.lineage).toEqual(
        expect.arrayContaining([
          {
            target: 'accessionNumber',
            source: 'OBR-18',
            value: SEEDED.swf.accession,
            ruleId: 'hl7.order.accession',
          },
        ]),
      );
      expect(body.mappingVersion).toMatch(/^hl7-order-mapping\//);
      expect(body.outbound).toHaveLength(1);
      expect(body.outbound[0]).toMatchObject({ id: deadLetterId, status: 'dead', attempts: 8 });
      expect(body.outbound[0].answers.map((a: { kind: string }) => a.kind)).toEqual([
        'outbound.attempt',
        'outbound.dead-letter',
      ]);
    });

    it('shows the raw message segment by segment with field positions', async () => {
      const order = (await get(`/api/audit/orders/${swfOrderId}`)).body;
      const first = order.messages.find(
        (m: { messageControlId: string }) => m.messageControlId === SEEDED.swf.msh10,
      );
      const { body } = await get(`/api/audit/messages/${first.id}`);
      expect(body.raw.format).toBe('hl7');
      const msh = body.raw.segments[0];
      expect(msh.id).toBe('MSH');
      expect(msh.fields.find((f: { position: string }) => f.position === 'MSH-10')).toEqual({
        position: 'MSH-10',
        name: 'Message Control ID',
        value: SEEDED.swf.msh10,
      });
      const obr = body.raw.segments.find((s: { id: string }) => s.id === 'OBR');
      expect(obr.fields.find((f: { position: string }) => f.position === 'OBR-18').value).toBe(
        SEEDED.swf.accession,
      );
      expect(body.response.format).toBe('hl7'); // the ACK we answered
      expect(body.events.map((e: { kind: string }) => e.kind)).toContain('inbound.received');
    });

    it('answers 404 for an unknown order or message', async () => {
      expect((await get('/api/audit/orders/00000000-0000-4000-8000-000000000000')).status).toBe(
        404,
      );
      expect((await get('/api/audit/messages/not-a-uuid')).status).toBe(404);
    });
  });

  describe('masking by role', () => {
    const PHI = ['SCHMIDT', 'ANNA', 'MARIA', '19560214', '1956-02-14', 'PAT-4711', '998877665'];
    const PHI_ADDRESS = ['Hauptstrasse', '5551234', 'ACCT-77001'];

    it('analysts see names, birth dates and identifiers partly hidden everywhere', async () => {
      const list = await get(`/api/audit/orders?accession=${SEEDED.swf.accession}`);
      expect(list.body.items[0].patientId).toBe('***11');
      const detail = await get(`/api/audit/orders/${swfOrderId}`);
      const messageIds = detail.body.messages.map((m: { id: string }) => m.id);
      const messages = await Promise.all(
        messageIds.map((id: string) => get(`/api/audit/messages/${id}`)),
      );
      for (const text of [list.text, detail.text, ...messages.map((m) => m.text)]) {
        for (const phi of [...PHI, ...PHI_ADDRESS]) expect(text).not.toContain(phi);
      }
      // partly hidden, not removed: initials, year, last two characters
      const name = detail.body.lineage.find((l: { target: string }) =>
        l.target.startsWith('patient.name'),
      );
      expect(name.value).toMatch(/^S\*\*\*/);
      const birth = detail.body.lineage.find(
        (l: { target: string }) => l.target === 'patient.birthDate',
      );
      // the stored value (PID-7 converted), its conversion named but its text hidden
      expect(birth.value).toBe('1956-**-**');
      expect(birth.rule).toBe('HL7 DT: ***');
      expect(detail.body.order.request.patient.birthDate).toBe('1956-**-**');
      const pid = messages[0]!.body.raw.segments.find((s: { id: string }) => s.id === 'PID');
      const pid5 = pid.fields.find((f: { position: string }) => f.position === 'PID-5').value;
      expect(pid5).toBe('S***^A***^M***^^^^L');
      const pid3 = pid.fields.find((f: { position: string }) => f.position === 'PID-3').value;
      expect(pid3).toBe('***11^^^HOSPA^MR~***65^^^SSA^SS');
      // the outbound ORU payload and the order facts keep what is not PHI
      expect(detail.body.outbound[0].payload.hl7).toContain('PID|1||***11^^^HOSPA^MR||S***^');
      expect(detail.text).toContain(SEEDED.swf.accession);
      expect(detail.text).toContain(SEEDED.swf.studyUid);
    });

    it('an analyst may not reveal; senders and anonymous callers see nothing', async () => {
      const reveal = await post(
        `/api/audit/orders/${swfOrderId}/reveal`,
        { reason: 'curious' },
        'analyst',
      );
      expect(reveal.status).toBe(403);
      for (const path of [
        '/api/audit/orders',
        `/api/audit/orders/${swfOrderId}`,
        '/api/audit/events',
        '/api/audit/dead-letters',
        '/api/audit/mappings',
        `/api/audit/messages?msh10=${SEEDED.swf.msh10}`,
      ]) {
        expect((await get(path, 'sender')).status).toBe(403);
        expect((await get(path, null)).status).toBe(401);
      }
    });

    it('an admin reveals with a reason, and the reveal is itself audited', async () => {
      const noReason = await post(`/api/audit/orders/${swfOrderId}/reveal`, {}, 'admin');
      expect(noReason.status).toBe(400);
      // the reason never travels in a URL: a GET asking to reveal is refused, nothing recorded
      const inUrl = await get(`/api/audit/orders/${swfOrderId}?reveal=true&reason=x`, 'admin');
      expect(inUrl.status).toBe(400);
      expect(inUrl.text).toContain(`POST /api/audit/orders/${swfOrderId}/reveal`);
      expect(inUrl.text).not.toContain('SCHMIDT');
      const masked = await get(`/api/audit/orders/${swfOrderId}`, 'admin');
      expect(masked.text).not.toContain('SCHMIDT');
      const before = await countEvents('phi.reveal');
      const reason = 'clinician call: wrong patient on RIS worklist (ticket 4471)';
      const { status, body, text } = await post(
        `/api/audit/orders/${swfOrderId}/reveal`,
        { reason },
        'admin',
      );
      expect(status).toBe(200);
      expect(body.masked).toBe(false);
      expect(body.order.patientId).toBe(SEEDED.swf.patientId);
      expect(text).toContain('SCHMIDT');
      const events = await db.query(
        `SELECT order_id, actor, detail FROM audit_events WHERE kind = 'phi.reveal' ORDER BY id DESC LIMIT 1`,
      );
      expect(await countEvents('phi.reveal')).toBe(before + 1);
      expect(events.rows[0]).toMatchObject({
        order_id: swfOrderId,
        actor: expect.stringMatching(/^admin#[0-9a-f]{8}$/),
        detail: { reason, what: 'order' },
      });
      // the reveal shows up in the order's own timeline (masked view included)
      const after = await get(`/api/audit/orders/${swfOrderId}`);
      expect(after.body.timeline.map((e: { kind: string }) => e.kind)).toContain('phi.reveal');
    });
  });

  describe('dead-letter replay', () => {
    it('is for admins only and needs a reason', async () => {
      expect(
        (
          await post(
            `/api/audit/dead-letters/${deadLetterId}/replay`,
            { reason: 'x y z' },
            'analyst',
          )
        ).status,
      ).toBe(403);
      expect(
        (await post(`/api/audit/dead-letters/${deadLetterId}/replay`, {}, 'admin')).status,
      ).toBe(400);
      expect(
        (await post(`/api/audit/dead-letters/${deadLetterId}/replay`, { reason: ' ' }, 'admin'))
          .status,
      ).toBe(400);
      const row = await db.query(`SELECT status FROM outbox WHERE id = $1`, [deadLetterId]);
      expect(row.rows[0].status).toBe('dead');
    });

    it('puts the document back in the queue and records who and why, once', async () => {
      const reason = 'RIS back after maintenance window';
      const res = await post(`/api/audit/dead-letters/${deadLetterId}/replay`, { reason });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({
        auditEventKind: 'outbound.replay',
        outbox: { id: deadLetterId, status: 'pending', attempts: 0 },
      });
      const { rows } = await db.query(
        `SELECT status, attempts, next_attempt_at <= now() AS due FROM outbox WHERE id = $1`,
        [deadLetterId],
      );
      expect(rows[0]).toEqual({ status: 'pending', attempts: 0, due: true });
      const events = await db.query(
        `SELECT order_id, actor, detail FROM audit_events WHERE kind = 'outbound.replay'`,
      );
      expect(events.rows).toHaveLength(1);
      expect(events.rows[0]).toMatchObject({
        order_id: swfOrderId,
        actor: expect.stringMatching(/^admin#/),
        detail: { outboxId: deadLetterId, reason, previousAttempts: 8, destination: 'ris-hl7' },
      });
      // no longer a dead letter: a second replay is a conflict, and the list is empty
      expect(
        (await post(`/api/audit/dead-letters/${deadLetterId}/replay`, { reason })).status,
      ).toBe(409);
      expect((await get('/api/audit/dead-letters')).body.items).toEqual([]);
      expect((await post('/api/audit/dead-letters/999999/replay', { reason })).status).toBe(404);
    });

    // The PACS's settings were removed after its SR died (no DICOMWEB_URL here): no worker
    // delivers to it, and the replay answered 200 "queued" while the row stayed pending for ever.
    it('is refused for a destination no longer configured, naming its settings', async () => {
      const stale = await addDeadLetter(db, swfOrderId, 'pacs-dicomweb');
      const res = await post(`/api/audit/dead-letters/${stale}/replay`, {
        reason: 'PACS back online',
      });
      expect(res.status).toBe(409);
      expect(res.body.detail).toBe(
        "the outbound document's destination pacs-dicomweb is not configured (DICOMWEB_URL): nothing would deliver it; configure it, then replay",
      );
      const { rows } = await db.query(`SELECT status, attempts FROM outbox WHERE id = $1`, [stale]);
      expect(rows[0]).toEqual({ status: 'dead', attempts: 8 });
      const events = await db.query(
        `SELECT count(*)::int AS n FROM audit_events WHERE kind = 'outbound.replay'`,
      );
      expect(events.rows[0].n).toBe(1); // the replay of the test before, no other
      await db.query(`DELETE FROM audit_events WHERE detail->>'outboxId' = $1`, [stale]);
      await db.query(`DELETE FROM outbox WHERE id = $1::bigint`, [stale]);
    });
  });

  it('serves the active mapping tables', async () => {
    const { body } = await get('/api/audit/mappings');
    const hl7 = body.tables.find((t: { id: string }) => t.id === 'hl7-order-fields');
    expect(hl7.version).toMatch(/^hl7-order-mapping\//);
    expect(hl7.rows).toEqual(
      expect.arrayContaining([
        ['hl7.order.accession', 'accessionNumber', 'IPC-1 → OBR-18', 'accession', 'no'],
      ]),
    );
    expect(body.tables.map((t: { id: string }) => t.id)).toEqual(
      expect.arrayContaining(['products', 'hl7-0119', 'fhir-order-fields', 'order-transitions']),
    );
  });

  it('documents the audit API in OpenAPI', async () => {
    const { body } = await get('/openapi.json');
    expect(Object.keys(body.paths)).toEqual(
      expect.arrayContaining([
        '/api/audit/orders',
        '/api/audit/orders/{id}',
        '/api/audit/events',
        '/api/audit/messages',
        '/api/audit/messages/{id}',
        '/api/audit/dead-letters',
        '/api/audit/dead-letters/{id}/replay',
        '/api/audit/mappings',
        '/api/audit/dashboard',
      ]),
    );
    const params = body.paths['/api/audit/orders'].get.parameters.map(
      (p: { name: string }) => p.name,
    );
    expect(params).toEqual(expect.arrayContaining(['accession', 'patientId', 'msh10', 'cursor']));
    expect(Object.keys(body.paths).some((p) => p.startsWith('/audit'))).toBe(false);
  });

  describe('retention', () => {
    const countOld = async () =>
      Number(
        (
          await db.query(
            `SELECT count(*) AS n FROM audit_events WHERE occurred_at < now() - interval '365 days'`,
          )
        ).rows[0].n,
      );

    it('prunes events older than the retention period in batches, keeping recent ones', async () => {
      // calls that belonged to no order (a token request, a poll of the lists)
      await db.query(
        `INSERT INTO audit_events (occurred_at, order_id, kind, summary)
         SELECT now() - interval '400 days', NULL, 'upstream.call', 'old call ' || g FROM generate_series(1, 7) g`,
      );
      const recent = await countEvents('mapping.applied');
      const result = await new AuditRetentionService(adapter.dataSource, 365, 3).prune();
      expect(result).toMatchObject({ deleted: 7, batches: 3 });
      expect(await countOld()).toBe(0);
      expect(await countEvents('mapping.applied')).toBe(recent);
    });

    it("keeps an open order's events however old (its intake, lineage and MSH-10 path), and prunes them once it has ended", async () => {
      // Two orders of the seed, each the only order of its message, whose events are all past
      // the period: one still open (it waits for its study, a QC decision, …), one that has
      // ended. (A message that made several orders keeps its own events while any is open.)
      const { rows } = await db.query<{ id: string; msh10: string }>(
        `SELECT DISTINCT ON (m.id) o.id, m.message_control_id AS msh10
           FROM orders o JOIN inbound_messages m ON m.id = o.inbound_message_id
          WHERE o.id <> $1 AND o.state = 'received'
            AND NOT EXISTS (SELECT 1 FROM orders x WHERE x.inbound_message_id = m.id AND x.id <> o.id)
          ORDER BY m.id, o.created_at LIMIT 2`,
        [swfOrderId],
      );
      const [open, ended] = rows as [{ id: string; msh10: string }, { id: string; msh10: string }];
      await db.query(`UPDATE orders SET state = 'cancelled' WHERE id = $1`, [ended.id]);
      const eventsOf = `SELECT e.id FROM audit_events e WHERE e.order_id = ANY($1::uuid[])
         OR (e.order_id IS NULL AND e.inbound_message_id IN (SELECT inbound_message_id FROM orders WHERE id = ANY($1::uuid[])))`;
      await db.query(
        `UPDATE audit_events SET occurred_at = occurred_at - interval '400 days' WHERE id IN (${eventsOf})`,
        [[open.id, ended.id]],
      );
      const before = await get(`/api/audit/orders/${open.id}`);
      const kinds = (body: Json) => body.timeline.map((e: { kind: string }) => e.kind);
      expect(kinds(before.body)).toEqual(
        expect.arrayContaining(['inbound.received', 'mapping.applied']),
      );

      await new AuditRetentionService(adapter.dataSource, 365, 2).prune();

      // Before: the open order's timeline began nowhere (no intake, no mapping, no lineage)
      // and its MSH-10 no longer found it.
      const after = await get(`/api/audit/orders/${open.id}`);
      expect(kinds(after.body)).toEqual(kinds(before.body));
      expect(after.body.lineage.length).toBeGreaterThan(0);
      const byMsh10 = await get(`/api/audit/orders?msh10=${encodeURIComponent(open.msh10)}`);
      expect(byMsh10.body.items.map((o: { id: string }) => o.id)).toContain(open.id);
      expect((await db.query(eventsOf, [[ended.id]])).rows).toEqual([]);

      // Once it has ended, the next prune takes them.
      await db.query(`UPDATE orders SET state = 'cancelled' WHERE id = $1`, [open.id]);
      await new AuditRetentionService(adapter.dataSource, 365, 2).prune();
      expect((await db.query(eventsOf, [[open.id]])).rows).toEqual([]);
    });

    it('runs nightly on the job queue (the registered task prunes when fired)', async () => {
      await db.query(
        `INSERT INTO audit_events (occurred_at, kind, summary) VALUES (now() - interval '366 days', 'upstream.call', 'old')`,
      );
      await adapter.app.get<JobQueue>(JOB_QUEUE).start();
      await db.query(`SELECT graphile_worker.add_job('audit.prune', '{}'::json)`);
      const deadline = Date.now() + 20_000;
      while ((await countOld()) > 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(await countOld()).toBe(0);
      const cron = await db.query(
        `SELECT count(*)::int AS n FROM graphile_worker._private_known_crontabs WHERE identifier = 'audit.prune'`,
      );
      expect(cron.rows[0].n).toBe(1);
    });
  });

  async function countEvents(kind: string): Promise<number> {
    const { rows } = await db.query(`SELECT count(*)::int AS n FROM audit_events WHERE kind = $1`, [
      kind,
    ]);
    return rows[0].n;
  }
});
