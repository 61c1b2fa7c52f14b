import type { Client as PgClient } from 'pg';
import { TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, type Json } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * PUT /fhir/ServiceRequest/{id} as EHRs use it: the whole resource again at each change, and
 * a change taken back is the same body as an earlier one (R4 http.html#update). A real FHIR
 * engine plays the EHR, PostgreSQL stores.
 */

async function send(adapter: TestAdapter, method: string, path: string, body?: Json) {
  const res = await fetch(`${adapter.httpUrl}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${TEST_TOKENS.sender}`,
      'content-type': 'application/fhir+json',
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, etag: res.headers.get('etag'), body: (await res.json()) as Json };
}

describe('hostile: a ServiceRequest changed and changed back by PUT', () => {
  let adapter: TestAdapter;
  let db: PgClient;
  let harness: FhirHarness | undefined;
  beforeAll(async () => {
    harness = await startFhirHarness();
    ({ adapter, db } = harness);
  });
  afterAll(() => harness?.close());

  const orderPriority = async (id: string) =>
    (
      await db.query<{ priority: string }>(
        `SELECT request->>'priority' AS priority FROM orders WHERE id = $1`,
        [id],
      )
    ).rows[0]?.priority;

  it('a change taken back (routine → stat → routine) is applied as a new version, and a resend of the last PUT is still one change', async () => {
    // The R4 "di" example as created here, then PUT back by the EHR with its priority
    // raised to stat and, the exam rescheduled, lowered to routine again.
    const created = await send(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCtRequest('PUT-ABA-1'),
    );
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const routine = { ...created.body, priority: 'routine' };
    const stat = { ...created.body, priority: 'stat' };

    const first = await send(adapter, 'PUT', `/fhir/ServiceRequest/${id}`, routine);
    expect({ status: first.status, etag: first.etag }).toEqual({ status: 200, etag: 'W/"2"' });
    const raised = await send(adapter, 'PUT', `/fhir/ServiceRequest/${id}`, stat);
    expect({ status: raised.status, etag: raised.etag }).toEqual({ status: 200, etag: 'W/"3"' });
    expect(await orderPriority(id)).toBe('stat');

    // Byte for byte the first PUT's body: it was answered as that PUT's resend, 200 with
    // version 3 (stat), and the order stayed stat.
    const back = await send(adapter, 'PUT', `/fhir/ServiceRequest/${id}`, routine);
    expect({ status: back.status, etag: back.etag, priority: back.body.priority }).toEqual({
      status: 200,
      etag: 'W/"4"',
      priority: 'routine',
    });
    expect(await orderPriority(id)).toBe('routine');
    const read = await send(adapter, 'GET', `/fhir/ServiceRequest/${id}`);
    expect(read.body.priority).toBe('routine');
    expect(read.etag).toBe('W/"4"');

    // The EHR resends the last PUT (its answer lost): the same change, not a fifth version.
    const resent = await send(adapter, 'PUT', `/fhir/ServiceRequest/${id}`, routine);
    expect({ status: resent.status, etag: resent.etag }).toEqual({ status: 200, etag: 'W/"4"' });
    const kept = await db.query<{ outcome: string }>(
      `SELECT outcome FROM inbound_messages WHERE message_type LIKE 'ServiceRequest update%'
         AND message_control_id = $1 ORDER BY received_at`,
      [`ServiceRequest/${id}`],
    );
    expect(kept.rows.map((r) => r.outcome)).toEqual([
      'accepted',
      'accepted',
      'accepted',
      'duplicate',
    ]);
  });

  it('PUTs at once under one If-Match: one is applied, the others 412 and kept; without If-Match each is its own version', async () => {
    // Four PUTs sent together, each with If-Match W/"1": all four were answered 200 with ETag
    // W/"2", each change applied to the order in turn, and three versions were overwritten
    // (R4 http.html#concurrency: the If-Match check and the write are one step).
    const created = await send(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCtRequest('PUT-RACE-1'),
    );
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const put = (priority: string, headers: Record<string, string>, note = 'first round') =>
      fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${id}`, {
        method: 'PUT',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
          ...headers,
        },
        body: JSON.stringify({ ...created.body, priority, note: [{ text: note }] }),
      }).then(async (res) => ({
        status: res.status,
        etag: res.headers.get('etag'),
        body: (await res.json()) as Json,
      }));
    const priorities = ['stat', 'urgent', 'asap', 'routine'];
    const answers = await Promise.all(priorities.map((p) => put(p, { 'if-match': 'W/"1"' })));
    expect(answers.map((a) => a.status).sort()).toEqual([200, 412, 412, 412]);
    const winner = answers.find((a) => a.status === 200)!;
    expect(winner.etag).toBe('W/"2"');
    for (const lost of answers.filter((a) => a.status === 412)) {
      expect(lost.body.resourceType).toBe('OperationOutcome');
    }
    const read = await send(adapter, 'GET', `/fhir/ServiceRequest/${id}`);
    expect({ etag: read.etag, priority: read.body.priority }).toEqual({
      etag: 'W/"2"',
      priority: winner.body.priority,
    });
    expect(await orderPriority(id)).toBe(winner.body.priority);
    const kept = await db.query<{ outcome: string; response_code: string }>(
      `SELECT outcome, response_code FROM inbound_messages WHERE message_type LIKE 'ServiceRequest update%'
         AND convert_from(raw, 'UTF8') LIKE $1 ORDER BY received_at`,
      [`%${id}%`],
    );
    expect(kept.rows.filter((r) => r.response_code === '412')).toHaveLength(3);

    // Without If-Match, each PUT is a version of its own (3, 4, 5, 6), none overwritten.
    const unconditional = await Promise.all(priorities.map((p) => put(p, {}, 'second round')));
    expect(unconditional.map((a) => a.status)).toEqual([200, 200, 200, 200]);
    expect(unconditional.map((a) => a.etag).sort()).toEqual(['W/"3"', 'W/"4"', 'W/"5"', 'W/"6"']);
    const last = unconditional.find((a) => a.etag === 'W/"6"')!;
    const after = await send(adapter, 'GET', `/fhir/ServiceRequest/${id}`);
    expect({ etag: after.etag, priority: after.body.priority }).toEqual({
      etag: 'W/"6"',
      priority: last.body.priority,
    });
    expect(await orderPriority(id)).toBe(last.body.priority);
  });

  it('a PUT naming another placer number is 409 on ServiceRequest.identifier and kept; the order and the served resource keep the number they had', async () => {
    // Answered 200: the served ServiceRequest took PUT-PLC-B while the order stayed under
    // PUT-PLC-A (an order keeps its numbers), so GET served one number, the results went out
    // under the other, and a POST of PUT-PLC-B made a second order beside a resource already
    // carrying it.
    const created = await send(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCtRequest('PUT-PLC-A'),
    );
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const identifier = created.body.identifier as Json[];
    const moved = await send(adapter, 'PUT', `/fhir/ServiceRequest/${id}`, {
      ...created.body,
      priority: 'stat',
      identifier: [{ ...identifier[0], value: 'PUT-PLC-B' }],
    });
    expect(moved.status).toBe(409);
    expect(moved.body.issue).toEqual([
      expect.objectContaining({ code: 'business-rule', expression: ['ServiceRequest.identifier'] }),
    ]);
    const read = await send(adapter, 'GET', `/fhir/ServiceRequest/${id}`);
    expect({ etag: read.etag, identifier: read.body.identifier }).toEqual({
      etag: 'W/"1"',
      identifier,
    });
    expect(await orderPriority(id)).not.toBe('stat');
    const kept = await db.query<{ outcome: string; response_code: string }>(
      `SELECT outcome, response_code FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
    );
    expect(kept.rows[0]).toEqual({ outcome: 'rejected', response_code: '409' });

    // The same number, spelled again, and a change of anything else: applied as before.
    const same = await send(adapter, 'PUT', `/fhir/ServiceRequest/${id}`, {
      ...created.body,
      priority: 'stat',
    });
    expect({ status: same.status, etag: same.etag }).toEqual({ status: 200, etag: 'W/"2"' });
    expect(await orderPriority(id)).toBe('stat');
  });
});
