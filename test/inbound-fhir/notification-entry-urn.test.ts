import type { Client as PgClient } from 'pg';
import { TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, fhirFixture, type Json } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * A full-resource notification (Subscriptions Backport IG `r4-notification-full-resource`,
 * rewritten at run time to a ServiceRequest focus on the test EHR) whose resource entry is
 * named by a `urn:uuid:` fullUrl, as servers that build their Bundles with generic Bundle
 * code write it, while the focus names the request by its URL on the EHR.
 */
describe('full-resource notification: a resource entry named by urn:uuid', () => {
  let adapter: TestAdapter;
  let db: PgClient;
  let harness: FhirHarness | undefined;
  beforeAll(async () => {
    harness = await startFhirHarness();
    ({ adapter, db } = harness);
  });
  afterAll(() => harness?.close());

  it('is the request its focus names: ordered under its EHR URL (200), not a 500; so when the focus names the urn too', async () => {
    const base = harness!.ehr.baseUrl;
    const bundle = fhirFixture('backport-r4-notification-full-resource');
    const entries = bundle.entry as Array<Json & { resource: Json }>;
    const status = entries[0]!.resource;
    const subscription = `${base}/Subscription/admission`;
    for (const p of status.parameter as Array<Json & { part?: Json[] }>) {
      if (p.name === 'subscription') p.valueReference = { reference: subscription };
      for (const part of p.part ?? [])
        if (part.name === 'focus')
          part.valueReference = { reference: `${base}/ServiceRequest/urn-entry-1` };
    }
    entries[0]!.request = { method: 'GET', url: `${subscription}/$status` };
    entries[1] = {
      fullUrl: 'urn:uuid:7f3a0d52-8c1e-4b6a-9d2f-5e4c3b2a1f00',
      resource: { ...chestCtRequest('URN-ENTRY-1'), id: 'urn-entry-1' },
      request: { method: 'POST', url: 'ServiceRequest' },
      response: { status: '201' },
    };
    const res = await fetch(`${adapter.httpUrl}/fhir/subscription-notifications`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(bundle),
    });
    // was 500 "an unexpected error occurred" (the urn was resolved as a URL on the EHR)
    expect(res.status).toBe(200);
    const held = await db.query<{ source_url: string }>(
      `SELECT f.source_url FROM fhir_resources f JOIN orders o ON o.id = f.order_id
        WHERE o.placer_order_number = 'URN-ENTRY-1'`,
    );
    expect(held.rows.map((r) => r.source_url)).toEqual([`${base}/ServiceRequest/urn-entry-1`]);

    // The focus naming the entry by its urn as well (a reference to a Bundle entry, R4
    // bundle.html#references): that entry's ServiceRequest, known by its id on the EHR.
    const urn = 'urn:uuid:1c9e4f7a-2b3d-4e5f-8a6b-7c8d9e0f1a2b';
    for (const p of status.parameter as Array<Json & { part?: Json[] }>) {
      if (p.name === 'events-since-subscription-start') p.valueString = '3';
      for (const part of p.part ?? []) {
        if (part.name === 'event-number') part.valueString = '3';
        if (part.name === 'focus') part.valueReference = { reference: urn };
      }
    }
    entries[1] = {
      fullUrl: urn,
      resource: { ...chestCtRequest('URN-ENTRY-2'), id: 'urn-entry-2' },
      request: { method: 'PUT', url: 'ServiceRequest/urn-entry-2' },
      response: { status: '200' },
    };
    const second = await fetch(`${adapter.httpUrl}/fhir/subscription-notifications`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(bundle),
    });
    expect(second.status).toBe(200);
    // was 200 with nothing ordered: "notification-focus-not-servicerequest: focus unknown ignored"
    const made = await db.query<{ source_url: string }>(
      `SELECT f.source_url FROM fhir_resources f JOIN orders o ON o.id = f.order_id
        WHERE o.placer_order_number = 'URN-ENTRY-2'`,
    );
    expect(made.rows.map((r) => r.source_url)).toEqual([`${base}/ServiceRequest/urn-entry-2`]);
  });

  it('a focus naming by urn an entry of another type is still no order', async () => {
    const base = harness!.ehr.baseUrl;
    const bundle = fhirFixture('backport-r4-notification-full-resource');
    const entries = bundle.entry as Array<Json & { resource: Json }>;
    const subscription = `${base}/Subscription/encounters`;
    const urn = 'urn:uuid:86009987-eabe-42bf-8c02-b112b18cb616';
    for (const p of entries[0]!.resource.parameter as Array<Json & { part?: Json[] }>) {
      if (p.name === 'subscription') p.valueReference = { reference: subscription };
      for (const part of p.part ?? [])
        if (part.name === 'focus') part.valueReference = { reference: urn };
    }
    entries[0]!.request = { method: 'GET', url: `${subscription}/$status` };
    entries[1]!.fullUrl = urn;
    const res = await fetch(`${adapter.httpUrl}/fhir/subscription-notifications`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(bundle),
    });
    expect(res.status).toBe(200);
    const [msg] = (
      await db.query<{ quirks: Array<{ code: string; detail: string }> }>(
        `SELECT quirks FROM inbound_messages WHERE idempotency_key LIKE $1`,
        [`%${subscription}%`],
      )
    ).rows;
    expect(
      msg!.quirks.find((q) => q.code === 'notification-focus-not-servicerequest')?.detail,
    ).toBe('event 2: focus Encounter ignored');
  });
});
