import type { ServiceRequest } from '@medplum/fhirtypes';
import { Client as PgClient } from 'pg';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { chestCtRequest, fhirFixture, type Json } from '../helpers/fhir-fixtures';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

jest.setTimeout(120_000);

/**
 * A request's versions as the EHR sends them over the life of an integration: a rest-hook
 * deliverer with several threads (HAPI FHIR's default) or a retry queue delivers version 2
 * before version 1; what we then serve back of the request under /fhir must still make sense
 * to a reader on our base.
 */
describe('EHR request versions and the request we serve back', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let db: PgClient;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(fhirFixture('r4-patient-example-dicom') as never);
    adapter = await startTestAdapter({ FHIR_SERVER_URL: ehr.baseUrl, JOBS_ENABLED: 'false' });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
  });

  /** A Backport IG STU 1.1 full-resource notification: status Parameters, then the request. */
  function fullResource(subscription: string, event: number, sr: Json): Json {
    const ref = `${ehr.baseUrl}/Subscription/${subscription}`;
    const url = `${ehr.baseUrl}/ServiceRequest/${sr.id as string}`;
    return {
      resourceType: 'Bundle',
      type: 'history',
      timestamp: '2026-11-27T08:00:00Z',
      entry: [
        {
          fullUrl: 'urn:uuid:0b7d3f3e-61c4-4a53-9d0e-2f6c1c2a9e41',
          resource: {
            resourceType: 'Parameters',
            parameter: [
              { name: 'subscription', valueReference: { reference: ref } },
              { name: 'topic', valueCanonical: 'http://example.org/SubscriptionTopic/imaging' },
              { name: 'status', valueCode: 'active' },
              { name: 'type', valueCode: 'event-notification' },
              { name: 'events-since-subscription-start', valueString: String(event) },
              {
                name: 'notification-event',
                part: [
                  { name: 'event-number', valueString: String(event) },
                  { name: 'focus', valueReference: { reference: url } },
                ],
              },
            ],
          },
          request: { method: 'GET', url: `${ref}/$status` },
          response: { status: '200' },
        },
        {
          fullUrl: url,
          resource: sr,
          request: { method: 'PUT', url: `ServiceRequest/${sr.id as string}` },
          response: { status: '200' },
        },
      ],
    };
  }

  const post = async (path: string, body: Json, method = 'POST') => {
    const res = await fetch(`${adapter.httpUrl}/fhir/subscription-notifications${path}`, {
      method,
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Json };
  };

  const request = (id: string, placer: string, version: number, changes: Json = {}): Json => ({
    ...chestCtRequest(placer, { subject: { reference: 'Patient/dicom' } }),
    id,
    meta: {
      versionId: String(version),
      lastUpdated: `2026-11-27T08:0${version}:00.000+00:00`,
    },
    ...changes,
  });

  const orderOf = async (placer: string) =>
    (
      await db.query<{ id: string; priority: string | null; cancelling: boolean }>(
        `SELECT o.id, o.request->>'priority' AS priority, o.cancel_requested_at IS NOT NULL AS cancelling
           FROM orders o WHERE o.placer_order_number = $1`,
        [placer],
      )
    ).rows;

  const served = async (orderId: string) =>
    (await (
      await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${orderId}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
      })
    ).json()) as ServiceRequest;

  it('full-resource: version 1 delivered after version 2 changes nothing (the order keeps version 2)', async () => {
    const v2 = request('late-1', 'LATE-1', 2, { priority: 'stat' });
    const v1 = request('late-1', 'LATE-1', 1, { priority: 'routine' });
    expect((await post('', fullResource('late', 2, v2))).status).toBe(200);
    expect((await post('', fullResource('late', 1, v1))).status).toBe(200);
    const orders = await orderOf('LATE-1');
    expect(orders).toHaveLength(1);
    expect(orders[0]!.priority).toBe('stat');
    expect((await served(orders[0]!.id)).priority).toBe('stat');
    const [late] = (
      await db.query<{ outcome: string; quirks: Array<{ code: string }> }>(
        `SELECT outcome, quirks FROM inbound_messages WHERE idempotency_key = $1`,
        [`fhir-subscription|${ehr.baseUrl}/Subscription/late|events:1`],
      )
    ).rows;
    expect(late!.outcome).toBe('accepted');
    expect(late!.quirks.map((q) => q.code)).toContain('notification-version-older');
  });

  it('full-resource without version ids (meta.lastUpdated only): the older one delivered late changes nothing', async () => {
    const at = (minute: number, changes: Json) => {
      const sr = request('late-5', 'LATE-5', 1, changes);
      sr.meta = { lastUpdated: `2026-11-27T08:0${minute}:00.000+00:00` };
      return sr;
    };
    expect((await post('', fullResource('late-5', 2, at(2, { priority: 'asap' })))).status).toBe(
      200,
    );
    expect((await post('', fullResource('late-5', 1, at(1, { priority: 'routine' })))).status).toBe(
      200,
    );
    expect((await orderOf('LATE-5'))[0]!.priority).toBe('asap');
  });

  it('classic rest-hook: an older version PUT after a newer one (revoked) does not bring the request back', async () => {
    expect(
      (await post('/ServiceRequest/late-2', request('late-2', 'LATE-2', 1), 'PUT')).status,
    ).toBe(200);
    const v3 = request('late-2', 'LATE-2', 3, { status: 'revoked' });
    const v2 = request('late-2', 'LATE-2', 2, { priority: 'urgent' });
    expect((await post('/ServiceRequest/late-2', v3, 'PUT')).status).toBe(200);
    expect((await post('/ServiceRequest/late-2', v2, 'PUT')).status).toBe(200);
    const [order] = await orderOf('LATE-2');
    expect(order!.cancelling).toBe(true);
    expect(order!.priority).not.toBe('urgent');
    expect((await served(order!.id)).status).toBe('revoked');
  });

  it('a request revoked right after it was made, delivered revoke first: the late create orders nothing', async () => {
    // The EHR's clerk enters the order and enters it in error seconds later; HAPI FHIR's
    // rest-hook deliverer (several threads) delivers version 2 before version 1. Before: the
    // revoke of an unknown request was ignored, then version 1 made an order that ran.
    const v2 = request('late-3', 'LATE-3', 2, { status: 'entered-in-error' });
    expect((await post('/ServiceRequest/late-3', v2, 'PUT')).status).toBe(200);
    expect(
      (await post('/ServiceRequest/late-3', request('late-3', 'LATE-3', 1), 'PUT')).status,
    ).toBe(200);
    expect(await orderOf('LATE-3')).toEqual([]);
    // Made active again by the EHR (version 3): that is an order.
    expect(
      (await post('/ServiceRequest/late-3', request('late-3', 'LATE-3', 3), 'PUT')).status,
    ).toBe(200);
    expect(await orderOf('LATE-3')).toHaveLength(1);
  });

  it('made and entered in error at once (delivered together): no order runs', async () => {
    // HAPI FHIR's rest-hook deliverer sends both versions on two threads at the same moment.
    for (let i = 0; i < 5; i++) {
      const id = `race-${i}`;
      const placer = `RACE-${i}`;
      const statuses = await Promise.all([
        post(`/ServiceRequest/${id}`, request(id, placer, 1), 'PUT'),
        post(
          `/ServiceRequest/${id}`,
          request(id, placer, 2, { status: 'entered-in-error' }),
          'PUT',
        ),
      ]);
      expect(statuses.map((r) => r.status)).toEqual([200, 200]);
      const orders = await orderOf(placer);
      expect(orders.filter((o) => !o.cancelling)).toEqual([]);
    }
  });

  it('full-resource: the same, revoke first, then the create as a late event', async () => {
    const v2 = request('late-4', 'LATE-4', 2, { status: 'revoked' });
    expect((await post('', fullResource('late-4', 2, v2))).status).toBe(200);
    expect((await post('', fullResource('late-4', 1, request('late-4', 'LATE-4', 1)))).status).toBe(
      200,
    );
    expect(await orderOf('LATE-4')).toEqual([]);
  });

  /** A Backport IG STU 1.1 id-only notification: one event whose focus is `focus`. */
  const idOnly = (subscription: string, event: number, focus: string): Json => ({
    resourceType: 'Bundle',
    type: 'history',
    timestamp: '2026-11-27T09:00:00Z',
    entry: [
      {
        fullUrl: 'urn:uuid:9c4e2b71-0d3a-4f6e-8b15-7a2c9e0d4f13',
        resource: {
          resourceType: 'Parameters',
          parameter: [
            {
              name: 'subscription',
              valueReference: { reference: `${ehr.baseUrl}/Subscription/${subscription}` },
            },
            { name: 'topic', valueCanonical: 'http://example.org/SubscriptionTopic/imaging' },
            { name: 'status', valueCode: 'active' },
            { name: 'type', valueCode: 'event-notification' },
            { name: 'events-since-subscription-start', valueString: String(event) },
            {
              name: 'notification-event',
              part: [
                { name: 'event-number', valueString: String(event) },
                { name: 'focus', valueReference: { reference: focus } },
              ],
            },
          ],
        },
        request: {
          method: 'GET',
          url: `${ehr.baseUrl}/Subscription/${subscription}/$status`,
        },
        response: { status: '200' },
      },
    ],
  });

  it('id-only focus naming a version (ServiceRequest/x/_history/n): the EHR is read only for a version newer than the one held; the same or an older one is not read and changes nothing', async () => {
    // HAPI FHIR's numeric version ids: the engine keeps each version for vread.
    const version = (v: number, priority: string) =>
      ehr.repo.withSeeding(() =>
        ehr.repo.createResource(
          request('pinned-1', 'PINNED-1', v, { priority }) as never,
          undefined,
          true,
        ),
      );
    const focus = (v: number) => `${ehr.baseUrl}/ServiceRequest/pinned-1/_history/${v}`;
    const readsOf = (from: number) =>
      ehr.requests.slice(from).filter((r) => r.url.includes('/ServiceRequest/pinned-1'));
    await version(1, 'routine');
    await version(2, 'stat');

    let before = ehr.requests.length;
    expect((await post('', idOnly('pinned', 1, focus(2)))).status).toBe(200);
    expect(readsOf(before)).toHaveLength(1);
    const [order] = await orderOf('PINNED-1');
    expect(order!.priority).toBe('stat');

    // The version held, notified again (another event, as a second topic or a retry queue
    // sends it): before, the EHR was read again for a version we hold.
    before = ehr.requests.length;
    expect((await post('', idOnly('pinned', 2, focus(2)))).status).toBe(200);
    expect(readsOf(before)).toHaveLength(0);
    // An older version delivered late: not read, and the order keeps version 2.
    expect((await post('', idOnly('pinned', 3, focus(1)))).status).toBe(200);
    expect(readsOf(before)).toHaveLength(0);
    expect(await orderOf('PINNED-1')).toEqual([{ ...order, priority: 'stat' }]);
    expect((await served(order!.id)).priority).toBe('stat');
    const quirks = (
      await db.query<{ codes: string[] }>(
        `SELECT ARRAY(SELECT q->>'code' FROM jsonb_array_elements(quirks) q) AS codes
           FROM inbound_messages WHERE idempotency_key LIKE $1 ORDER BY received_at`,
        [`fhir-subscription|${ehr.baseUrl}/Subscription/pinned|events%`],
      )
    ).rows.map((r) => r.codes);
    expect(quirks[1]).toContain('notification-version-already-processed');
    expect(quirks[2]).toContain('notification-version-older');

    // A newer version is read, and applied.
    await version(3, 'asap');
    before = ehr.requests.length;
    expect((await post('', idOnly('pinned', 4, focus(3)))).status).toBe(200);
    expect(readsOf(before)).toHaveLength(1);
    expect((await orderOf('PINNED-1'))[0]!.priority).toBe('asap');
  });

  it("the request served back names the EHR's resources by absolute URL (a relative one would be read on our base)", async () => {
    expect(
      (await post('/ServiceRequest/refs-1', request('refs-1', 'REFS-1', 1), 'PUT')).status,
    ).toBe(200);
    const [order] = await orderOf('REFS-1');
    const sr = await served(order!.id);
    // R4 references.html#literal: a relative reference is relative to the base it is read from.
    expect(sr.subject?.reference).toBe(`${ehr.baseUrl}/Patient/dicom`);
    expect(sr.requester?.reference).toBe(`${ehr.baseUrl}/Practitioner/example`);
  });
});

describe('classic rest-hook: a flood of payload-less notifications', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let db: PgClient;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(fhirFixture('r4-patient-example-dicom') as never);
    adapter = await startTestAdapter({ FHIR_SERVER_URL: ehr.baseUrl, JOBS_ENABLED: 'false' });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
  });

  it('HAPI FHIR notifying a bulk load (one POST per request, at once): every request ordered once, every notification kept, the EHR searched a few times, not once per POST', async () => {
    const n = 40;
    for (let i = 0; i < n; i++) {
      await ehr.seed({
        ...chestCtRequest(`BULK-${i}`, { subject: { reference: 'Patient/dicom' } }),
        id: `bulk-${i}`,
      } as unknown as ServiceRequest);
    }
    const before = ehr.requests.length;
    const statuses = await Promise.all(
      Array.from({ length: n }, () =>
        fetch(`${adapter.httpUrl}/fhir/subscription-notifications`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${TEST_TOKENS.sender}`,
            'content-type': 'application/x-www-form-urlencoded; charset=UTF-8',
          },
        }).then(async (r) => {
          await r.text();
          return r.status;
        }),
      ),
    );
    expect(statuses).toEqual(Array.from({ length: n }, () => 200));
    const searches = ehr.requests
      .slice(before)
      .filter((r) => r.method === 'GET' && r.url.includes('/ServiceRequest?'));
    // Before: 40 searches (200 POSTs: 200 searches, 15,382 reads of the EHR, 76 s).
    expect(searches.length).toBeLessThanOrEqual(8);
    const orders = (
      await db.query<{ placer_order_number: string }>(
        `SELECT placer_order_number FROM orders WHERE placer_order_number LIKE 'BULK-%'`,
      )
    ).rows;
    expect(orders).toHaveLength(n);
    expect(
      (
        await db.query(
          `SELECT 1 FROM inbound_messages WHERE transport = 'fhir-subscription' AND message_type = 'notification rest-hook (no payload)'`,
        )
      ).rows,
    ).toHaveLength(n);
  });
});

describe('request statuses the order cannot follow', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let db: PgClient;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(fhirFixture('r4-patient-example-dicom') as never);
    adapter = await startTestAdapter({ FHIR_SERVER_URL: ehr.baseUrl, JOBS_ENABLED: 'false' });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
  });

  it.each([
    ['on-hold', true],
    ['draft', true],
    ['completed', false],
  ])(
    'an order the EHR sets %s runs on, and the message says whether that status was not honoured',
    async (status, warned) => {
      const id = `status-${status}`;
      const body = (version: number, changes: Json = {}) =>
        JSON.stringify({
          ...chestCtRequest(id.toUpperCase(), { subject: { reference: 'Patient/dicom' } }),
          id,
          meta: { versionId: String(version) },
          ...changes,
        });
      const put = (text: string) =>
        fetch(`${adapter.httpUrl}/fhir/subscription-notifications/ServiceRequest/${id}`, {
          method: 'PUT',
          headers: {
            authorization: `Bearer ${TEST_TOKENS.sender}`,
            'content-type': 'application/fhir+json',
          },
          body: text,
        });
      expect((await put(body(1))).status).toBe(200);
      const second = body(2, { status });
      expect((await put(second)).status).toBe(200);
      const [order] = (
        await db.query<{ cancelling: boolean }>(
          `SELECT cancel_requested_at IS NOT NULL AS cancelling FROM orders WHERE placer_order_number = $1`,
          [id.toUpperCase()],
        )
      ).rows;
      expect(order!.cancelling).toBe(false);
      const [msg] = (
        await db.query<{ quirks: Array<{ code: string; detail: string }> }>(
          `SELECT quirks FROM inbound_messages WHERE raw = convert_to($1, 'UTF8')`,
          [second],
        )
      ).rows;
      const codes = msg!.quirks.map((q) => q.code);
      // Before: an on-hold request was an "order changed" (info) like a new note, nothing more.
      if (warned) expect(codes).toContain('fhir-status-not-honoured');
      else expect(codes).not.toContain('fhir-status-not-honoured');
    },
  );
});

describe('what the answer to a notification says', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(fhirFixture('r4-patient-example-dicom') as never);
    adapter = await startTestAdapter({ FHIR_SERVER_URL: ehr.baseUrl, JOBS_ENABLED: 'false' });
  });
  afterAll(async () => {
    await adapter?.close();
    await ehr?.close();
  });

  it('a request that is no order (a proposal) is answered 200 with a warning naming the request and the element', async () => {
    const id = 'proposal-1';
    const res = await fetch(
      `${adapter.httpUrl}/fhir/subscription-notifications/ServiceRequest/${id}`,
      {
        method: 'PUT',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
        },
        body: JSON.stringify({
          ...chestCtRequest('PROPOSAL-1', { subject: { reference: 'Patient/dicom' } }),
          id,
          intent: 'proposal',
        }),
      },
    );
    expect(res.status).toBe(200);
    const outcome = (await res.json()) as {
      issue: Array<{ severity: string; diagnostics?: string; expression?: string[] }>;
    };
    // Before: only "… processed" (information): the EHR's delivery log could not tell why no AI ran.
    expect(outcome.issue).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          severity: 'warning',
          expression: ['ServiceRequest.intent'],
          diagnostics: expect.stringContaining(`${ehr.baseUrl}/ServiceRequest/${id}`),
        }),
      ]),
    );
  });
});

describe('one id-only notification of many requests of one patient', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let db: PgClient;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(fhirFixture('r4-patient-example-dicom') as never);
    adapter = await startTestAdapter({ FHIR_SERVER_URL: ehr.baseUrl, JOBS_ENABLED: 'false' });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
  });

  it('reads each request once and their Patient and requester once, not once per request', async () => {
    const n = 30;
    for (let i = 0; i < n; i++) {
      await ehr.seed({
        ...chestCtRequest(`MANY-${i}`, { subject: { reference: 'Patient/dicom' } }),
        id: `many-${i}`,
      } as unknown as ServiceRequest);
    }
    const subscription = `${ehr.baseUrl}/Subscription/many`;
    const parameter: Json[] = [
      { name: 'subscription', valueReference: { reference: subscription } },
      { name: 'status', valueCode: 'active' },
      { name: 'type', valueCode: 'event-notification' },
      { name: 'events-since-subscription-start', valueString: String(n) },
      ...Array.from({ length: n }, (_, i) => ({
        name: 'notification-event',
        part: [
          { name: 'event-number', valueString: String(i + 1) },
          { name: 'focus', valueReference: { reference: `ServiceRequest/many-${i}` } },
        ],
      })),
    ];
    const before = ehr.requests.length;
    const res = await fetch(`${adapter.httpUrl}/fhir/subscription-notifications`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify({
        resourceType: 'Bundle',
        type: 'history',
        entry: [
          {
            fullUrl: 'urn:uuid:6a0f1e2d-3c4b-4a59-8e7d-1f2a3b4c5d6e',
            resource: { resourceType: 'Parameters', parameter },
          },
        ],
      }),
    });
    expect(res.status).toBe(200);
    const reads = ehr.requests.slice(before).map((r) => r.url.split('?')[0]);
    expect(reads.filter((u) => u.endsWith('/Patient/dicom'))).toHaveLength(1);
    expect(reads.filter((u) => u.includes('/ServiceRequest/'))).toHaveLength(n);
    // Before: 3 reads per request (the request, its Patient, its requester).
    expect(reads.length).toBeLessThanOrEqual(n + 2);
    expect(
      (await db.query(`SELECT 1 FROM orders WHERE placer_order_number LIKE 'MANY-%'`)).rows,
    ).toHaveLength(n);
  });
});
