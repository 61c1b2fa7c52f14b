import type { Client as PgClient } from 'pg';
import type { TestAdapter } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { fhirFixture, postFhir, type Json } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * `urn:uuid:` references inside a transaction: a UUID is one value however its hex digits are
 * cased (RFC 4122 §3: "case insensitive on input"), and a URN's scheme and namespace are
 * case-insensitive too (RFC 8141 §3.1). Generators differ (.NET's Guid prints upper case, Java's
 * UUID lower), and an EHR's integration engine often builds the fullUrl with one and the
 * reference with the other.
 */

const PATIENT_URN = 'urn:uuid:5cbc121b-cd71-4428-b8b7-31e53eba8184';
const ORDER_URN = 'urn:uuid:61ebe359-bfdc-4613-8bf2-c5e300945f0a';
const STUDY_URN = 'urn:uuid:b2a4c6e8-0f1d-4e3a-9c5b-7d9e1f2a3b4c';

const upper = (urn: string) => `urn:uuid:${urn.slice('urn:uuid:'.length).toUpperCase()}`;

describe('transaction references by urn:uuid: are case-insensitive (RFC 4122)', () => {
  let harness: FhirHarness | undefined;
  let adapter: TestAdapter;
  let db: PgClient;
  beforeAll(async () => {
    harness = await startFhirHarness();
    ({ adapter, db } = harness);
  });
  afterAll(() => harness?.close());

  it('a fullUrl in upper case and references in lower (and URN:UUID:) name the same entries', async () => {
    const bundle = fhirFixture('us-core-chest-ct-transaction') as Json & {
      identifier: Json;
      entry: Array<Json & { resource: Json }>;
    };
    bundle.identifier = { system: 'http://hospital.example/bundles', value: 'tx-uuid-case-1' };
    const [patient, order, study] = bundle.entry;
    patient!.fullUrl = upper(PATIENT_URN); // the ServiceRequest names it in lower case
    study!.resource.subject = { reference: upper(PATIENT_URN) };
    order!.resource.supportingInfo = [
      { reference: `URN:UUID:${STUDY_URN.slice(9).toUpperCase()}` },
    ];
    // a second request of the same transaction, based on the first, naming it in upper case
    const second = structuredClone(order!) as Json & { resource: Json; request: Json };
    second.fullUrl = 'urn:uuid:0f6f3b5e-8f2a-4b8e-9d55-3a1c2e7b9d10';
    second.resource.identifier = [
      {
        type: {
          coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'PLAC' }],
        },
        system: 'http://hospital.smarthealthit.org/orders',
        value: 'ORD-2013-0508-78',
      },
    ];
    second.resource.basedOn = [{ reference: upper(ORDER_URN) }];
    delete second.resource.supportingInfo;
    second.request = {
      method: 'POST',
      url: 'ServiceRequest',
      ifNoneExist: 'identifier=http://hospital.smarthealthit.org/orders|ORD-2013-0508-78',
    };
    bundle.entry.push(second);

    const answer = await postFhir(adapter, '/fhir', bundle);
    expect(answer.status).toBe(200);
    const entries = answer.body.entry as Array<{ response: { status: string }; resource?: Json }>;
    expect(entries.map((e) => e.response.status)).toEqual([
      '200 OK',
      '201 Created',
      '200 OK',
      '201 Created',
    ]);
    const firstId = entries[1]!.resource!.id as string;
    const secondId = entries[3]!.resource!.id as string;

    const { rows } = await db.query<{ id: string; patient_id: string; study: string | null }>(
      `SELECT id, patient_id, study_instance_uid AS study FROM orders WHERE id = ANY($1) ORDER BY placer_order_number`,
      [[firstId, secondId]],
    );
    expect(rows).toEqual([
      {
        id: firstId,
        patient_id: '1032702',
        study: '2.16.124.113543.6003.1154777499.30246.19789.3503430045',
      },
      { id: secondId, patient_id: '1032702', study: null },
    ]);
    // the served requests name no urn:uuid: any more (R4 http.html#trules)
    const served = entries[3]!.resource as { basedOn: Array<{ reference: string }> };
    expect(served.basedOn).toEqual([{ reference: `ServiceRequest/${firstId}` }]);
    const first = entries[1]!.resource as { subject: Json; supportingInfo: Json[] };
    expect(first.subject).toMatchObject({ type: 'Patient' });
    expect(first.subject.reference).toBeUndefined();
    expect(first.supportingInfo[0]).toMatchObject({ type: 'ImagingStudy' });
  });

  it.each([
    ['the same fullUrl', (urn: string) => urn],
    ['a fullUrl that differs only in case', upper],
  ])(
    'two entries under %s are 422 on the second (bdl-7): the order was made for whichever came first',
    async (_what, spell) => {
      const bundle = fhirFixture('us-core-chest-ct-transaction') as Json & {
        identifier: Json;
        entry: Array<Json & { resource: Json }>;
      };
      bundle.identifier = { system: 'http://hospital.example/bundles', value: `tx-dup-${_what}` };
      const other = structuredClone(bundle.entry[0]!);
      other.fullUrl = spell(PATIENT_URN);
      other.resource.id = 'other';
      other.request = { method: 'PUT', url: 'Patient/other' };
      other.resource.identifier = [
        {
          type: {
            coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'MR' }],
          },
          system: 'http://hospital.smarthealthit.org',
          value: '99999',
        },
      ];
      bundle.entry.push(other);
      const before = await db.query(`SELECT count(*)::int AS n FROM orders`);

      const answer = await postFhir(adapter, '/fhir', bundle);
      expect(answer.status).toBe(422);
      expect(answer.body.resourceType).toBe('OperationOutcome');
      // the validator names the Bundle for one spelling; we name the entry for the other
      expect(answer.body.issue).toEqual([
        expect.objectContaining({
          severity: 'error',
          code: 'invariant',
          expression: [spell === upper ? 'Bundle.entry[3].fullUrl' : 'Bundle'],
        }),
      ]);
      expect(JSON.stringify(answer.body.issue)).toContain('bdl-7');
      expect((await db.query(`SELECT count(*)::int AS n FROM orders`)).rows).toEqual(before.rows);
      const kept = await db.query<{ outcome: string; raw: Buffer }>(
        `SELECT outcome, raw FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
      );
      expect(kept.rows[0]!.outcome).toBe('rejected');
      expect(JSON.parse(kept.rows[0]!.raw.toString('utf8'))).toEqual(bundle);
    },
  );
});
