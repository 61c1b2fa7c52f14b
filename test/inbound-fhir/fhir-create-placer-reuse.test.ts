import type { Client as PgClient } from 'pg';
import { TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, postFhir, type Json } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

const OTHER_SENDER = 'other-sender-token-0123456789ab';

/**
 * A plain POST of a ServiceRequest is known by its placer identifier (DESIGN §5: the same FHIR
 * identifier is a duplicate, answered with the original answer). A resend (the same content,
 * whatever the sender's server stamped in meta) is that; a POST under the same placer number
 * with other content is not a resend but a change sent as a create: it was answered 200 with
 * the existing order as a duplicate and the change (here a stat priority) was lost silently.
 * A create does not change (R4 http.html#create); the sender is told to PUT (409, kept).
 */
describe('POST /fhir/ServiceRequest under a placer number already used', () => {
  let harness: FhirHarness | undefined;
  let adapter: TestAdapter;
  let db: PgClient;
  beforeAll(async () => {
    // A second sender (another EHR or RIS client of the FHIR door) beside the test's own.
    harness = await startFhirHarness({
      API_TOKENS: [
        ...Object.entries(TEST_TOKENS).map(([role, token]) => `${role}:${token}`),
        `sender:${OTHER_SENDER}`,
      ].join(','),
    });
    ({ adapter, db } = harness);
  });
  afterAll(() => harness?.close());

  const ordersUnder = async (placer: string) =>
    (
      await db.query<{ id: string; priority: string | null }>(
        `SELECT id, request->>'priority' AS priority FROM orders WHERE placer_order_number = $1`,
        [placer],
      )
    ).rows;

  it('the same content again is the original answer; other content is 409 naming the PUT, kept', async () => {
    const sr = chestCtRequest('PLR-REUSE-1', { priority: 'routine' });
    const created = await postFhir(adapter, '/fhir/ServiceRequest', sr);
    expect(created.status).toBe(201);
    const id = created.body.id as string;

    // a resend: same bytes, then the same resource re-serialised by the sender's server (keys
    // in another order, its own meta stamped again)
    const resent = await postFhir(adapter, '/fhir/ServiceRequest', sr);
    expect(resent).toMatchObject({ status: 200, body: { id } });
    const reserialised: Json = Object.fromEntries(Object.entries(sr).reverse());
    reserialised.meta = { versionId: '2', lastUpdated: '2026-11-27T10:00:00.000Z' };
    expect(await postFhir(adapter, '/fhir/ServiceRequest', reserialised)).toMatchObject({
      status: 200,
      body: { id },
    });

    // a change sent as a create
    const stat = chestCtRequest('PLR-REUSE-1', { priority: 'stat' });
    const changed = await postFhir(adapter, '/fhir/ServiceRequest', stat);
    expect(changed.status).toBe(409);
    expect(changed.location).toBeNull();
    expect(changed.body.resourceType).toBe('OperationOutcome');
    const issue = (changed.body.issue as Json[])[0]!;
    expect(issue).toMatchObject({ severity: 'error', code: 'conflict' });
    expect(issue.expression).toEqual(['ServiceRequest.identifier']);
    expect(issue.diagnostics).toContain(`PUT /fhir/ServiceRequest/${id}`);

    // nothing changed, nothing made, and the refusal is kept with its bytes
    expect(await ordersUnder('PLR-REUSE-1')).toEqual([{ id, priority: 'routine' }]);
    const kept = await db.query<{ outcome: string; response_code: string; raw: Buffer }>(
      `SELECT outcome, response_code, raw FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
    );
    expect(kept.rows[0]).toMatchObject({ outcome: 'rejected', response_code: '409' });
    expect(JSON.parse(kept.rows[0]!.raw.toString('utf8'))).toEqual(stat);

    // the way the sender is told to take: PUT, and the order is stat
    const put = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${id}`, {
      method: 'PUT',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify({ ...stat, id }),
    });
    expect(put.status).toBe(200);
    expect(await ordersUnder('PLR-REUSE-1')).toEqual([{ id, priority: 'stat' }]);
  });

  it('an order made by a transaction, POSTed again with other content: 409 naming the PUT; the same content: 200', async () => {
    const entry = (priority: string) => ({
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          resource: chestCtRequest('PLR-REUSE-3', { priority }),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
      ],
    });
    const made = await postFhir(adapter, '/fhir', entry('routine'));
    expect(made.status).toBe(200);
    const [order] = await ordersUnder('PLR-REUSE-3');
    const id = order!.id;

    const changed = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('PLR-REUSE-3', { priority: 'stat' }),
    );
    expect(changed.status).toBe(409);
    const issue = (changed.body.issue as Json[])[0]!;
    expect(issue).toMatchObject({ code: 'conflict', expression: ['ServiceRequest.identifier'] });
    expect(issue.diagnostics).toContain(`PUT /fhir/ServiceRequest/${id}`);
    expect(await ordersUnder('PLR-REUSE-3')).toEqual([{ id, priority: 'routine' }]);
    const kept = await db.query<{ outcome: string; response_code: string }>(
      `SELECT outcome, response_code FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
    );
    expect(kept.rows[0]).toMatchObject({ outcome: 'rejected', response_code: '409' });

    // the request the transaction carried, POSTed on its own: the order it made
    const same = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('PLR-REUSE-3', { priority: 'routine' }),
    );
    expect(same).toMatchObject({ status: 200, body: { id } });
  });

  it('a Bundle entry (POST without ifNoneExist) under a number already used: other content is 409 (batch: the entry; transaction: whole), the same is 200', async () => {
    const created = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('PLR-REUSE-4', { priority: 'routine' }),
    );
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const bundle = (type: string, priority: string) => ({
      resourceType: 'Bundle',
      type,
      entry: [
        {
          resource: chestCtRequest('PLR-REUSE-5', { priority: 'routine' }),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
        {
          resource: chestCtRequest('PLR-REUSE-4', { priority }),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
      ],
    });

    const batch = await postFhir(adapter, '/fhir', bundle('batch', 'stat'));
    expect(batch.status).toBe(200);
    const entries = batch.body.entry as Array<{ response: { status: string; outcome?: Json } }>;
    expect(entries.map((e) => e.response.status)).toEqual(['201 Created', '409 Conflict']);
    const issue = (entries[1]!.response.outcome!.issue as Json[])[0]!;
    expect(issue).toMatchObject({
      code: 'conflict',
      expression: ['Bundle.entry[1].resource.identifier'],
    });
    expect(issue.diagnostics).toContain(`PUT /fhir/ServiceRequest/${id}`);
    expect(await ordersUnder('PLR-REUSE-4')).toEqual([{ id, priority: 'routine' }]);

    const tx = await postFhir(adapter, '/fhir', {
      ...bundle('transaction', 'stat'),
      identifier: { system: 'urn:example', value: 'tx-reuse-4' },
    });
    expect(tx.status).toBe(409);
    expect(tx.body.resourceType).toBe('OperationOutcome');
    expect((tx.body.issue as Json[])[0]).toMatchObject({
      code: 'conflict',
      expression: ['Bundle.entry[1].resource.identifier'],
    });
    expect(await ordersUnder('PLR-REUSE-4')).toEqual([{ id, priority: 'routine' }]);

    // the same request in a batch again: the order it made
    const same = await postFhir(adapter, '/fhir', bundle('batch', 'routine'));
    expect(
      (same.body.entry as Array<{ response: { status: string; location?: string } }>)[1]!.response,
    ).toEqual({ status: '200 OK', location: `ServiceRequest/${id}` });
  });

  /** A conditional create: POST /fhir/ServiceRequest with If-None-Exist `header`. */
  const createIfNoneExist = (header: string, body: Json) =>
    fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
        'if-none-exist': header,
      },
      body: JSON.stringify(body),
    });

  it('a conditional create (If-None-Exist) keeps R4 http.html#ccreate: the match, 200, as the sender asked', async () => {
    const sr = chestCtRequest('PLR-REUSE-2', { priority: 'routine' });
    const header = 'identifier=urn:oid:2.16.840.1.113883.3.999.1|PLR-REUSE-2';
    const send = (body: Json) => createIfNoneExist(header, body);
    const first = await send(sr);
    expect(first.status).toBe(201);
    const id = ((await first.json()) as Json).id;
    const second = await send(chestCtRequest('PLR-REUSE-2', { priority: 'stat' }));
    expect(second.status).toBe(200);
    expect(((await second.json()) as Json).id).toBe(id);
  });
  it('If-None-Exist with two identifier parameters is AND (R4 search.html): a mismatch on either is no match; a comma (OR) is refused 400', async () => {
    const placer = 'urn:oid:2.16.840.1.113883.3.999.1';
    const acsn = 'urn:oid:2.16.840.1.113883.3.999.2';
    const withAccession = (value: string, accession: string, priority = 'routine') =>
      chestCtRequest(value, {
        priority,
        identifier: [
          {
            type: {
              coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'PLAC' }],
            },
            system: placer,
            value,
          },
          {
            type: {
              coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'ACSN' }],
            },
            system: acsn,
            value: accession,
          },
        ],
      });
    const send = createIfNoneExist;
    const both = `identifier=${placer}|PLR-AND-1&identifier=${acsn}|ACC-AND-1`;
    const first = await send(both, withAccession('PLR-AND-1', 'ACC-AND-1'));
    expect(first.status).toBe(201);
    const id = ((await first.json()) as Json).id;
    // Both identifiers match the order: the match, 200 (as with one).
    const again = await send(both, withAccession('PLR-AND-1', 'ACC-AND-1', 'stat'));
    expect(again.status).toBe(200);
    expect(((await again.json()) as Json).id).toBe(id);
    // The same placer number, another accession: the order under PLR-AND-1 does not carry
    // ACC-AND-2, so the search matches nothing. Before, only the first parameter was read and
    // this was answered 200 with the PLR-AND-1/ACC-AND-1 order. A create cannot make a second
    // order under one placer number: 409, nothing made.
    const other = await send(
      `identifier=${placer}|PLR-AND-1&identifier=${acsn}|ACC-AND-2`,
      withAccession('PLR-AND-1', 'ACC-AND-2'),
    );
    expect(other.status).toBe(409);
    const conflict = (await other.json()) as Json;
    expect(conflict.resourceType).toBe('OperationOutcome');
    expect(JSON.stringify(conflict)).toContain('ACC-AND-2');
    expect(
      (
        await db.query(
          `SELECT request->>'accessionNumber' AS a FROM orders WHERE placer_order_number = 'PLR-AND-1'`,
        )
      ).rows,
    ).toHaveLength(1);
    // The second parameter names an identifier this request does not carry: 400, as the first.
    const notCarried = await send(
      `identifier=${placer}|PLR-AND-3&identifier=${acsn}|ACC-OTHER`,
      withAccession('PLR-AND-3', 'ACC-AND-3'),
    );
    expect(notCarried.status).toBe(400);
    // A comma is OR (R4 search.html#combining): not supported, said as such (400), not read as
    // one value `PLR-AND-4,urn:…|PLR-AND-5`.
    const or = await send(
      `identifier=${placer}|PLR-AND-4,${placer}|PLR-AND-5`,
      withAccession('PLR-AND-4', 'ACC-AND-4'),
    );
    expect(or.status).toBe(400);
    const orOutcome = (await or.json()) as Json;
    expect(JSON.stringify(orOutcome)).toMatch(/comma|OR/);
    // An escaped comma (`\,`) is part of the value.
    const escaped = await send(
      `identifier=${placer}|PLR-AND-6\\,7`,
      withAccession('PLR-AND-6,7', 'ACC-AND-6'),
    );
    expect(escaped.status).toBe(201);
  });
  it("If-None-Exist (AND) is checked against the sender's own order, not another sender's request under the same placer identifier", async () => {
    const placer = 'urn:oid:2.16.840.1.113883.3.999.1';
    const acsn = 'urn:oid:2.16.840.1.113883.3.999.2';
    const typed = (code: string, system: string, value: string) => ({
      type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code }] },
      system,
      value,
    });
    const order = (accession: string) =>
      chestCtRequest('PLR-AND-X', {
        identifier: [typed('PLAC', placer, 'PLR-AND-X'), typed('ACSN', acsn, accession)],
      });
    const mine = await createIfNoneExist(
      `identifier=${placer}|PLR-AND-X&identifier=${acsn}|ACC-X-1`,
      order('ACC-X-1'),
    );
    expect(mine.status).toBe(201);
    const id = ((await mine.json()) as Json).id as string;
    // Another client's order under the same placer identifier (its own numbering overlaps),
    // with another accession: its own order, served after ours.
    const theirs = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${OTHER_SENDER}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(order('ACC-X-2')),
    });
    expect(theirs.status).toBe(201);
    // Our order does not carry ACC-X-2: the AND matches nothing of ours. Before, the check was
    // made against the newest request under the placer identifier (the other sender's), found
    // it was not our order, was skipped, and this was answered 200 with our ACC-X-1 order.
    const other = await createIfNoneExist(
      `identifier=${placer}|PLR-AND-X&identifier=${acsn}|ACC-X-2`,
      order('ACC-X-2'),
    );
    expect(other.status).toBe(409);
    expect(JSON.stringify(await other.json())).toContain('ACC-X-2');
    // Ours again, both identifiers: the match.
    const again = await createIfNoneExist(
      `identifier=${placer}|PLR-AND-X&identifier=${acsn}|ACC-X-1`,
      order('ACC-X-1'),
    );
    expect(again.status).toBe(200);
    expect(((await again.json()) as Json).id).toBe(id);
  });
  it("a request resent (re-serialised) after another sender used the same placer identifier is still the sender's own order: 200, single POST and batch", async () => {
    const asOther = (body: Json) =>
      fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${OTHER_SENDER}`,
          'content-type': 'application/fhir+json',
        },
        body: JSON.stringify(body),
      });
    const batch = (sr: Json, id: string) => ({
      resourceType: 'Bundle',
      id,
      type: 'batch',
      entry: [{ resource: sr, request: { method: 'POST', url: 'ServiceRequest' } }],
    });
    for (const [placer, viaBatch] of [
      ['PLR-OVERLAP-1', false],
      ['PLR-OVERLAP-2', true],
    ] as const) {
      const sr = chestCtRequest(placer, { priority: 'routine' });
      const made = viaBatch
        ? await postFhir(adapter, '/fhir', batch(sr, `${placer}-a`))
        : await postFhir(adapter, '/fhir/ServiceRequest', sr);
      expect(made.status).toBe(viaBatch ? 200 : 201);
      const [mine] = await ordersUnder(placer);
      // the other sender's own order under the same number, served after ours
      expect((await asOther(chestCtRequest(placer, { priority: 'stat' }))).status).toBe(201);
      // ours again, its keys in another order (the sender's server re-serialised it)
      const again: Json = Object.fromEntries(Object.entries(sr).reverse());
      if (viaBatch) {
        const resent = await postFhir(adapter, '/fhir', batch(again, `${placer}-b`));
        const entry = (resent.body.entry as Array<{ response: { status: string } }>)[0]!;
        // Before: 409 "made from other content", compared with the other sender's request.
        expect(entry.response.status).toBe('200 OK');
      } else {
        const resent = await postFhir(adapter, '/fhir/ServiceRequest', again);
        expect({ status: resent.status, id: resent.body.id }).toEqual({
          status: 200,
          id: mine!.id,
        });
      }
    }
  });
});
