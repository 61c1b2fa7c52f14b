import { createServer, request as httpRequest, type Server } from 'node:http';
import { PassThrough } from 'node:stream';
import type { AddressInfo } from 'node:net';
import { Client as PgClient } from 'pg';
import type { Patient, ServiceRequest } from '@medplum/fhirtypes';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';
import { chestCtRequest, fhirFixture, type Json } from '../helpers/fhir-fixtures';
import { waitFor } from '../e2e/e2e-support';

jest.setTimeout(120_000);

/**
 * Orders arriving by R4 Subscriptions Backport notification, and what the adapter then reads
 * from the EHR with the EHR's credential, attacked on a running adapter. A real FHIR engine
 * holds the EHR's data; in front of it, a small HTTP server plays the EHR's FHIR endpoint as
 * deployed (gateway, proxy, replica): for the paths a test names it answers what the test
 * says, everything else is passed through to the engine.
 */

const EHR_TOKEN = 'ehr-static-token-not-for-elsewhere';

type Answer = { status: number; body: unknown };

interface TamperingEhr {
  baseUrl: string;
  /** Answers by request path (`/fhir/ServiceRequest/x`), replacing the engine's. */
  answers: Map<string, Answer>;
  close(): Promise<void>;
}

async function startTamperingEhr(engine: TestFhirServer): Promise<TamperingEhr> {
  const answers = new Map<string, Answer>();
  const server: Server = createServer((req, res) => {
    req.resume();
    const path = (req.url ?? '/').split('?')[0]!;
    const send = (status: number, body: string) => {
      res.writeHead(status, { 'content-type': 'application/fhir+json' });
      res.end(body);
    };
    const scripted = answers.get(path);
    if (scripted) return send(scripted.status, JSON.stringify(scripted.body));
    // As a production server does, the path is read decoded (`%73pelled` is `spelled`).
    const [rawPath, query] = (req.url ?? '/').split('?');
    const target = `${engine.baseUrl.replace(/\/fhir$/, '')}${decodeURIComponent(rawPath!)}${query ? `?${query}` : ''}`;
    fetch(target, { headers: { accept: 'application/fhir+json' } })
      .then(async (r) => send(r.status, await r.text()))
      .catch((err: unknown) => send(502, JSON.stringify({ error: String(err) })));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/fhir`,
    answers,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** An R4 Backport id-only event notification (STU 1.1 shape) of one Subscription. */
function idOnly(
  subscription: string,
  events: Array<[number, string]>,
  timestamp = '2026-11-25T08:00:00Z',
): Json {
  const last = Math.max(...events.map(([n]) => n));
  return {
    resourceType: 'Bundle',
    type: 'history',
    timestamp: '2026-11-25T08:00:00Z',
    entry: [
      {
        fullUrl: 'urn:uuid:5b1e7a8c-3f4d-4e0b-9a51-0c2d7e6f1a90',
        resource: {
          resourceType: 'Parameters',
          parameter: [
            { name: 'subscription', valueReference: { reference: subscription } },
            { name: 'topic', valueCanonical: 'http://example.org/SubscriptionTopic/imaging' },
            { name: 'status', valueCode: 'active' },
            { name: 'type', valueCode: 'event-notification' },
            { name: 'events-since-subscription-start', valueString: String(last) },
            ...events.map(([n, focus]) => ({
              name: 'notification-event',
              part: [
                { name: 'event-number', valueString: String(n) },
                { name: 'timestamp', valueInstant: timestamp },
                { name: 'focus', valueReference: { reference: focus } },
              ],
            })),
          ],
        },
        request: { method: 'GET', url: `${subscription}/$status` },
        response: { status: '200' },
      },
    ],
  };
}

interface NotificationRig {
  engine: TestFhirServer;
  ehr: TamperingEhr;
  adapter: TestAdapter;
  db: PgClient;
  notify(body: Json): Promise<{ status: number; body: Json }>;
  close(): Promise<void>;
}

/** A FHIR engine holding Patient/dicom, the tampering EHR in front of it, an adapter reading it. */
async function startNotificationRig(
  env: Record<string, string>,
  logs?: Parameters<typeof startTestAdapter>[1],
): Promise<NotificationRig> {
  const engine = await startTestFhirServer();
  await engine.seed(fhirFixture('r4-patient-example-dicom') as unknown as Patient);
  const ehr = await startTamperingEhr(engine);
  const adapter = await startTestAdapter(
    {
      FHIR_SERVER_URL: ehr.baseUrl,
      JOBS_ENABLED: 'false',
      ...env,
    },
    logs,
  );
  const db = new PgClient({ connectionString: adapter.db.url });
  await db.connect();
  return {
    engine,
    ehr,
    adapter,
    db,
    async notify(body) {
      const res = await fetch(`${adapter.httpUrl}/fhir/subscription-notifications`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
        },
        body: JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as Json };
    },
    async close() {
      await db.end();
      await adapter.close();
      await ehr.close();
      await engine.close();
    },
  };
}

describe('hostile: what the EHR answers to the reads a notification causes', () => {
  let engine: TestFhirServer;
  let ehr: TamperingEhr;
  let db: PgClient;
  let rig: NotificationRig | undefined;

  beforeAll(async () => {
    rig = await startNotificationRig({ FHIR_SERVER_TOKEN: EHR_TOKEN });
    ({ engine, ehr, db } = rig);
  });
  afterAll(() => rig?.close());
  const notify = (body: Json) => rig!.notify(body);

  const seedOrder = (id: string, placer: string, changes: Json = {}) =>
    engine.seed({
      ...chestCtRequest(placer, { subject: { reference: 'Patient/dicom' }, ...changes }),
      id,
    } as unknown as ServiceRequest);

  const ordersOf = async (placer: string) =>
    (
      await db.query<{ id: string; patient_id: string; source_url: string | null }>(
        `SELECT o.id, o.patient_id, f.source_url FROM orders o
           LEFT JOIN fhir_resources f ON f.order_id = o.id
          WHERE o.placer_order_number = $1`,
        [placer],
      )
    ).rows;

  const lastMessage = async (subscription: string) =>
    (
      await db.query<{ outcome: string; response_code: string; raw: Buffer }>(
        `SELECT outcome, response_code, raw FROM inbound_messages
          WHERE transport = 'fhir-subscription' AND position(convert_to($1, 'UTF8') IN raw) > 0
          ORDER BY received_at DESC LIMIT 1`,
        [subscription],
      )
    ).rows[0];

  it.each([
    [
      'another ServiceRequest (another id)',
      'wrong-id',
      (id: string) => ({ ...chestCtRequest('SOMEONE-ELSE'), id: `${id}-other` }),
    ],
    ['a Patient', 'wrong-type', () => fhirFixture('r4-patient-example-dicom')],
    [
      'an OperationOutcome with 200 (a gateway whose backend timed out)',
      'oo-200',
      () => ({
        resourceType: 'OperationOutcome',
        issue: [{ severity: 'error', code: 'timeout', diagnostics: 'backend did not answer' }],
      }),
    ],
    [
      'a searchset Bundle holding the request',
      'bundle',
      (id: string) => ({
        resourceType: 'Bundle',
        type: 'searchset',
        total: 1,
        entry: [{ resource: { ...chestCtRequest('BUNDLED'), id } }],
      }),
    ],
  ])(
    'the focus read answered with %s: 503 (kept), no order and the event not spent; the resend makes the order',
    async (_what, name, body) => {
      const id = `focus-${name}`;
      const placer = `FOCUS-${name.toUpperCase()}`;
      await seedOrder(id, placer);
      const subscription = `${ehr.baseUrl}/Subscription/${name}`;
      const note = idOnly(subscription, [[1, `ServiceRequest/${id}`]]);
      ehr.answers.set(`/fhir/ServiceRequest/${id}`, { status: 200, body: body(id) });

      const first = await notify(note);
      expect(first.status).toBe(503);
      expect(first.body.resourceType).toBe('OperationOutcome');
      expect(JSON.stringify(first.body)).toMatch(new RegExp(`ServiceRequest/${id}`));
      expect(await ordersOf(placer)).toEqual([]);
      expect(await ordersOf('SOMEONE-ELSE')).toEqual([]);
      expect(await lastMessage(subscription)).toMatchObject({
        outcome: 'rejected',
        response_code: '503',
      });

      ehr.answers.delete(`/fhir/ServiceRequest/${id}`);
      expect((await notify(note)).status).toBe(200);
      expect(await ordersOf(placer)).toEqual([
        expect.objectContaining({ source_url: `${ehr.baseUrl}/ServiceRequest/${id}` }),
      ]);
    },
  );

  it("the subject read answered with another patient: 503, never an order on the other patient's record", async () => {
    await seedOrder('subject-swap', 'SUBJECT-SWAP');
    const other = {
      ...fhirFixture('r4-patient-example-dicom'),
      id: 'someone-else',
      identifier: [{ system: 'urn:oid:1.2.36.146.595.217.0.1', value: 'OTHER-4711' }],
    };
    ehr.answers.set('/fhir/Patient/dicom', { status: 200, body: other });
    const subscription = `${ehr.baseUrl}/Subscription/subject-swap`;
    const res = await notify(idOnly(subscription, [[1, 'ServiceRequest/subject-swap']]));
    ehr.answers.delete('/fhir/Patient/dicom');
    expect(res.status).toBe(503);
    expect(JSON.stringify(res.body)).toMatch(/Patient\/dicom/);
    expect(await ordersOf('SUBJECT-SWAP')).toEqual([]);
  });

  it('a focus spelled with a query or an encoded character is the same EHR request: one order, under its canonical URL', async () => {
    await seedOrder('spelled', 'SPELLED', { identifier: [] });
    const subscription = `${ehr.baseUrl}/Subscription/spelled`;
    expect(
      (await notify(idOnly(subscription, [[1, 'ServiceRequest/spelled?_format=json']]))).status,
    ).toBe(200);
    expect(
      (await notify(idOnly(subscription, [[2, `${ehr.baseUrl}/ServiceRequest/%73pelled`]]))).status,
    ).toBe(200);
    const rows = (
      await db.query<{ source_url: string }>(
        `SELECT source_url FROM fhir_resources WHERE source_url LIKE $1`,
        [`${ehr.baseUrl}/ServiceRequest/%pelled%`],
      )
    ).rows;
    expect(rows).toEqual([{ source_url: `${ehr.baseUrl}/ServiceRequest/spelled` }]);
  });

  it('an EHR restored from a backup reuses event numbers: one delivery naming a reused number twice orders both, a reused event the EHR cannot serve is resent (503) and then ordered, its resend is one event', async () => {
    const subscription = `${ehr.baseUrl}/Subscription/restored`;
    for (const n of [1, 2]) {
      await seedOrder(`rx-${n}`, `RX-${n}`);
      expect((await notify(idOnly(subscription, [[n, `ServiceRequest/rx-${n}`]]))).status).toBe(
        200,
      );
    }
    // Restored: numbering from 1 again, no handshake, and (hostile) one number given twice.
    await seedOrder('rx-new-a', 'RX-NEW-A');
    await seedOrder('rx-new-b', 'RX-NEW-B');
    const twice = await notify(
      idOnly(
        subscription,
        [
          [1, 'ServiceRequest/rx-new-a'],
          [1, 'ServiceRequest/rx-new-b'],
        ],
        '2026-11-26T09:00:00Z',
      ),
    );
    expect(twice.status).toBe(200);
    expect(await ordersOf('RX-NEW-A')).toHaveLength(1);
    expect(await ordersOf('RX-NEW-B')).toHaveLength(1);

    // Event 2 of the new numbering, its focus unreadable for a moment: refused, not spent.
    await seedOrder('rx-new-c', 'RX-NEW-C');
    const event2 = idOnly(subscription, [[2, 'ServiceRequest/rx-new-c']], '2026-11-26T09:01:00Z');
    ehr.answers.set('/fhir/ServiceRequest/rx-new-c', {
      status: 503,
      body: { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'transient' }] },
    });
    expect((await notify(event2)).status).toBe(503);
    ehr.answers.delete('/fhir/ServiceRequest/rx-new-c');
    expect(await ordersOf('RX-NEW-C')).toEqual([]);
    const resent = await notify(event2);
    expect(resent.status).toBe(200);
    expect(JSON.stringify(resent.body)).not.toContain('already processed');
    expect(await ordersOf('RX-NEW-C')).toHaveLength(1);
    const again = await notify(event2);
    expect(JSON.stringify(again.body)).toContain('already processed');
    expect(await ordersOf('RX-NEW-C')).toHaveLength(1);
    const quirks = (
      await db.query<{ quirks: Array<{ code: string; detail: string }> }>(
        `SELECT m.quirks FROM inbound_messages m JOIN orders o ON o.inbound_message_id = m.id
          WHERE o.placer_order_number = 'RX-NEW-C'`,
      )
    ).rows[0]!.quirks;
    expect(quirks).toEqual(
      expect.arrayContaining([expect.objectContaining({ code: 'subscription-events-restarted' })]),
    );
  });

  it('a reference with a `.` or `..` segment is refused 422 on its element, never read at the URL it resolves to', async () => {
    // `Patient/.` resolves to `<base>/Patient/` (the search), `Patient/..` to the base itself:
    // the EHR was read there with its credential. A gateway answering the bare type path with
    // a Patient made `Patient/.` an order on that patient (201); the base's answer was a 503,
    // resent by the sender for ever, for a reference no resend can mend.
    ehr.answers.set('/fhir/Patient/', {
      status: 200,
      body: fhirFixture('r4-patient-example-dicom') as Json,
    });
    const create = async (placer: string, changes: Json) => {
      const res = await fetch(`${rig!.adapter.httpUrl}/fhir/ServiceRequest`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
        },
        body: JSON.stringify(chestCtRequest(placer, changes)),
      });
      return { status: res.status, body: (await res.json()) as Json };
    };
    const cases: Array<[string, Json, string]> = [
      ['DOT-1', { subject: { reference: 'Patient/.' } }, 'ServiceRequest.subject'],
      ['DOT-2', { subject: { reference: 'Patient/..' } }, 'ServiceRequest.subject'],
      ['DOT-3', { subject: { reference: 'Patient/dicom/../..' } }, 'ServiceRequest.subject'],
      [
        'DOT-4',
        { subject: { reference: `${ehr.baseUrl}/Patient/./dicom` } },
        'ServiceRequest.subject',
      ],
      [
        'DOT-5',
        {
          subject: { reference: 'Patient/dicom' },
          supportingInfo: [{ reference: 'ImagingStudy/.' }],
        },
        'ServiceRequest.supportingInfo[0]',
      ],
    ];
    for (const [placer, changes, expression] of cases) {
      const res = await create(placer, changes);
      expect({ placer, status: res.status }).toEqual({ placer, status: 422 });
      expect(JSON.stringify(res.body)).toContain(expression);
      expect(JSON.stringify(res.body)).toMatch(/`\.` or `\.\.` segment/);
      expect(await ordersOf(placer)).toHaveLength(0);
    }
    // A notification's focus alike: refused before anything is read.
    for (const focus of [
      'ServiceRequest/..',
      'ServiceRequest/.',
      `${ehr.baseUrl}/ServiceRequest/./x`,
    ]) {
      const res = await notify(idOnly(`${ehr.baseUrl}/Subscription/dots`, [[1, focus]]));
      expect({ focus, status: res.status }).toEqual({ focus, status: 422 });
      expect(JSON.stringify(res.body)).toMatch(/`\.` or `\.\.` segment/);
    }
    // The same references without the dots are read as before.
    expect((await create('DOT-6', { subject: { reference: 'Patient/dicom' } })).status).toBe(201);
  });
});

describe('hostile: a notified request the EHR has deleted (410 Gone)', () => {
  let engine: TestFhirServer;
  let ehr: TamperingEhr;
  let adapter: TestAdapter;
  let db: PgClient;
  let rig: NotificationRig | undefined;

  beforeAll(async () => {
    rig = await startNotificationRig({});
    ({ engine, ehr, adapter, db } = rig);
  });
  afterAll(() => rig?.close());
  const notify = (body: Json) => rig!.notify(body);

  /** HAPI FHIR's answer to a read of a deleted resource. */
  const deleted = (id: string) =>
    ehr.answers.set(`/fhir/ServiceRequest/${id}`, {
      status: 410,
      body: {
        resourceType: 'OperationOutcome',
        issue: [
          {
            severity: 'error',
            code: 'processing',
            diagnostics: `Resource was deleted at 2026-11-25T08:01:00.000+00:00`,
          },
        ],
      },
    });

  it('deleted before we read it: answered 200 and recorded (no order, no endless resend); deleted after: the order is cancelled', async () => {
    deleted('gone-1');
    const subscription = `${ehr.baseUrl}/Subscription/deleted`;
    const first = await notify(idOnly(subscription, [[1, 'ServiceRequest/gone-1']]));
    expect(first.status).toBe(200);
    const [msg] = (
      await db.query<{ outcome: string; quirks: Array<{ code: string }> }>(
        `SELECT outcome, quirks FROM inbound_messages WHERE idempotency_key = $1`,
        [`fhir-subscription|${subscription}|events:1`],
      )
    ).rows;
    expect(msg!.outcome).toBe('accepted');
    expect(msg!.quirks.map((q) => q.code)).toContain('notification-focus-deleted');
    expect(
      (await db.query(`SELECT 1 FROM orders WHERE placer_order_number = 'GONE-1'`)).rows,
    ).toEqual([]);

    await engine.seed({
      ...chestCtRequest('GONE-2', { subject: { reference: 'Patient/dicom' } }),
      id: 'gone-2',
    } as unknown as ServiceRequest);
    expect((await notify(idOnly(subscription, [[2, 'ServiceRequest/gone-2']]))).status).toBe(200);
    const [order] = (
      await db.query<{ id: string }>(`SELECT id FROM orders WHERE placer_order_number = 'GONE-2'`)
    ).rows;
    expect(order).toBeDefined();
    deleted('gone-2');
    expect((await notify(idOnly(subscription, [[3, 'ServiceRequest/gone-2']]))).status).toBe(200);
    const [after] = (
      await db.query<{ cancel_requested_at: Date | null }>(
        `SELECT cancel_requested_at FROM orders WHERE id = $1`,
        [order!.id],
      )
    ).rows;
    expect(after!.cancel_requested_at).not.toBeNull();
    const served = (await (
      await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${order!.id}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
      })
    ).json()) as ServiceRequest;
    expect(served.status).toBe('revoked');
  });
});

describe('hostile: a notified request the EHR no longer knows (404), or deletes and makes again', () => {
  let engine: TestFhirServer;
  let ehr: TamperingEhr;
  let adapter: TestAdapter;
  let db: PgClient;
  let rig: NotificationRig | undefined;

  beforeAll(async () => {
    // Jobs run: a cancel is carried out (the order ends `cancelled`) as in production.
    rig = await startNotificationRig({ JOBS_ENABLED: 'true' });
    ({ engine, ehr, adapter, db } = rig);
  });
  afterAll(() => rig?.close());
  const notify = (body: Json) => rig!.notify(body);

  /** What HAPI FHIR answers for an id it has no resource under (never made, or expunged). */
  const unknown = (id: string) =>
    ehr.answers.set(`/fhir/ServiceRequest/${id}`, {
      status: 404,
      body: {
        resourceType: 'OperationOutcome',
        issue: [
          {
            severity: 'error',
            code: 'processing',
            diagnostics: `HAPI-2001: Resource ServiceRequest/${id} is not known`,
          },
        ],
      },
    });

  const seedOrder = (id: string, placer: string, changes: Json = {}) =>
    engine.seed({
      ...chestCtRequest(placer, { subject: { reference: 'Patient/dicom' }, ...changes }),
      id,
    } as unknown as ServiceRequest);

  const ordersOf = async (placer: string) =>
    (
      await db.query<{ id: string; state: string; cancel_requested_at: Date | null }>(
        `SELECT id, state, cancel_requested_at FROM orders WHERE placer_order_number = $1 ORDER BY created_at`,
        [placer],
      )
    ).rows;

  const message = async (key: string) =>
    (
      await db.query<{ outcome: string; response_code: string; quirks: Array<{ code: string }> }>(
        `SELECT outcome, response_code, quirks FROM inbound_messages WHERE idempotency_key = $1`,
        [key],
      )
    ).rows[0];

  /** Waits until the order's cancel has been carried out (the cancel job ran). */
  const cancelled = (placer: string) =>
    waitFor(`the order ${placer} cancelled`, async () => {
      const [first] = await ordersOf(placer);
      return first?.state === 'cancelled' && first;
    });

  const served = async (orderId: string) =>
    (await (
      await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${orderId}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
      })
    ).json()) as ServiceRequest;

  it('a focus the EHR answers 404: a fresh event is resent (a replica behind it), an old one is 200 and kept; an order we hold is never cancelled by a 404', async () => {
    // Before: 503 for this notification and every resend of it, for ever; an EHR that marks a
    // Subscription `error` after repeated failures then stopped notifying any order at all.
    const subscription = `${ehr.baseUrl}/Subscription/purged`;
    unknown('purged-1');
    const first = await notify(idOnly(subscription, [[1, 'ServiceRequest/purged-1']]));
    expect(first.status).toBe(200);
    expect(await message(`fhir-subscription|${subscription}|events:1`)).toMatchObject({
      outcome: 'accepted',
      quirks: expect.arrayContaining([
        expect.objectContaining({ code: 'notification-focus-not-found' }),
      ]),
    });
    expect(await ordersOf('PURGED-1')).toEqual([]);

    // An event of a moment ago whose request the EHR's read side does not have yet: 503, so
    // the EHR resends it; once the request is readable the resend orders it.
    unknown('lagging-1');
    const now = new Date().toISOString();
    const early = await notify(idOnly(subscription, [[2, 'ServiceRequest/lagging-1']], now));
    expect(early.status).toBe(503);
    expect(JSON.stringify(early.body)).toContain('resend');
    ehr.answers.delete('/fhir/ServiceRequest/lagging-1');
    await seedOrder('lagging-1', 'LAGGING-1');
    expect(
      (await notify(idOnly(subscription, [[2, 'ServiceRequest/lagging-1']], now))).status,
    ).toBe(200);
    expect(await ordersOf('LAGGING-1')).toHaveLength(1);

    // A 404 for a request we hold an order for (expunged, a replica or proxy gone wrong, a
    // server hiding it): processed, the order kept, the analyst told. Only the EHR saying so
    // (revoked, entered-in-error, DELETE, 410) withdraws a clinical order.
    await seedOrder('purged-2', 'PURGED-2');
    expect((await notify(idOnly(subscription, [[3, 'ServiceRequest/purged-2']]))).status).toBe(200);
    const [order] = await ordersOf('PURGED-2');
    expect(order?.cancel_requested_at).toBeNull();
    unknown('purged-2');
    const gone = await notify(idOnly(subscription, [[4, 'ServiceRequest/purged-2']], now));
    expect(gone.status).toBe(200);
    expect(await message(`fhir-subscription|${subscription}|events:4`)).toMatchObject({
      quirks: expect.arrayContaining([
        expect.objectContaining({
          code: 'notification-focus-not-found',
          detail: expect.stringContaining('its order is kept'),
        }),
      ]),
    });
    expect((await ordersOf('PURGED-2'))[0]!.cancel_requested_at).toBeNull();
    expect((await served(order!.id)).status).toBe('active');
  });

  it('a request deleted on the EHR (its order cancelled) and then made again under the same id is a new order', async () => {
    // HAPI FHIR lets a client PUT a deleted resource back under its id (update as create); the
    // request is active again and the EHR notifies it. Its first order was cancelled for good.
    const subscription = `${ehr.baseUrl}/Subscription/again`;
    await seedOrder('again-1', 'AGAIN-1');
    expect((await notify(idOnly(subscription, [[1, 'ServiceRequest/again-1']]))).status).toBe(200);
    ehr.answers.set('/fhir/ServiceRequest/again-1', {
      status: 410,
      body: { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'deleted' }] },
    });
    expect((await notify(idOnly(subscription, [[2, 'ServiceRequest/again-1']]))).status).toBe(200);
    await cancelled('AGAIN-1');
    ehr.answers.delete('/fhir/ServiceRequest/again-1');
    await engine.repo.updateResource({
      ...chestCtRequest('AGAIN-1', { subject: { reference: 'Patient/dicom' } }),
      id: 'again-1',
      authoredOn: '2026-11-27T09:00:00+01:00',
    } as unknown as ServiceRequest & { id: string });
    const back = await notify(idOnly(subscription, [[3, 'ServiceRequest/again-1']]));
    expect(back.status).toBe(200);
    const orders = await ordersOf('AGAIN-1');
    expect(orders).toHaveLength(2);
    expect(orders[1]!.cancel_requested_at).toBeNull();
    expect((await served(orders[1]!.id)).status).toBe('active');
    expect((await served(orders[0]!.id)).status).toBe('revoked');
  });

  it('classic rest-hook: a DELETE of ServiceRequest/{id} and a PUT of it again make a new order; the resend of the DELETE cancels nothing new', async () => {
    const send = (method: string, id: string, body?: Json) =>
      fetch(`${adapter.httpUrl}/fhir/subscription-notifications/ServiceRequest/${id}`, {
        method,
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    const sr = (version: string) => ({
      ...chestCtRequest('CLASSIC-AGAIN', { subject: { reference: 'Patient/dicom' } }),
      id: 'classic-again',
      meta: { versionId: version, lastUpdated: `2026-11-27T0${version}:00:00.000Z` },
    });
    expect((await send('PUT', 'classic-again', sr('1'))).status).toBe(200);
    expect((await send('DELETE', 'classic-again')).status).toBe(200);
    await cancelled('CLASSIC-AGAIN');
    expect((await send('PUT', 'classic-again', sr('3'))).status).toBe(200);
    const orders = await ordersOf('CLASSIC-AGAIN');
    expect(orders).toHaveLength(2);
    expect(orders[1]!.cancel_requested_at).toBeNull();
    // Deleted once more: the new order is cancelled too (the first DELETE's answer was not replayed).
    expect((await send('DELETE', 'classic-again')).status).toBe(200);
    expect((await ordersOf('CLASSIC-AGAIN'))[1]!.cancel_requested_at).not.toBeNull();
  });

  it('classic rest-hook: a path id that is no FHIR id, or only dots, is refused 400 on ServiceRequest.id and kept; never a 500, never another URL of the EHR', async () => {
    // `..%2Fx` reached the EHR client as `ServiceRequest/..%2Fx` and its URL check threw
    // (500 "unexpected error"); `%2e` (id `.`) passed it and was filed as the EHR's
    // `ServiceRequest/` collection, the URL the next read of that request would have asked.
    // node:http with the path as written, not fetch: the WHATWG URL parser would resolve `%2e`
    // before it is sent, as an EHR's HTTP client need not.
    const send = (method: string, pathId: string, id: string) =>
      new Promise<{ status: number; text: string }>((resolve, reject) => {
        const body =
          method === 'PUT'
            ? JSON.stringify({
                ...chestCtRequest('CLASSIC-BAD-ID', { subject: { reference: 'Patient/dicom' } }),
                id,
              })
            : undefined;
        const { hostname, port } = new URL(adapter.httpUrl);
        const req = httpRequest(
          {
            hostname,
            port,
            path: `/fhir/subscription-notifications/ServiceRequest/${pathId}`,
            method,
            headers: {
              authorization: `Bearer ${TEST_TOKENS.sender}`,
              'content-type': 'application/fhir+json',
            },
          },
          (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (chunk: string) => (text += chunk));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    for (const [pathId, id] of [
      ['..%2Fx', '../x'],
      ['%2e', '.'],
      ['a%2F..%2F..%2FPatient%2Fdicom', 'a/../../Patient/dicom'],
      ['a%20b', 'a b'],
      ['x'.repeat(65), 'x'.repeat(65)],
    ]) {
      for (const method of ['PUT', 'DELETE']) {
        const res = await send(method, pathId, id);
        const body = JSON.parse(res.text) as {
          resourceType: string;
          issue: Array<{ code: string; diagnostics: string; expression?: string[] }>;
        };
        expect({ method, pathId, status: res.status }).toEqual({ method, pathId, status: 400 });
        expect(body.resourceType).toBe('OperationOutcome');
        expect(body.issue[0]).toMatchObject({ code: 'invalid', expression: ['ServiceRequest.id'] });
        expect(body.issue[0]!.diagnostics).toMatch(/not a FHIR id/);
      }
    }
    // Each refusal is kept with its bytes, as every refusal; no order, no EHR URL filed.
    const refused = await db.query<{ n: string }>(
      `SELECT count(*) AS n FROM inbound_messages
        WHERE message_type LIKE 'notification rest-hook (ServiceRequest%' AND response_code = '400'`,
    );
    expect(Number(refused.rows[0]!.n)).toBe(10);
    expect(await ordersOf('CLASSIC-BAD-ID')).toHaveLength(0);
    const filed = await db.query(`SELECT 1 FROM inbound_messages WHERE idempotency_key LIKE $1`, [
      `%${ehr.baseUrl}/ServiceRequest/|%`,
    ]);
    expect(filed.rows).toHaveLength(0);
  });
});

describe('hostile: a catch-up search that cannot read what a found request names', () => {
  let rig: NotificationRig | undefined;
  let logs = '';
  beforeAll(async () => {
    const sink = new PassThrough();
    sink.on('data', (chunk: Buffer) => (logs += chunk.toString('utf8')));
    rig = await startNotificationRig({}, { sink });
  });
  afterAll(() => rig?.close());

  it("a catch-up that fails reading a found request's subject logs no reference to the patient", async () => {
    const { engine, ehr } = rig!;
    // Notified: a request of the R4 DICOM example patient. Missed (found by the catch-up
    // search the gap causes): one whose subject the EHR cannot serve just then (503).
    await engine.seed({
      ...chestCtRequest('CATCHUP-SEEN', { subject: { reference: 'Patient/dicom' } }),
      id: 'catchup-seen',
    } as unknown as ServiceRequest);
    await engine.seed({
      ...chestCtRequest('CATCHUP-MISSED', { subject: { reference: 'Patient/mint-4711-8815' } }),
      id: 'catchup-missed',
    } as unknown as ServiceRequest);
    ehr.answers.set('/fhir/Patient/mint-4711-8815', {
      status: 503,
      body: { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'transient' }] },
    });
    logs = '';
    const res = await rig!.notify(
      idOnly(`${ehr.baseUrl}/Subscription/catchup-logs`, [[2, 'ServiceRequest/catchup-seen']]),
    );
    expect(res.status).toBe(200);
    expect(JSON.stringify(res.body)).toMatch(/caught up by search/);
    // The catch-up failed (the gap stays open for the next heartbeat) and says so in the log,
    // without the patient's id: before, the error's message, `could not read
    // Patient/mint-4711-8815 …`, was logged as it was.
    expect(logs).toMatch(/catch-up failed/);
    expect(logs).not.toContain('mint-4711-8815');
  });
});
