import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Patient } from '@medplum/fhirtypes';
import { Client as PgClient } from 'pg';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

jest.setTimeout(120_000);

/**
 * A second attack pass on the FHIR front door (published resources and hostile shapes): every
 * input here was answered wrongly by a running adapter. Each gets its status and the element it
 * is about, and is kept for the audit log. A real FHIR engine plays the EHR.
 */

const FIXTURES = join(__dirname, '..', 'fixtures', 'fhir');
type Json = Record<string, unknown>;
const fixture = (name: string) =>
  JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8')) as Json;

/** The R4 spec's ServiceRequest "di" as an EHR sends it: our id dropped, a typed placer number. */
function chestCt(placer: string, changes: Json = {}): Json {
  const sr = fixture('r4-servicerequest-example-di');
  delete sr.id;
  return {
    ...sr,
    identifier: [
      {
        type: {
          coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'PLAC' }],
        },
        system: 'urn:oid:2.16.840.1.113883.3.999.1',
        value: placer,
      },
    ],
    ...changes,
  };
}

async function call(
  adapter: TestAdapter,
  method: string,
  path: string,
  body?: Json,
  headers: Record<string, string> = {},
) {
  const res = await fetch(`${adapter.httpUrl}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${TEST_TOKENS.sender}`,
      ...(body ? { 'content-type': 'application/fhir+json' } : {}),
      ...headers,
    },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return {
    status: res.status,
    headers: res.headers,
    body: (text ? JSON.parse(text) : {}) as Json,
  };
}

function expressions(outcome: Json): string[] {
  return ((outcome.issue as Array<{ expression?: string[] }>) ?? []).flatMap(
    (i) => i.expression ?? [],
  );
}

describe('hostile: the FHIR front door, second pass', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let db: PgClient;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(fixture('r4-patient-example-dicom') as unknown as Patient);
    adapter = await startTestAdapter({ FHIR_SERVER_URL: ehr.baseUrl, JOBS_ENABLED: 'false' });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
  });

  const lastMessage = async () =>
    (
      await db.query<{ outcome: string; response_code: string }>(
        `SELECT outcome, response_code FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
      )
    ).rows[0]!;
  const ordersWith = async (placer: string) =>
    (await db.query(`SELECT id FROM orders WHERE placer_order_number = $1`, [placer])).rows;

  it('a dateTime without seconds or zone, or a resource id that is not a FHIR id: 422 on the element, kept', async () => {
    for (const [placer, changes, where] of [
      ['DT-1', { occurrenceDateTime: '2013-05-08T09' }, 'ServiceRequest.occurrenceDateTime'],
      ['DT-2', { authoredOn: '2013-05-08T09:33:27' }, 'ServiceRequest.authoredOn'],
      ['DT-3', { occurrenceDateTime: '2013-05-08+01:00' }, 'ServiceRequest.occurrenceDateTime'],
      ['ID-1', { id: 'bad id!' }, 'ServiceRequest.id'],
    ] as const) {
      const res = await call(adapter, 'POST', '/fhir/ServiceRequest', chestCt(placer, changes));
      expect(res.status).toBe(422);
      expect(expressions(res.body)).toEqual([where]);
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
      expect(await ordersWith(placer)).toEqual([]);
    }
    const ok = await call(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCt('DT-OK', { occurrenceDateTime: '2013-05-08T09:33:27.1882432-05:00' }),
    );
    expect(ok.status).toBe(201);
  });
});
