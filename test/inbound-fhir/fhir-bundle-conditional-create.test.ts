import type { Client as PgClient } from 'pg';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, postFhir, type Json } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * A Bundle entry's conditional create (`entry.request.ifNoneExist`, R4 bundle.html,
 * http.html#ccreate and #trules) is the same search as the REST If-None-Exist header: over the
 * ServiceRequests this sender made, by every identifier named (accession, filler, visit). No
 * match: created; one: 200 with it; several: 412 (the entry in a batch, the whole transaction).
 * Requests as a RIS-driven EHR sends them: accession (ACSN) and filler, no placer number.
 */
const V2 = 'http://terminology.hl7.org/CodeSystem/v2-0203';
const ACC = 'urn:oid:2.16.840.1.113883.3.999.2.1';
const FIL = 'urn:oid:2.16.840.1.113883.3.999.3';
const PLC = 'urn:oid:2.16.840.1.113883.3.999.1';

function exam(ids: Array<[string, string, string]>): Json {
  return chestCtRequest('unused', {
    identifier: ids.map(([code, system, value]) => ({
      type: { coding: [{ system: V2, code }] },
      system,
      value,
    })),
  });
}

function bundle(type: 'batch' | 'transaction', sr: Json, ifNoneExist: string): Json {
  return {
    resourceType: 'Bundle',
    type,
    entry: [
      {
        fullUrl: 'urn:uuid:5f1c2a9e-3b7d-4e8a-9c41-0d2e6b7a8f13',
        resource: sr,
        request: { method: 'POST', url: 'ServiceRequest', ifNoneExist },
      },
    ],
  };
}

describe('FHIR Bundle: an entry’s ifNoneExist is the If-None-Exist search', () => {
  let harness: FhirHarness | undefined;
  let db: PgClient;
  beforeAll(async () => {
    harness = await startFhirHarness();
    db = harness.db;
  });
  afterAll(() => harness?.close());

  const ordersUnder = async (accession: string) =>
    (
      await db.query<{ id: string }>(
        `SELECT id FROM orders WHERE request->>'accessionNumber' = $1 ORDER BY created_at`,
        [accession],
      )
    ).rows.map((r) => r.id);
  const entryOf = (body: Json) =>
    ((body.entry as Array<{ response: { status: string; location?: string; outcome?: Json } }>) ??
      [])[0]!.response;

  it('a batch entry conditional on the accession of an order made by a plain POST: 200 with it, no second order', async () => {
    const sr = exam([
      ['ACSN', ACC, 'BCC-ACC-1'],
      ['FILL', FIL, 'BCC-FIL-1'],
    ]);
    const made = await postFhir(harness!.adapter, '/fhir/ServiceRequest', sr);
    expect(made.status).toBe(201);
    const answer = await postFhir(
      harness!.adapter,
      '/fhir',
      bundle('batch', sr, `identifier=${ACC}|BCC-ACC-1&identifier=${FIL}|BCC-FIL-1`),
    );
    expect(answer.status).toBe(200);
    // was 422 "does not name the ServiceRequest's placer identifier"
    expect(entryOf(answer.body)).toMatchObject({
      status: '200 OK',
      location: `ServiceRequest/${made.body.id as string}`,
    });
    expect(await ordersUnder('BCC-ACC-1')).toEqual([made.body.id]);

    // no match: the entry creates the order
    const fresh = exam([['ACSN', ACC, 'BCC-ACC-2']]);
    const created = await postFhir(
      harness!.adapter,
      '/fhir',
      bundle('transaction', fresh, `identifier=${ACC}|BCC-ACC-2`),
    );
    expect(created.status).toBe(200);
    expect(entryOf(created.body).status).toBe('201 Created');
    // and the same transaction again is answered by the order it made
    const again = await postFhir(
      harness!.adapter,
      '/fhir',
      bundle('transaction', { ...fresh, priority: 'urgent' }, `identifier=${ACC}|BCC-ACC-2`),
    );
    expect(entryOf(again.body).status).toBe('200 OK');
    expect(await ordersUnder('BCC-ACC-2')).toHaveLength(1);
  });

  it('a search matching two orders (two procedures of one accession): 412 on that batch entry, the whole transaction 412; nothing ordered', async () => {
    for (const placer of ['BCC-PLC-3A', 'BCC-PLC-3B']) {
      const sr = exam([
        ['PLAC', PLC, placer],
        ['ACSN', ACC, 'BCC-ACC-3'],
      ]);
      expect((await postFhir(harness!.adapter, '/fhir/ServiceRequest', sr)).status).toBe(201);
    }
    const third = exam([
      ['PLAC', PLC, 'BCC-PLC-3C'],
      ['ACSN', ACC, 'BCC-ACC-3'],
    ]);
    const batch = await postFhir(
      harness!.adapter,
      '/fhir',
      bundle('batch', third, `identifier=${ACC}|BCC-ACC-3`),
    );
    expect(batch.status).toBe(200);
    const entry = entryOf(batch.body);
    expect(entry.status).toMatch(/^412/);
    expect(JSON.stringify(entry.outcome)).toContain('multiple-matches');
    const transaction = await postFhir(
      harness!.adapter,
      '/fhir',
      bundle('transaction', third, `identifier=${ACC}|BCC-ACC-3`),
    );
    expect(transaction.status).toBe(412);
    expect(await ordersUnder('BCC-ACC-3')).toHaveLength(2);
  });

  it('an ifNoneExist naming an identifier the entry does not carry: still 422 on it', async () => {
    const sr = exam([['ACSN', ACC, 'BCC-ACC-4']]);
    const answer = await postFhir(
      harness!.adapter,
      '/fhir',
      bundle('batch', sr, `identifier=${ACC}|SOMEONE-ELSES`),
    );
    expect(entryOf(answer.body).status).toMatch(/^422/);
    expect(await ordersUnder('BCC-ACC-4')).toEqual([]);
  });
});
