import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TEST_TOKENS } from './adapter';

/** A JSON object as the FHIR tests build and edit them. */
export type Json = Record<string, unknown>;

const FIXTURES = join(__dirname, '..', 'fixtures', 'fhir');

/** A FHIR fixture (test/fixtures/fhir/<name>.json), parsed afresh: each caller may edit it. */
export function fhirFixture(name: string): Json {
  return JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8')) as Json;
}

/** The R4 spec's ServiceRequest "di" as an EHR sends it: our id dropped, a typed placer number. */
export function chestCtRequest(placer: string, changes: Json = {}): Json {
  const sr = fhirFixture('r4-servicerequest-example-di');
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

/**
 * The chest CT request carrying exactly `ids` (each `[v2-0203 type code, system, value]`), as
 * RIS-driven and HL7v2-to-FHIR-converted orders carry them (an ACSN, a PLAC, a FILL).
 */
export function chestCtRequestWithIdentifiers(
  ids: Array<[code: string, system: string, value: string]>,
): Json {
  return chestCtRequest('unused', {
    identifier: ids.map(([code, system, value]) => ({
      type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code }] },
      system,
      value,
    })),
  });
}

/** POSTs a FHIR body (JSON, or text as it is) as the sender: status, Location and the answer. */
export async function postFhir(
  adapter: { httpUrl: string },
  path: string,
  body: string | Json,
  headers: Record<string, string> = {},
): Promise<{ status: number; location: string | null; body: Json }> {
  const res = await fetch(`${adapter.httpUrl}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${TEST_TOKENS.sender}`,
      'content-type': 'application/fhir+json',
      ...headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return {
    status: res.status,
    location: res.headers.get('location'),
    body: (await res.json()) as Json,
  };
}

/** The expressions of an OperationOutcome's issues, in order. */
export function expressions(outcome: Json | undefined): string[] {
  return ((outcome?.issue as Array<{ expression?: string[] }>) ?? []).flatMap(
    (i) => i.expression ?? [],
  );
}
