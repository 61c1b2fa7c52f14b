import type { ServiceRequest } from '@medplum/fhirtypes';
import { Client as PgClient } from 'pg';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { fhirFixture, type Json } from '../helpers/fhir-fixtures';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

jest.setTimeout(120_000);

/**
 * One request on the EHR is one order, and one event is one event, however the EHR spells
 * them. First, an EHR whose FHIR server writes another base in its answers than the one the adapter is
 * configured with (FHIR_SERVER_URL): a HAPI FHIR behind a reverse proxy without forwarded
 * headers answers `http://hapi:8080/fhir/ServiceRequest/…` in a searchset's fullUrls while
 * the site names it `https://ehr.example.org/fhir`. Here the real FHIR engine writes
 * `127.0.0.1` and the adapter knows it as `localhost`. A request found by a search (an `empty`
 * notification) and the same request notified `id-only` must be one order; a full-resource entry under a versioned fullUrl too;
 * and after the EHR restarts a Subscription's numbering (a new handshake), its event 1 is new.
 */
describe('EHR requests and events, one order each however spelled', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let db: PgClient;
  let configured: string;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(fhirFixture('r4-patient-example-dicom') as never);
    configured = ehr.baseUrl.replace('//127.0.0.1:', '//localhost:');
    adapter = await startTestAdapter({ FHIR_SERVER_URL: configured, JOBS_ENABLED: 'false' });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
  });

  /** A Backport IG STU 1.1 notification (r4-notification-* shape): status Parameters first. */
  function notification(type: string, event: number, focus?: string): Json {
    const subscription = `${configured}/Subscription/imaging-orders`;
    const parameter: Json[] = [
      { name: 'subscription', valueReference: { reference: subscription } },
      { name: 'topic', valueCanonical: 'http://example.org/SubscriptionTopic/imaging-orders' },
      { name: 'status', valueCode: 'active' },
      { name: 'type', valueCode: type },
      { name: 'events-since-subscription-start', valueString: String(event) },
    ];
    if (type === 'event-notification') {
      parameter.push({
        name: 'notification-event',
        part: [
          { name: 'event-number', valueString: String(event) },
          { name: 'timestamp', valueInstant: '2026-11-27T07:30:00Z' },
          ...(focus ? [{ name: 'focus', valueReference: { reference: focus } }] : []),
        ],
      });
    }
    return {
      resourceType: 'Bundle',
      type: 'history',
      timestamp: '2026-11-27T07:30:00Z',
      entry: [
        {
          fullUrl: 'urn:uuid:5f1c6a0e-2b7d-4c1e-9a3f-8d2e4b6c0a11',
          resource: { resourceType: 'Parameters', parameter },
          request: { method: 'GET', url: `${subscription}/$status` },
          response: { status: '200' },
        },
      ],
    };
  }

  /** POSTs a notification as the EHR does; `notify` answers its status alone. */
  const post = (body: Json) =>
    fetch(`${adapter.httpUrl}/fhir/subscription-notifications`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(body),
    });
  const notify = async (body: Json) => {
    const res = await post(body);
    await res.arrayBuffer();
    return res.status;
  };

  /** A new version on the EHR (its update interaction). */
  const change = async (sr: ServiceRequest) => {
    const res = await fetch(`${ehr.baseUrl}/ServiceRequest/${sr.id}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/fhir+json' },
      body: JSON.stringify(sr),
    });
    expect(res.status).toBe(200);
  };

  it('a request found by search and then notified by id is one order, updated and cancelled as one', async () => {
    // The R4 "di" example as the EHR holds it: no business identifier, so only its URL on the
    // EHR tells it is the same request.
    const di = fhirFixture('r4-servicerequest-example-di') as unknown as ServiceRequest;
    await ehr.seed(di);
    expect(await notify(notification('handshake', 0))).toBe(200);
    // `empty` payload: the EHR is searched; its searchset names the request under 127.0.0.1.
    expect(await notify(notification('event-notification', 1))).toBe(200);
    const searched = ehr.requests.find((r) => r.url.includes('/ServiceRequest?'));
    expect(searched).toBeDefined();

    await change({ ...di, note: [{ text: 'Prior CT 2012 available in PACS' }] });
    expect(
      await notify(notification('event-notification', 2, `${configured}/ServiceRequest/di`)),
    ).toBe(200);
    await change({ ...di, status: 'revoked' });
    expect(
      await notify(notification('event-notification', 3, `${configured}/ServiceRequest/di`)),
    ).toBe(200);

    const orders = (
      await db.query<{ cancelling: boolean; notes: unknown; source_url: string }>(
        `SELECT o.cancel_requested_at IS NOT NULL AS cancelling, o.request->'notes' AS notes, f.source_url
           FROM orders o JOIN fhir_resources f ON f.order_id = o.id
          WHERE f.source_url LIKE '%/ServiceRequest/di'`,
      )
    ).rows;
    // Before: two orders, one per spelling; the revoke cancelled only the second.
    expect(orders).toEqual([
      {
        cancelling: true,
        notes: ['Prior CT 2012 available in PACS'],
        source_url: `${configured}/ServiceRequest/di`,
      },
    ]);
  });
  it('full-resource entries under versioned fullUrls (…/_history/n) are one request: one order, updated, then cancelled', async () => {
    // The Backport IG r4-notification-full-resource shape (the resource beside the status,
    // with its request PUT), its fullUrl naming the version as a history Bundle's entries may.
    const sr = {
      ...(fhirFixture('r4-servicerequest-example-di') as unknown as ServiceRequest),
      id: 'di-versions',
    };
    const focusOf = (v: number) => `${configured}/ServiceRequest/di-versions/_history/${v}`;
    const full = (event: number, resource: ServiceRequest, fullUrl: string): Json => {
      const bundle = notification('event-notification', event, fullUrl);
      (bundle.entry as Json[]).push({
        fullUrl,
        resource,
        request: { method: 'PUT', url: 'ServiceRequest/di-versions' },
        response: { status: '200' },
      });
      return bundle;
    };
    const base = 10;
    expect(await notify(notification('heartbeat', base))).toBe(200);
    const v1 = { ...sr, meta: { versionId: '1' } };
    expect(await notify(full(base + 1, v1, focusOf(1)))).toBe(200);
    const v2 = { ...sr, meta: { versionId: '2' }, note: [{ text: 'Contrast allergy' }] };
    expect(await notify(full(base + 2, v2, focusOf(2)))).toBe(200);
    const v3 = { ...sr, meta: { versionId: '3' }, status: 'revoked' as const };
    expect(await notify(full(base + 3, v3, `${configured}/ServiceRequest/di-versions`))).toBe(200);

    const orders = (
      await db.query<{ cancelling: boolean; notes: unknown; source_url: string }>(
        `SELECT o.cancel_requested_at IS NOT NULL AS cancelling, o.request->'notes' AS notes, f.source_url
           FROM orders o JOIN fhir_resources f ON f.order_id = o.id
          WHERE f.source_url LIKE '%di-versions%'`,
      )
    ).rows;
    // Before: one order per version, and the revoke found neither.
    expect(orders).toEqual([
      {
        cancelling: true,
        notes: ['Contrast allergy'],
        source_url: `${configured}/ServiceRequest/di-versions`,
      },
    ]);
  });
  it('after a handshake that restarts the numbering (events since start 0), event 1 is a new event: ordered, not "already processed"', async () => {
    // A Subscription set to `off` after failed deliveries and re-activated (the adapter's own
    // registration does so, docs/fhir.md), or re-created under the same id: the EHR sends a
    // handshake and counts its events from 1 again (Backport IG, events-since-subscription-start).
    const seed = (id: string) =>
      ehr.seed({
        ...(fhirFixture('r4-servicerequest-example-di') as unknown as ServiceRequest),
        id,
      });
    const sub = (n: number, type = 'event-notification', focus?: string) => {
      const bundle = notification(type, n, focus);
      const params = (bundle.entry as Array<{ resource: { parameter: Json[] } }>)[0]!.resource
        .parameter;
      params[0] = {
        name: 'subscription',
        valueReference: { reference: `${configured}/Subscription/restarted` },
      };
      return bundle;
    };
    expect(await notify(sub(0, 'handshake'))).toBe(200);
    for (const n of [1, 2]) {
      await seed(`restart-before-${n}`);
      expect(
        await notify(
          sub(n, 'event-notification', `${configured}/ServiceRequest/restart-before-${n}`),
        ),
      ).toBe(200);
    }
    // Re-activated: a new handshake (another Bundle: its own timestamp), numbering from 0.
    const again = sub(0, 'handshake');
    again.timestamp = '2026-11-27T08:00:00Z';
    expect(await notify(again)).toBe(200);
    await seed('restart-after-1');
    expect(
      await notify(sub(1, 'event-notification', `${configured}/ServiceRequest/restart-after-1`)),
    ).toBe(200);
    const ordered = await db.query<{ source_url: string }>(
      `SELECT source_url FROM fhir_resources WHERE source_url LIKE '%/ServiceRequest/restart-%' ORDER BY source_url`,
    );
    // Before: event 1 after the restart was answered "events already processed" (its number
    // was the first numbering's), and restart-after-1 was never ordered.
    expect(ordered.rows.map((r) => r.source_url.replace(/^.*\//, ''))).toEqual([
      'restart-after-1',
      'restart-before-1',
      'restart-before-2',
    ]);
    // A resend of that event is still one event.
    expect(
      await notify(sub(1, 'event-notification', `${configured}/ServiceRequest/restart-after-1`)),
    ).toBe(200);
    const resend = await db.query<{ message_type: string }>(
      `SELECT message_type FROM inbound_messages WHERE transport = 'fhir-subscription' ORDER BY received_at DESC LIMIT 1`,
    );
    expect(resend.rows[0]!.message_type).toBe('notification event-notification (resend)');
  });
  it('two EHR requests under one accession number (CT head, CT chest of one trauma visit) are two orders, and a change of one leaves the other', async () => {
    // One accession covers several requested procedures in radiology (a trauma CT of head and
    // chest): two ServiceRequests on the EHR with their own ids and placer numbers and one
    // ACSN identifier, listed first.
    const accession = {
      type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'ACSN' }] },
      system: 'urn:oid:2.16.840.1.113883.3.999.1',
      value: 'ACC-SHARED-77',
    };
    const placer = (value: string) => ({
      type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'PLAC' }] },
      system: 'urn:oid:2.16.840.1.113883.3.999.2',
      value,
    });
    const di = fhirFixture('r4-servicerequest-example-di') as unknown as ServiceRequest;
    const chest: ServiceRequest = {
      ...di,
      id: 'acsn-chest',
      identifier: [accession, placer('PL-CHEST-77')],
    };
    const head: ServiceRequest = {
      ...di,
      id: 'acsn-head',
      identifier: [accession, placer('PL-HEAD-77')],
      code: { coding: [{ system: 'http://loinc.org', code: '24725-4' }], text: 'CT Head' },
    };
    await ehr.seed(chest);
    await ehr.seed(head);
    const sub = (n: number, type = 'event-notification', focus?: string) => {
      const bundle = notification(type, n, focus);
      const params = (bundle.entry as Array<{ resource: { parameter: Json[] } }>)[0]!.resource
        .parameter;
      params[0] = {
        name: 'subscription',
        valueReference: { reference: `${configured}/Subscription/accession` },
      };
      return bundle;
    };
    expect(await notify(sub(0, 'handshake'))).toBe(200);
    expect(
      await notify(sub(1, 'event-notification', `${configured}/ServiceRequest/acsn-chest`)),
    ).toBe(200);
    expect(
      await notify(sub(2, 'event-notification', `${configured}/ServiceRequest/acsn-head`)),
    ).toBe(200);
    await change({ ...head, note: [{ text: 'Known subdural hematoma' }] });
    expect(
      await notify(sub(3, 'event-notification', `${configured}/ServiceRequest/acsn-head`)),
    ).toBe(200);

    const rows = (
      await db.query<{ source_url: string; placer: string; notes: unknown }>(
        `SELECT f.source_url, o.placer_order_number AS placer, o.request->'notes' AS notes
           FROM fhir_resources f JOIN orders o ON o.id = f.order_id
          WHERE f.source_url LIKE '%/ServiceRequest/acsn-%' ORDER BY f.source_url`,
      )
    ).rows;
    // Before: one order, the chest CT's: the head CT was found as it (same accession) and
    // never ordered, and its change (the note) was written to the chest CT's order.
    expect(rows.map((r) => ({ ...r, source_url: r.source_url.replace(/^.*\//, '') }))).toEqual([
      { source_url: 'acsn-chest', placer: 'PL-CHEST-77', notes: null },
      { source_url: 'acsn-head', placer: 'PL-HEAD-77', notes: ['Known subdural hematoma'] },
    ]);
  });
  it('a notification of more events than FHIR_MAX_NOTIFICATION_EVENTS is refused 413 too-costly before any read of the EHR, and kept', async () => {
    // An EHR (or anyone holding the sender token) batching 101 id-only events: each one was a
    // read of the EHR within the one request (300 took 5.7 s; 20,000 JSON values allow 2,000).
    const body = notification('event-notification', 1_001, `${configured}/ServiceRequest/di`);
    const status = (body.entry as Json[])[0]!.resource as { parameter: Json[] };
    const first = status.parameter.find((p) => p.name === 'notification-event')!;
    for (let n = 1_002; n <= 1_101; n += 1) {
      status.parameter.push({
        name: 'notification-event',
        part: [
          { name: 'event-number', valueString: String(n) },
          { name: 'timestamp', valueInstant: '2026-11-27T07:30:00Z' },
          (first.part as Json[])[2]!,
        ],
      });
    }
    const readsBefore = ehr.requests.length;
    const res = await post(body);
    expect(res.status).toBe(413);
    const outcome = (await res.json()) as { issue: Array<{ code: string; diagnostics: string }> };
    expect(outcome.issue[0]).toMatchObject({ code: 'too-costly' });
    expect(outcome.issue[0]!.diagnostics).toMatch(
      /holds 101 events with a focus; at most 100 .*FHIR_MAX_NOTIFICATION_EVENTS/,
    );
    expect(ehr.requests.length).toBe(readsBefore);
    const kept = await db.query(
      `SELECT 1 FROM inbound_messages WHERE transport = 'fhir-subscription' AND outcome = 'rejected' AND response_code = '413'`,
    );
    expect(kept.rowCount).toBe(1);
  });
  it('a burst of empty-payload notifications (one per changed request, as a bulk update sends them) costs a few searches of the EHR, not one or two each', async () => {
    // after a handshake, 30 `empty` events at once, numbered 1..30: each one searched the EHR
    // for everything changed since the last event (a bulk update of N requests was N searches
    // of up to 20 pages each, all at once)
    expect(await notify(notification('handshake', 0))).toBe(200);
    const searchesBefore = ehr.requests.filter((r) => r.url.includes('/ServiceRequest?')).length;
    ehr.delayMs = 300; // an EHR busy with the bulk update it is notifying
    const statuses = await Promise.all(
      Array.from({ length: 30 }, (_, i) => notify(notification('event-notification', i + 1))),
    ).finally(() => (ehr.delayMs = undefined));
    expect(statuses.every((s) => s === 200)).toBe(true);
    const searches =
      ehr.requests.filter((r) => r.url.includes('/ServiceRequest?')).length - searchesBefore;
    expect(searches).toBeGreaterThan(0);
    // one search coalesces the events that arrived while the previous one ran (300 ms): 3–4
    // on a quiet machine, 5 seen when the 30 requests took longer to arrive under CPU load;
    // one per event (59 before) fails either way
    expect(searches).toBeLessThanOrEqual(8);
    // every event processed, none left as a gap for a later catch-up
    const last = await db.query<{ n: string }>(
      `SELECT last_event_number AS n FROM fhir_subscriptions WHERE subscription_ref LIKE '%/Subscription/imaging-orders'`,
    );
    expect(Number(last.rows[0]!.n)).toBe(30);
  });
});
