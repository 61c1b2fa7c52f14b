import type { Client as PgClient } from 'pg';
import type { ServiceRequest } from '@medplum/fhirtypes';
import { TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, fhirFixture, type Json } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * A notification is a `history` Bundle (Subscriptions Backport IG), and in a history Bundle a
 * deleted resource is an entry with `request.method` DELETE and no resource (R4
 * http.html#history). The Backport IG's `r4-notification-full-resource` example, rewritten at
 * run time to a ServiceRequest focus on the test EHR, carries such an entry for the request the
 * EHR deleted; the EHR (a real FHIR engine) then answers 404 for it, as a server that keeps no
 * deleted versions does.
 */
describe('notification: the focus deleted by a history entry (request DELETE, no resource)', () => {
  let adapter: TestAdapter;
  let db: PgClient;
  let harness: FhirHarness | undefined;
  beforeAll(async () => {
    harness = await startFhirHarness();
    ({ adapter, db } = harness);
  });
  afterAll(() => harness?.close());

  function notification(event: number, focus: string, entry: Json): Json {
    const base = harness!.ehr.baseUrl;
    const bundle = fhirFixture('backport-r4-notification-full-resource');
    const entries = bundle.entry as Array<Json & { resource: Json }>;
    const subscription = `${base}/Subscription/admission`;
    for (const p of entries[0]!.resource.parameter as Array<Json & { part?: Json[] }>) {
      if (p.name === 'subscription') p.valueReference = { reference: subscription };
      if (p.name === 'events-since-subscription-start') p.valueString = String(event);
      for (const part of p.part ?? []) {
        if (part.name === 'event-number') part.valueString = String(event);
        if (part.name === 'timestamp') part.valueInstant = new Date().toISOString();
        if (part.name === 'focus') part.valueReference = { reference: focus };
      }
    }
    entries[0]!.request = { method: 'GET', url: `${subscription}/$status` };
    entries[1] = entry as Json & { resource: Json };
    return bundle;
  }

  const notify = async (body: Json) =>
    (
      await fetch(`${adapter.httpUrl}/fhir/subscription-notifications`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
        },
        body: JSON.stringify(body),
      })
    ).status;

  it("cancels the request's order (as a 410 does), and reads nothing from the EHR for it", async () => {
    const base = harness!.ehr.baseUrl;
    const url = `${base}/ServiceRequest/deleted-entry-1`;
    const sr = { ...chestCtRequest('DEL-ENTRY-1'), id: 'deleted-entry-1' };
    await harness!.ehr.seed(sr as unknown as ServiceRequest);
    const made = await notify(
      notification(1, url, {
        fullUrl: url,
        resource: sr,
        request: { method: 'POST', url: 'ServiceRequest' },
        response: { status: '201' },
      }),
    );
    expect(made).toBe(200);
    await harness!.ehr.repo.deleteResource('ServiceRequest', 'deleted-entry-1');
    const reads = harness!.ehr.requests.length;
    const status = await notify(
      notification(2, url, {
        fullUrl: url,
        request: { method: 'DELETE', url: 'ServiceRequest/deleted-entry-1' },
        response: { status: '204' },
      }),
    );
    expect(status).toBe(200);
    // was kept running: the entry was not read, the EHR was, and its 404 recorded as
    // notification-focus-not-found ("a 404 is not a withdrawal")
    const [order] = (
      await db.query<{ cancel_requested_at: Date | null }>(
        `SELECT cancel_requested_at FROM orders WHERE placer_order_number = 'DEL-ENTRY-1'`,
      )
    ).rows;
    expect(order!.cancel_requested_at).not.toBeNull();
    const [msg] = (
      await db.query<{ quirks: Array<{ code: string }> }>(
        `SELECT quirks FROM inbound_messages WHERE idempotency_key LIKE '%events:2'`,
      )
    ).rows;
    expect(msg!.quirks.map((q) => q.code)).toContain('notification-focus-deleted');
    expect(
      harness!.ehr.requests.slice(reads).filter((r) => r.url.includes('deleted-entry-1')),
    ).toEqual([]);
  });
  it('the DELETE entry named by a urn:uuid fullUrl (its request.url names the request): the order is cancelled too', async () => {
    // Servers that write a history entry without a resource give it a urn:uuid fullUrl; the
    // deleted resource is named by request.url (R4 http.html#history, bundle.html#request).
    const base = harness!.ehr.baseUrl;
    const url = `${base}/ServiceRequest/deleted-entry-2`;
    const sr = { ...chestCtRequest('DEL-ENTRY-2'), id: 'deleted-entry-2' };
    await harness!.ehr.seed(sr as unknown as ServiceRequest);
    const made = await notify(
      notification(3, url, {
        fullUrl: url,
        resource: sr,
        request: { method: 'POST', url: 'ServiceRequest' },
        response: { status: '201' },
      }),
    );
    expect(made).toBe(200);
    await harness!.ehr.repo.deleteResource('ServiceRequest', 'deleted-entry-2');
    const reads = harness!.ehr.requests.length;
    const status = await notify(
      notification(4, url, {
        fullUrl: 'urn:uuid:7c4f3f5e-9a3b-4c1e-8d2f-2f6a1e0b9d41',
        request: { method: 'DELETE', url: 'ServiceRequest/deleted-entry-2' },
        response: { status: '204' },
      }),
    );
    expect(status).toBe(200);
    // was kept running: only a URL fullUrl named the focus; the EHR was read, and its 404
    // was no withdrawal
    const [order] = (
      await db.query<{ cancel_requested_at: Date | null }>(
        `SELECT cancel_requested_at FROM orders WHERE placer_order_number = 'DEL-ENTRY-2'`,
      )
    ).rows;
    expect(order!.cancel_requested_at).not.toBeNull();
    expect(
      harness!.ehr.requests.slice(reads).filter((r) => r.url.includes('deleted-entry-2')),
    ).toEqual([]);
    // a DELETE entry naming another request does not cancel this one
    const other = { ...chestCtRequest('DEL-ENTRY-3'), id: 'deleted-entry-3' };
    await harness!.ehr.seed(other as unknown as ServiceRequest);
    const url3 = `${base}/ServiceRequest/deleted-entry-3`;
    expect(
      await notify(
        notification(5, url3, {
          fullUrl: url3,
          resource: other,
          request: { method: 'POST', url: 'ServiceRequest' },
          response: { status: '201' },
        }),
      ),
    ).toBe(200);
    expect(
      await notify(
        notification(6, url3, {
          fullUrl: 'urn:uuid:0d7e2b1c-5f3a-4e8b-9c6d-1a2b3c4d5e6f',
          request: { method: 'DELETE', url: 'ServiceRequest/deleted-entry-2' },
          response: { status: '204' },
        }),
      ),
    ).toBe(200);
    const [kept] = (
      await db.query<{ cancel_requested_at: Date | null }>(
        `SELECT cancel_requested_at FROM orders WHERE placer_order_number = 'DEL-ENTRY-3'`,
      )
    ).rows;
    expect(kept!.cancel_requested_at).toBeNull();
  });
});
