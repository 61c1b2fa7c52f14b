import { TEST_TOKENS } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/** A RIS of the site: a sender token of its own, not the EHR's Subscription token. */
const RIS_TOKEN = 'ris-sender-token-0123456789abcdef';

/**
 * The Subscription notification endpoint is the EHR's: with FHIR_SUBSCRIPTION_TOKEN set, it
 * was still taken from any sender token. A RIS's token DELETEd
 * `/fhir/subscription-notifications/ServiceRequest/{id}` and the EHR's order was cancelled
 * (200 "its order is cancelled"), and PUT a ServiceRequest of its own making, taken as the
 * EHR's. Now another sender token is 403 and nothing is read or changed. Real adapter, a real
 * FHIR engine as the EHR, real PostgreSQL.
 */
describe('the Subscription notification endpoint takes only FHIR_SUBSCRIPTION_TOKEN', () => {
  let h: FhirHarness;

  beforeAll(async () => {
    h = await startFhirHarness({
      API_TOKENS: [
        ...Object.entries(TEST_TOKENS).map(([role, token]) => `${role}:${token}`),
        `sender:${RIS_TOKEN}`,
      ].join(','),
      // the EHR's channel: the test's own sender token
      FHIR_SUBSCRIPTION_TOKEN: TEST_TOKENS.sender,
    });
  });
  afterAll(() => h?.close());

  const hook = (method: string, id: string, token: string, body?: string) =>
    fetch(`${h.adapter.httpUrl}/fhir/subscription-notifications/ServiceRequest/${id}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/fhir+json' },
      body,
    });
  const request = (id: string) =>
    JSON.stringify({
      ...chestCtRequest(id.toUpperCase(), { subject: { reference: 'Patient/dicom' } }),
      id,
    });
  const orderOf = async (placer: string) =>
    (
      await h.db.query<{ id: string; sender: string; cancelling: boolean }>(
        `SELECT id, sender, cancel_requested_at IS NOT NULL AS cancelling FROM orders WHERE placer_order_number = $1`,
        [placer],
      )
    ).rows;
  const kept = async () =>
    Number(
      (await h.db.query<{ n: string }>(`SELECT count(*) AS n FROM inbound_messages`)).rows[0]!.n,
    );

  it('another sender token is 403 on PUT, DELETE and POST; the EHR’s order stays as it was', async () => {
    // the EHR's own notification makes its order
    expect(
      (await hook('PUT', 'ehr-chan-1', TEST_TOKENS.sender, request('ehr-chan-1'))).status,
    ).toBe(200);
    const [order] = await orderOf('EHR-CHAN-1');
    expect(order).toMatchObject({ cancelling: false });
    expect(order!.sender).toMatch(/^fhir-ehr:/);
    const before = await kept();

    // a RIS's token: deletes the EHR's request, makes one, posts a notification
    const deleted = await hook('DELETE', 'ehr-chan-1', RIS_TOKEN);
    expect(deleted.status).toBe(403);
    expect(((await deleted.json()) as { resourceType: string }).resourceType).toBe(
      'OperationOutcome',
    );
    expect((await hook('PUT', 'ris-made-1', RIS_TOKEN, request('ris-made-1'))).status).toBe(403);
    const posted = await fetch(`${h.adapter.httpUrl}/fhir/subscription-notifications`, {
      method: 'POST',
      headers: { authorization: `Bearer ${RIS_TOKEN}` },
    });
    expect(posted.status).toBe(403);

    expect(await orderOf('EHR-CHAN-1')).toEqual([order]);
    expect(await orderOf('RIS-MADE-1')).toEqual([]);
    expect(await kept()).toBe(before);

    // the EHR's token (and admin) still do
    expect((await hook('DELETE', 'ehr-chan-1', TEST_TOKENS.admin)).status).toBe(200);
    expect((await orderOf('EHR-CHAN-1'))[0]).toMatchObject({ cancelling: true });
  });
});

/**
 * With FHIR_SUBSCRIPTION_TOKEN unset any sender token posts notifications (the EHR's channel,
 * docs/fhir.md). A notified request is taken for the one POSTed to us under its placer
 * identifier: that was any sender's, so a RIS's token PUT a `revoked` ServiceRequest under
 * another RIS's placer number to the rest-hook endpoint and that RIS's order was cancelled
 * (200 "processed"). A notification now takes over only what its own token POSTed.
 */
describe('FHIR_SUBSCRIPTION_TOKEN unset: a notification takes over only its own sender’s POSTed requests', () => {
  let h: FhirHarness;

  beforeAll(async () => {
    h = await startFhirHarness({
      API_TOKENS: [
        ...Object.entries(TEST_TOKENS).map(([role, token]) => `${role}:${token}`),
        `sender:${RIS_TOKEN}`,
      ].join(','),
    });
  });
  afterAll(() => h?.close());

  const post = (sr: Record<string, unknown>, token: string) =>
    fetch(`${h.adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/fhir+json' },
      body: JSON.stringify(sr),
    });
  const revokeByHook = (id: string, placer: string, token: string) =>
    fetch(`${h.adapter.httpUrl}/fhir/subscription-notifications/ServiceRequest/${id}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/fhir+json' },
      body: JSON.stringify({
        ...chestCtRequest(placer, { subject: { reference: 'Patient/dicom' } }),
        id,
        status: 'revoked',
      }),
    });
  const cancelling = async (placer: string) =>
    (
      await h.db.query<{ sender: string; cancelling: boolean }>(
        `SELECT sender, cancel_requested_at IS NOT NULL AS cancelling FROM orders WHERE placer_order_number = $1 ORDER BY created_at`,
        [placer],
      )
    ).rows;

  it('another sender’s revoked version under the placer number cancels nothing; the poster’s own does', async () => {
    const sr = chestCtRequest('TAKE-1', { subject: { reference: 'Patient/dicom' } });
    expect((await post(sr, TEST_TOKENS.sender)).status).toBe(201);
    const [mine] = await cancelling('TAKE-1');
    expect(mine).toMatchObject({ cancelling: false });

    // the RIS's token, as "the EHR", revokes a request under the other sender's placer number
    expect((await revokeByHook('take-1', 'TAKE-1', RIS_TOKEN)).status).toBe(200);
    expect(await cancelling('TAKE-1')).toEqual([mine]);

    // the sender that POSTed it, notifying as the EHR's channel, still does
    expect((await revokeByHook('take-1-own', 'TAKE-1', TEST_TOKENS.sender)).status).toBe(200);
    expect(await cancelling('TAKE-1')).toEqual([{ ...mine, cancelling: true }]);
  });
});
