import { readFileSync } from 'node:fs';
import { join } from 'node:path';

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
