import type { Client as PgClient } from 'pg';
import { type TestAdapter } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import {
  chestCtRequestWithIdentifiers,
  fhirFixture,
  postFhir,
  type Json,
} from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * FHIR identifiers in composed (NFC) and decomposed (NFD) form are the same identifier
 * (src/domain/identifier-form.ts): an EHR's retry passed through an engine that decomposes
 * (`É` as `E` + U+0301) must find the order its first, composed, create made, by the
 * If-None-Exist search and by the placer number, over real HTTP and PostgreSQL.
 */
const ACC_SYSTEM = 'urn:oid:2.16.840.1.113883.3.999.2.1';
const PLAC_SYSTEM = 'urn:oid:2.16.840.1.113883.3.999.1';
const nfc = (s: string) => s.normalize('NFC');
const nfd = (s: string) => s.normalize('NFD');

const withIdentifiers = chestCtRequestWithIdentifiers;

/** POST /fhir/ServiceRequest, conditional when `ifNoneExist` is given. */
const post = (adapter: TestAdapter, body: Json, ifNoneExist?: string) =>
  postFhir(
    adapter,
    '/fhir/ServiceRequest',
    body,
    ifNoneExist ? { 'if-none-exist': ifNoneExist } : {},
  );

describe('FHIR identifiers in NFC and NFD name one order', () => {
  let adapter: TestAdapter;
  let db: PgClient;
  let harness: FhirHarness | undefined;
  beforeAll(async () => {
    harness = await startFhirHarness();
    ({ adapter, db } = harness);
  });
  afterAll(() => harness?.close());

  const orders = async () =>
    (
      await db.query<{ id: string; accession_number: string; placer_order_number: string }>(
        `SELECT id, accession_number, placer_order_number FROM orders ORDER BY created_at`,
      )
    ).rows;

  it('a conditional create on an accession sent NFD finds the order its NFC create made: 200, no second order', async () => {
    const accession = 'ÉCHO-ACC-1';
    const first = await post(adapter, withIdentifiers([['ACSN', ACC_SYSTEM, nfc(accession)]]));
    expect(first.status).toBe(201);
    const retry = await post(
      adapter,
      withIdentifiers([['ACSN', ACC_SYSTEM, nfd(accession)]]),
      `identifier=${encodeURIComponent(ACC_SYSTEM)}|${encodeURIComponent(nfd(accession))}`,
    );
    // Before: 201, a second order (and a second analysis) under the same accession.
    expect({ status: retry.status, id: retry.body.id }).toEqual({ status: 200, id: first.body.id });
    expect((await orders()).filter((o) => o.accession_number === nfc(accession))).toHaveLength(1);
  });

  it('a plain create repeated with its identifiers NFD is a resend of the same order, stored NFC', async () => {
    const placer = 'DP-ÉCHO-2';
    const body = (form: (s: string) => string) =>
      withIdentifiers([
        ['PLAC', PLAC_SYSTEM, form(placer)],
        ['ACSN', ACC_SYSTEM, form('ÉCHO-ACC-2')],
      ]);
    const first = await post(adapter, body(nfc));
    expect(first.status).toBe(201);
    const again = await post(adapter, body(nfd));
    // the same content (canonically equivalent text): a resend, answered as the first. Before:
    // 409 conflict "other content under the placer number", naming a PUT
    expect({ status: again.status, id: again.body.id }).toEqual({ status: 200, id: first.body.id });
    const under = (await orders()).filter((o) => o.placer_order_number === nfc(placer));
    expect(under.map((o) => o.id)).toEqual([first.body.id]);
  });

  it("a transaction's subject Patient?identifier=system|MRN written NFD finds the Bundle's Patient written NFC", async () => {
    const bundle = fhirFixture('us-core-chest-ct-transaction') as Json & {
      identifier: Json;
      entry: Array<Json & { resource: Json }>;
    };
    bundle.identifier = { system: 'http://hospital.example/bundles', value: 'tx-nfc-mrn-1' };
    const [patient, order, study] = bundle.entry;
    const mrn = (patient!.resource.identifier as Array<{ system: string; value: string }>)[0]!;
    mrn.value = nfc('MRN-É-1032702');
    const reference = `Patient?identifier=${encodeURIComponent(mrn.system)}|${encodeURIComponent(nfd(mrn.value))}`;
    order!.resource.subject = { reference };
    study!.resource.subject = { reference };
    const answer = await postFhir(adapter, '/fhir', bundle);
    // Before: 422 not-found "matches no entry of the Bundle" on ServiceRequest.subject.
    expect(answer.status).toBe(200);
    const created = (answer.body.entry as Array<{ response: { status: string }; resource?: Json }>)
      .map((e) => e.resource)
      .find((r) => r?.resourceType === 'ServiceRequest') as Json;
    const [row] = (
      await db.query<{ patient_id: string }>(`SELECT patient_id FROM orders WHERE id = $1`, [
        created.id,
      ])
    ).rows;
    expect(row!.patient_id).toBe(nfc('MRN-É-1032702'));
  });
});
