import type { Client as PgClient } from 'pg';
import { TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, fhirFixture, type Json } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * FHIR orders found answered wrongly on a running adapter (probe of the FHIR front door,
 * session "fhirin"): a batch whose one ServiceRequest breaks an R4 rule, and an order whose
 * accession numbers disagree. A real FHIR engine plays the EHR, PostgreSQL stores.
 */

async function post(adapter: TestAdapter, path: string, body: Json) {
  const res = await fetch(`${adapter.httpUrl}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${TEST_TOKENS.sender}`,
      'content-type': 'application/fhir+json',
    },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Json };
}

function expressions(outcome: Json | undefined): string[] {
  return ((outcome?.issue as Array<{ expression?: string[] }>) ?? []).flatMap(
    (i) => i.expression ?? [],
  );
}

const V2_0203 = 'http://terminology.hl7.org/CodeSystem/v2-0203';

/** An identifier of HL7 table 0203 type `code`, as US Core and the Imaging IG write them. */
function typed(code: string, system: string, value: string): Json {
  return { type: { coding: [{ system: V2_0203, code }] }, system, value };
}

describe('hostile: FHIR orders, batch entries and accession numbers', () => {
  let adapter: TestAdapter;
  let db: PgClient;
  let harness: FhirHarness | undefined;
  beforeAll(async () => {
    harness = await startFhirHarness();
    ({ adapter, db } = harness);
  });
  afterAll(() => harness?.close());

  const ordersWith = async (placer: string) =>
    (
      await db.query<{ accession_number: string | null; study_instance_uid: string | null }>(
        `SELECT accession_number, study_instance_uid FROM orders WHERE placer_order_number = $1`,
        [placer],
      )
    ).rows;

  it('two accession numbers that differ, on the ServiceRequest or on the ImagingStudy it refers to: 422 on the second, nothing ordered', async () => {
    // A ServiceRequest with the RIS accession and a second ACSN identifier of another number
    // (the Imaging IG example's identifier shape, a second issuer's).
    const twoOnRequest = chestCtRequest('ACSN-TWO-1');
    (twoOnRequest.identifier as Json[]).push(
      typed('ACSN', 'http://hospital.example.org/accession', 'W12342398'),
      typed('ACSN', 'urn:oid:2.16.840.1.113883.3.999.7', 'RAD-55012'),
    );
    const res = await post(adapter, '/fhir/ServiceRequest', twoOnRequest);
    expect(res.status).toBe(422);
    expect(expressions(res.body)).toEqual(['ServiceRequest.identifier[2].value']);
    expect(JSON.stringify(res.body)).toMatch(/differs from ServiceRequest\.identifier\[1\]\.value/);
    expect(await ordersWith('ACSN-TWO-1')).toEqual([]);

    // The same number under two issuers is one accession: ordered.
    const sameTwice = chestCtRequest('ACSN-TWO-2');
    (sameTwice.identifier as Json[]).push(
      typed('ACSN', 'http://hospital.example.org/accession', 'W12342398'),
      typed('ACSN', 'urn:oid:2.16.840.1.113883.3.999.7', 'W12342398'),
    );
    expect((await post(adapter, '/fhir/ServiceRequest', sameTwice)).status).toBe(201);

    // The US Core chest CT transaction, its ImagingStudy (the R4 example) carrying an ACSN
    // identifier as R4 imagingstudy.html describes, of another exam: its Study Instance UID
    // was taken for the order under the ServiceRequest's accession.
    const txn = fhirFixture('us-core-chest-ct-transaction');
    const entries = txn.entry as Array<{ resource: Json; request: Json }>;
    const sr = entries[1]!.resource;
    (sr.identifier as Json[])[0]!.value = 'ACSN-STUDY-1';
    entries[1]!.request.ifNoneExist =
      'identifier=http://hospital.smarthealthit.org/orders|ACSN-STUDY-1';
    (entries[2]!.resource.identifier as Json[]).push(typed('ACSN', 'urn:oid:1.2.3', 'W99990001'));
    const refused = await post(adapter, '/fhir', txn);
    expect(refused.status).toBe(422);
    expect(expressions(refused.body)).toEqual(['Bundle.entry[2].resource.identifier[1].value']);
    expect(await ordersWith('ACSN-STUDY-1')).toEqual([]);

    // The study of the same exam: ordered with its Study Instance UID.
    (entries[2]!.resource.identifier as Json[])[1]!.value = 'W12342398';
    const ordered = await post(adapter, '/fhir', txn);
    expect(ordered.status).toBe(200);
    expect(await ordersWith('ACSN-STUDY-1')).toEqual([
      {
        accession_number: 'W12342398',
        study_instance_uid: '2.16.124.113543.6003.1154777499.30246.19789.3503430045',
      },
    ]);
  });
});
