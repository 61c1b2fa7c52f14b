import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'fhir-kit-client';
import { Client as PgClient } from 'pg';
import type { ServiceRequest } from '@medplum/fhirtypes';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

const FIXTURES = join(__dirname, '..', 'fixtures', 'fhir');
const fixtureText = (name: string) => readFileSync(join(FIXTURES, `${name}.json`), 'utf8');

type Json = Record<string, unknown>;
interface Param {
  name: string;
  valueString?: string;
  valueReference?: { reference: string };
  part?: Param[];
}

describe('R4 Subscriptions Backport notifications (real FHIR engine as the EHR)', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let fhir: Client;
  let db: PgClient;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(JSON.parse(fixtureText('r4-patient-example-dicom')));
    adapter = await startTestAdapter({
      FHIR_SERVER_URL: ehr.baseUrl,
      JOBS_ENABLED: 'false',
      FHIR_SUBSCRIPTION_CREATE: 'true',
      FHIR_SUBSCRIPTION_TOPIC: 'http://example.org/SubscriptionTopic/imaging-orders',
      FHIR_SUBSCRIPTION_ENDPOINT: 'https://adapter.example.org/fhir/subscription-notifications',
      FHIR_SUBSCRIPTION_PAYLOAD: 'id-only',
      FHIR_SUBSCRIPTION_FILTER: 'ServiceRequest?category=363679005',
    });
    fhir = new Client({ baseUrl: `${adapter.httpUrl}/fhir`, bearerToken: TEST_TOKENS.sender });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
  });

  const rows = async (sql: string, params: unknown[] = []) => (await db.query(sql, params)).rows;

  /** A published example with its example.org URLs pointing at our EHR and its own Subscription. */
  function example(name: string, subscription: string): Json {
    return JSON.parse(
      fixtureText(name)
        .replaceAll('https://example.org/fhir', ehr.baseUrl)
        .replaceAll(
          `${ehr.baseUrl}/Subscription/admission`,
          `${ehr.baseUrl}/Subscription/${subscription}`,
        )
        .replaceAll(
          `${ehr.baseUrl}/Subscription/imaging-orders`,
          `${ehr.baseUrl}/Subscription/${subscription}`,
        ),
    ) as Json;
  }

  function statusParams(bundle: Json): Param[] {
    return (bundle.entry as Array<{ resource: { parameter: Param[] } }>)[0]!.resource.parameter;
  }

  /** Sets event number, events-since-subscription-start and focus of a backport example. */
  function withEvent(bundle: Json, event: number, focus?: string, since = event): Json {
    const params = statusParams(bundle);
    params.find((p) => p.name === 'events-since-subscription-start')!.valueString = String(since);
    const ev = params.find((p) => p.name === 'notification-event')!;
    ev.part!.find((p) => p.name === 'event-number')!.valueString = String(event);
    ev.part = ev.part!.filter((p) => p.name !== 'focus');
    if (focus) ev.part.push({ name: 'focus', valueReference: { reference: focus } });
    return bundle;
  }

  async function seedOrder(id: string, placer: string): Promise<ServiceRequest> {
    return ehr.seed<ServiceRequest>({
      resourceType: 'ServiceRequest',
      id,
      identifier: [
        {
          type: {
            coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'PLAC' }],
          },
          system: 'http://example.org/ehr/orders',
          value: placer,
        },
      ],
      status: 'active',
      intent: 'original-order',
      category: [
        { coding: [{ system: 'http://snomed.info/sct', code: '363679005', display: 'Imaging' }] },
      ],
      code: { coding: [{ system: 'http://loinc.org', code: '24627-2' }], text: 'Chest CT' },
      subject: { reference: 'Patient/dicom' },
      occurrenceDateTime: '2013-05-08T09:33:27+07:00',
    });
  }

  const notify = (body: Json) =>
    fhir.request('subscription-notifications', {
      method: 'POST',
      body,
      options: { headers: { 'content-type': 'application/fhir+json' } },
    }) as Promise<Json>;

  const orderFor = async (ehrId: string) =>
    (
      await rows(
        `SELECT o.* FROM orders o JOIN fhir_resources f ON f.order_id = o.id WHERE f.source_url = $1`,
        [`${ehr.baseUrl}/ServiceRequest/${ehrId}`],
      )
    )[0];

  it('creates its Subscription on the EHR at startup (backport profile, conditional on the endpoint)', async () => {
    const subs =
      (
        (await (await fetch(`${ehr.baseUrl}/Subscription`)).json()) as {
          entry?: Array<{ resource: Json }>;
        }
      ).entry ?? [];
    expect(subs).toHaveLength(1);
    expect(subs[0]!.resource).toMatchObject({
      status: 'requested',
      criteria: 'http://example.org/SubscriptionTopic/imaging-orders',
      channel: {
        type: 'rest-hook',
        endpoint: 'https://adapter.example.org/fhir/subscription-notifications',
      },
    });
  });

  it('answers and records the published handshake and heartbeat; a heartbeat ahead of us is caught up by search', async () => {
    const handshake = await notify(example('backport-r4-notification-handshake', 'hb'));
    expect(handshake.resourceType).toBe('OperationOutcome');
    const [sub] = await rows(`SELECT * FROM fhir_subscriptions WHERE subscription_ref = $1`, [
      `${ehr.baseUrl}/Subscription/hb`,
    ]);
    expect(sub).toMatchObject({ status: 'requested', last_event_number: '0' });
    expect(sub.handshake_at).not.toBeNull();
    expect(
      await rows(
        `SELECT 1 FROM inbound_messages WHERE transport = 'fhir-subscription' AND message_type = 'notification handshake'`,
      ),
    ).toHaveLength(1);

    await seedOrder('hb-1', 'HB-1'); // after the handshake: an event we were never told about
    ehr.requests.length = 0;
    await notify(example('backport-r4-notification-heartbeat', 'hb')); // events-since-subscription-start 2
    expect(
      ehr.requests.some((r) => r.method === 'GET' && r.url.startsWith('/fhir/ServiceRequest?')),
    ).toBe(true);
    expect(await orderFor('hb-1')).toMatchObject({
      source: 'fhir',
      patient_id: 'MINT1234',
      placer_order_number: 'HB-1',
    });
    const [after] = await rows(`SELECT * FROM fhir_subscriptions WHERE subscription_ref = $1`, [
      `${ehr.baseUrl}/Subscription/hb`,
    ]);
    expect(after.last_event_number).toBe('2');
    expect(after.last_heartbeat_at).not.toBeNull();
  });

  it('id-only: reads the focus from the EHR with fhir-kit-client; a resend is ignored; a revoked version cancels', async () => {
    await seedOrder('io-1', 'IO-1');
    const note = withEvent(
      example('backport-r4-notification-id-only', 'io'),
      1,
      `${ehr.baseUrl}/ServiceRequest/io-1`,
    );
    ehr.requests.length = 0;
    await notify(note);
    expect(ehr.requests.map((r) => `${r.method} ${r.url}`)).toEqual(
      expect.arrayContaining(['GET /fhir/ServiceRequest/io-1', 'GET /fhir/Patient/dicom']),
    );
    const order = await orderFor('io-1');
    expect(order).toMatchObject({ state: 'received', sender: `fhir-ehr:${ehr.baseUrl}` });
    expect(order.request.products).toEqual(['lung-nodule-ct']);

    await notify(note); // the same event again
    expect(await rows(`SELECT 1 FROM orders WHERE placer_order_number = 'IO-1'`)).toHaveLength(1);
    expect(
      await rows(
        `SELECT 1 FROM inbound_messages WHERE transport = 'fhir-subscription' AND outcome = 'duplicate'`,
      ),
    ).toHaveLength(1);

    const current = (await (
      await fetch(`${ehr.baseUrl}/ServiceRequest/io-1`)
    ).json()) as ServiceRequest;
    await ehr.repo.updateResource({ ...current, status: 'revoked' } as ServiceRequest & {
      id: string;
    });
    await notify(
      withEvent(
        example('backport-r4-notification-id-only', 'io'),
        2,
        `${ehr.baseUrl}/ServiceRequest/io-1`,
      ),
    );
    const [cancelled] = await rows(`SELECT cancel_requested_at FROM orders WHERE id = $1`, [
      order.id,
    ]);
    expect(cancelled.cancel_requested_at).not.toBeNull();
    const served = (await fhir.read({
      resourceType: 'ServiceRequest',
      id: order.id,
    })) as unknown as ServiceRequest;
    expect(served).toMatchObject({
      status: 'revoked',
      meta: { versionId: '2', source: `${ehr.baseUrl}/ServiceRequest/io-1` },
    });
  });

  it('id-only: a focus naming a version the EHR cannot serve is read at its current version', async () => {
    await seedOrder('iov-1', 'IOV-1');
    ehr.requests.length = 0;
    // version 7 does not exist on the EHR (a pruned history, or no vread): 404. Before, the
    // notification was answered 503 for ever.
    expect(
      await notify(
        withEvent(
          example('backport-r4-notification-id-only', 'iov'),
          1,
          `${ehr.baseUrl}/ServiceRequest/iov-1/_history/7`,
        ),
      ),
    ).toMatchObject({ resourceType: 'OperationOutcome' });
    expect(ehr.requests.map((r) => `${r.method} ${r.url}`)).toEqual(
      expect.arrayContaining([
        'GET /fhir/ServiceRequest/iov-1/_history/7',
        'GET /fhir/ServiceRequest/iov-1',
      ]),
    );
    expect(await orderFor('iov-1')).toMatchObject({ placer_order_number: 'IOV-1' });
  });

  it('an order first POSTed to us and then notified by the EHR stays one order', async () => {
    const onEhr = await seedOrder('both-1', 'BOTH-1');
    const posted = (await fhir.create({
      resourceType: 'ServiceRequest',
      body: { ...onEhr, id: undefined, meta: undefined },
    })) as unknown as ServiceRequest;
    await notify(
      withEvent(
        example('backport-r4-notification-id-only', 'both'),
        1,
        `${ehr.baseUrl}/ServiceRequest/both-1`,
      ),
    );
    expect(await rows(`SELECT id FROM orders WHERE placer_order_number = 'BOTH-1'`)).toEqual([
      { id: posted.id },
    ]);
    const [row] = await rows(`SELECT source_url, version_id FROM fhir_resources WHERE id = $1`, [
      posted.id,
    ]);
    expect(row).toEqual({ source_url: `${ehr.baseUrl}/ServiceRequest/both-1`, version_id: 2 });
  });

  it('the published id-only example (an Encounter focus) is answered and recorded, and orders nothing', async () => {
    await notify(example('backport-r4-notification-id-only', 'enc'));
    const [msg] = await rows(
      `SELECT quirks, outcome FROM inbound_messages WHERE transport = 'fhir-subscription' AND idempotency_key LIKE $1`,
      [`%Subscription/enc|events:2`],
    );
    expect(msg.outcome).toBe('accepted');
    expect(msg.quirks).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ code: 'notification-focus-not-servicerequest' }),
      ]),
    );
  });

  it('full-resource: takes the ServiceRequest from the Bundle and tolerates real-world quirks', async () => {
    const bundle = example('backport-r4-notification-full-resource', 'full');
    const sr: ServiceRequest = {
      resourceType: 'ServiceRequest',
      id: 'fr-1',
      meta: { versionId: '1', lastUpdated: '2020-05-29T11:44:13.188Z' },
      identifier: [{ system: 'http://example.org/ehr/orders', value: 'FR-1' }],
      status: 'active',
      intent: 'order',
      code: { coding: [{ system: 'http://loinc.org', code: '24627-2' }] },
      subject: { reference: 'Patient/dicom' },
    };
    const focus = `${ehr.baseUrl}/ServiceRequest/fr-1`;
    const params = statusParams(bundle);
    const ev = params.find((p) => p.name === 'notification-event')!;
    // quirk: a valueString where the Reference belongs
    ev.part = [
      ...ev.part!.filter((p) => p.name !== 'focus'),
      { name: 'focus', valueString: focus },
    ];
    ev.part.find((p) => p.name === 'event-number')!.valueString = '1';
    params.find((p) => p.name === 'events-since-subscription-start')!.valueString = '1';
    // quirk: the entry comes without `request`
    bundle.entry = [(bundle.entry as Json[])[0]!, { fullUrl: focus, resource: sr }];
    ehr.requests.length = 0;
    await notify(bundle);
    expect(ehr.requests.some((r) => r.url.includes('ServiceRequest/fr-1'))).toBe(false);
    const order = await orderFor('fr-1');
    expect(order.placer_order_number).toBe('FR-1');
    const [msg] = await rows(
      `SELECT quirks FROM inbound_messages WHERE id = (SELECT inbound_message_id FROM orders WHERE id = $1)`,
      [order.id],
    );
    expect(msg.quirks.map((q: { code: string }) => q.code)).toEqual(
      expect.arrayContaining([
        'notification-reference-as-string',
        'notification-entry-without-request',
        'fhir-placer-untyped',
      ]),
    );
  });

  it('empty: searches the EHR for what changed', async () => {
    await seedOrder('em-1', 'EM-1');
    ehr.requests.length = 0;
    await notify(withEvent(example('backport-r4-notification-empty', 'empty'), 1));
    expect(ehr.requests.some((r) => r.url.startsWith('/fhir/ServiceRequest?'))).toBe(true);
    expect(await orderFor('em-1')).toBeDefined();
  });

  it('a gap in event numbers is detected and caught up by search', async () => {
    await seedOrder('gap-1', 'GAP-1');
    await notify(
      withEvent(
        example('backport-r4-notification-id-only', 'gap'),
        1,
        `${ehr.baseUrl}/ServiceRequest/gap-1`,
      ),
    );
    await seedOrder('gap-2', 'GAP-2'); // event 2: its notification never arrives
    await seedOrder('gap-3', 'GAP-3');
    ehr.requests.length = 0;
    await notify(
      withEvent(
        example('backport-r4-notification-id-only', 'gap'),
        3,
        `${ehr.baseUrl}/ServiceRequest/gap-3`,
      ),
    );
    expect(
      ehr.requests.some((r) =>
        /\/fhir\/ServiceRequest\?.*_lastUpdated=ge/.test(decodeURIComponent(r.url)),
      ),
    ).toBe(true);
    expect(await orderFor('gap-2')).toBeDefined();
    expect(await orderFor('gap-3')).toBeDefined();
    const [sub] = await rows(
      `SELECT last_event_number FROM fhir_subscriptions WHERE subscription_ref = $1`,
      [`${ehr.baseUrl}/Subscription/gap`],
    );
    expect(sub.last_event_number).toBe('3');
  });

  it('an EHR whose event numbers went back without a handshake (restored, its subscription store reset): a used number naming another focus is processed and flagged, its resend is one event', async () => {
    const sub = `${ehr.baseUrl}/Subscription/restored`;
    const idOnly = (n: number, id: string) =>
      withEvent(
        example('backport-r4-notification-id-only', 'restored'),
        n,
        `${ehr.baseUrl}/ServiceRequest/${id}`,
      );
    for (const n of [1, 2, 3]) {
      await seedOrder(`rs-${n}`, `RS-${n}`);
      await notify(idOnly(n, `rs-${n}`));
    }
    expect(await orderFor('rs-3')).toBeDefined();

    // The EHR was restored from a backup: it numbers from 1 again and sends no handshake.
    await seedOrder('rs-new-1', 'RS-NEW-1');
    const answer = await notify(idOnly(1, 'rs-new-1'));
    // Before: "events already processed", and RS-NEW-1 was never ordered.
    expect(JSON.stringify(answer)).not.toContain('already processed');
    const order = await orderFor('rs-new-1');
    expect(order).toMatchObject({ placer_order_number: 'RS-NEW-1' });
    const [msg] = await rows(
      `SELECT quirks, message_type FROM inbound_messages WHERE id = (SELECT inbound_message_id FROM orders WHERE id = $1)`,
      [order.id],
    );
    const restarted = (msg.quirks as Array<{ code: string; detail?: string }>).find(
      (q) => q.code === 'subscription-events-restarted',
    );
    expect(restarted?.detail).toMatch(/event 1/);
    expect(restarted?.detail).not.toMatch(/RS-NEW|MINT1234|Patient/);

    // Its resend (same number, same focus) keeps the answer and changes nothing.
    const resend = await notify(idOnly(1, 'rs-new-1'));
    expect(JSON.stringify(resend)).toContain('already processed');
    expect(await rows(`SELECT 1 FROM orders WHERE placer_order_number = 'RS-NEW-1'`)).toHaveLength(
      1,
    );
    // So does a resend of an event of the first numbering (unversioned focus, same event).
    const old = await notify(idOnly(3, 'rs-3'));
    expect(JSON.stringify(old)).toContain('already processed');

    // Event 2 of the new numbering: the same request as the old event 2, at another version
    // (full-resource, revoked): not a resend. Before: dropped, the order never cancelled.
    const rs2 = await orderFor('rs-2');
    const bundle = example('backport-r4-notification-full-resource', 'restored');
    const focus = `${ehr.baseUrl}/ServiceRequest/rs-2`;
    const current = (await (await fetch(focus)).json()) as ServiceRequest;
    const revoked = {
      ...current,
      status: 'revoked',
      meta: { ...current.meta, versionId: String(Number(current.meta?.versionId ?? '1') + 1) },
    };
    const params = statusParams(bundle);
    params.find((p) => p.name === 'events-since-subscription-start')!.valueString = '2';
    const ev = params.find((p) => p.name === 'notification-event')!;
    ev.part!.find((p) => p.name === 'event-number')!.valueString = '2';
    ev.part = [
      ...ev.part!.filter((p) => p.name !== 'focus'),
      { name: 'focus', valueReference: { reference: focus } },
    ];
    bundle.entry = [
      (bundle.entry as Json[])[0]!,
      { fullUrl: focus, resource: revoked, request: { method: 'PUT', url: 'ServiceRequest/rs-2' } },
    ];
    expect(JSON.stringify(await notify(bundle))).not.toContain('already processed');
    const [cancelled] = await rows(`SELECT cancel_requested_at FROM orders WHERE id = $1`, [
      rs2.id,
    ]);
    expect(cancelled.cancel_requested_at).not.toBeNull();
    const [state] = await rows(
      `SELECT last_event_number FROM fhir_subscriptions WHERE subscription_ref = $1`,
      [sub],
    );
    expect(state.last_event_number).toBe('2');
  });

  it('a heartbeat whose events-since-subscription-start is below what we processed restarts the numbering: later events are judged by focus and a gap in them is caught up', async () => {
    const sub = `${ehr.baseUrl}/Subscription/reset`;
    const idOnly = (n: number, id: string) =>
      withEvent(
        example('backport-r4-notification-id-only', 'reset'),
        n,
        `${ehr.baseUrl}/ServiceRequest/${id}`,
      );
    for (const n of [1, 2, 3, 4]) {
      await seedOrder(`hr-${n}`, `HR-${n}`);
      await notify(idOnly(n, `hr-${n}`));
    }
    // The EHR's subscription store was reset: its heartbeat counts 1 event since start, an
    // event whose notification never reached us. It is caught up by search.
    await seedOrder('hr-new-1', 'HR-NEW-1');
    const heartbeat = example('backport-r4-notification-heartbeat', 'reset');
    statusParams(heartbeat).find((p) => p.name === 'events-since-subscription-start')!.valueString =
      '1';
    await notify(heartbeat);
    const [state] = await rows(
      `SELECT last_event_number FROM fhir_subscriptions WHERE subscription_ref = $1`,
      [sub],
    );
    expect(state.last_event_number).toBe('1');
    expect(await orderFor('hr-new-1')).toBeDefined();
    const [hb] = await rows(
      `SELECT quirks FROM inbound_messages WHERE idempotency_key LIKE $1 ORDER BY received_at DESC LIMIT 1`,
      [`fhir-subscription|${sub}|heartbeat|%`],
    );
    expect(hb.quirks.map((q: { code: string }) => q.code)).toContain(
      'subscription-events-restarted',
    );
    await seedOrder('hr-new-2', 'HR-NEW-2'); // event 2: its notification never arrives
    await seedOrder('hr-new-3', 'HR-NEW-3');
    ehr.requests.length = 0;
    const answer = await notify(idOnly(3, 'hr-new-3'));
    expect(JSON.stringify(answer)).not.toContain('already processed');
    expect(await orderFor('hr-new-3')).toBeDefined();
    // The gap (event 2) is caught up by search, as in any numbering.
    expect(
      ehr.requests.some((r) =>
        /\/fhir\/ServiceRequest\?.*_lastUpdated=ge/.test(decodeURIComponent(r.url)),
      ),
    ).toBe(true);
    expect(await orderFor('hr-new-2')).toBeDefined();
    const [after] = await rows(
      `SELECT last_event_number FROM fhir_subscriptions WHERE subscription_ref = $1`,
      [sub],
    );
    expect(after.last_event_number).toBe('3');
  });

  it('tolerates the 2021 draft shape (SubscriptionStatus resource) and records it', async () => {
    await seedOrder('sr-draft-3', 'DRAFT-3');
    await notify(example('draft-2021-notification-subscriptionstatus', 'draft'));
    const order = await orderFor('sr-draft-3');
    expect(order).toBeDefined();
    const [msg] = await rows(`SELECT quirks FROM inbound_messages WHERE id = $1`, [
      order.inbound_message_id,
    ]);
    expect(msg.quirks.map((q: { code: string }) => q.code)).toEqual(
      expect.arrayContaining([
        'notification-subscriptionstatus-resource',
        'notification-entry-without-request',
      ]),
    );
  });

  it('an R4B notification labelled fhirVersion=4.3 is read (the focus is read back as R4); other versions, and 4.3 on the order endpoint, stay 415', async () => {
    await seedOrder('sr-r4b-1', 'R4B-1');
    // R4B's notification Bundle: a SubscriptionStatus resource first (R4B subscriptionstatus.html)
    const r4b = (version: string) => ({
      resourceType: 'Bundle',
      type: 'history',
      timestamp: '2026-11-28T01:00:00Z',
      entry: [
        {
          fullUrl: 'urn:uuid:7b7c3c1e-1f7e-4a43-9a57-6a3d0e2f4b11',
          resource: {
            resourceType: 'SubscriptionStatus',
            status: 'active',
            type: 'event-notification',
            eventsSinceSubscriptionStart: '1',
            notificationEvent: [
              {
                eventNumber: '1',
                timestamp: '2026-11-28T01:00:00Z',
                focus: { reference: `${ehr.baseUrl}/ServiceRequest/sr-r4b-1` },
              },
            ],
            subscription: { reference: `${ehr.baseUrl}/Subscription/r4b-${version}` },
            topic: 'http://example.org/SubscriptionTopic/imaging-orders',
          },
          request: { method: 'GET', url: `${ehr.baseUrl}/Subscription/r4b-${version}/$status` },
          response: { status: '200' },
        },
      ],
    });
    const post = (path: string, body: unknown, version: string) =>
      fetch(`${adapter.httpUrl}/fhir/${path}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': `application/fhir+json; fhirVersion=${version}`,
        },
        body: JSON.stringify(body),
      });
    // Before: 415 "Content-Type names FHIR version 4.3: this server reads R4", and never ordered.
    expect((await post('subscription-notifications', r4b('4.3'), '4.3')).status).toBe(200);
    expect(await orderFor('sr-r4b-1')).toBeDefined();
    const r5 = await post('subscription-notifications', r4b('5.0'), '5.0');
    expect(r5.status).toBe(415);
    expect(JSON.stringify(await r5.json())).toMatch(/FHIR version 5\.0/);
    const order = JSON.parse(fixtureText('r4-servicerequest-example-di'));
    const created = await post('ServiceRequest', order, '4.3');
    expect(created.status).toBe(415);
    expect(JSON.stringify(await created.json())).toMatch(/FHIR version 4\.3/);
  });

  it('answers 503 when the EHR cannot be read (kept as rejected), and processes the resend', async () => {
    await seedOrder('down-1', 'DOWN-1');
    const note = withEvent(
      example('backport-r4-notification-id-only', 'down'),
      1,
      `${ehr.baseUrl}/ServiceRequest/down-1`,
    );
    ehr.failWith = 503;
    let status = 0;
    try {
      await notify(note);
    } catch (error) {
      status = (error as { response: { status: number } }).response.status;
    }
    ehr.failWith = undefined;
    expect(status).toBe(503);
    expect(
      await rows(
        `SELECT 1 FROM inbound_messages WHERE transport = 'fhir-subscription' AND outcome = 'rejected' AND response_code = '503'`,
      ),
    ).toHaveLength(1);
    await notify(note);
    expect(await orderFor('down-1')).toBeDefined();
  });

  it('classic R4 rest-hook (no Backport topic): an empty POST searches the EHR, a PUT of ServiceRequest/{id} under the endpoint orders it, a DELETE cancels it', async () => {
    // As HAPI FHIR's rest-hook deliverer sends them (SubscriptionDeliveringRestHookSubscriber):
    // without channel.payload, a POST with no body (a form request without parameters); with
    // one, the resource PUT to <endpoint>/ServiceRequest/<id>, a DELETE when it is deleted.
    // Before: the POST was 400 "the body is empty" and the PUT/DELETE 404; nothing was ordered.
    const send = (
      method: string,
      path: string,
      body?: Json,
      contentType = 'application/fhir+json',
    ) =>
      fetch(`${adapter.httpUrl}/fhir/subscription-notifications${path}`, {
        method,
        headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, 'content-type': contentType },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    await seedOrder('rh-1', 'RH-1');
    const form = 'application/x-www-form-urlencoded; charset=UTF-8';
    expect((await send('POST', '', undefined, form)).status).toBe(200);
    const first = await orderFor('rh-1');
    expect(first.placer_order_number).toBe('RH-1');
    expect((await send('POST', '', undefined, form)).status).toBe(200);
    expect(
      await rows(`SELECT 1 FROM fhir_resources WHERE source_url = $1`, [
        `${ehr.baseUrl}/ServiceRequest/rh-1`,
      ]),
    ).toHaveLength(1);
    expect(
      await rows(`SELECT 1 FROM fhir_subscriptions WHERE subscription_ref = $1`, [
        `rest-hook:${ehr.baseUrl}`,
      ]),
    ).toHaveLength(1);

    const sr: ServiceRequest = {
      resourceType: 'ServiceRequest',
      id: 'rh-2',
      meta: { versionId: '1', lastUpdated: '2026-11-27T08:00:00.000Z' },
      identifier: [{ system: 'http://example.org/ehr/orders', value: 'RH-2' }],
      status: 'active',
      intent: 'order',
      code: { coding: [{ system: 'http://loinc.org', code: '24627-2' }] },
      subject: { reference: 'Patient/dicom' },
    };
    expect((await send('PUT', '/ServiceRequest/rh-2', sr as unknown as Json)).status).toBe(200);
    const second = await orderFor('rh-2');
    expect(second.placer_order_number).toBe('RH-2');
    // The body's id must be the URL's (R4 http.html#update): 400, kept.
    expect((await send('PUT', '/ServiceRequest/rh-3', sr as unknown as Json)).status).toBe(400);
    expect(await orderFor('rh-3')).toBeUndefined();

    expect((await send('DELETE', '/ServiceRequest/rh-2')).status).toBe(200);
    expect(
      await rows(
        `SELECT 1 FROM audit_events WHERE order_id = $1 AND kind = 'order.cancel-requested'`,
        [second.id],
      ),
    ).toHaveLength(1);
  });

  it('refuses a Bundle that is not a notification with 422 and the failing path', async () => {
    let res: { status: number; data: { issue: Array<{ expression: string[] }> } } | undefined;
    try {
      await notify({ resourceType: 'Bundle', type: 'history', entry: [] });
    } catch (error) {
      res = (error as { response: typeof res }).response;
    }
    expect(res?.status).toBe(422);
    expect(res?.data.issue[0]!.expression).toEqual(['Bundle.entry[0].resource']);
  });
});
