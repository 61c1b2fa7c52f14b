import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

/**
 * Issue #20 item 1: FHIR modifier elements (R4 §1.11.5) and modifier extensions (§2.4.2) are
 * never ignored. The R4 spec's own negative request (`servicerequest-example-do-not-turn`,
 * doNotPerform: true) and the DICOM examples with modifiers added are refused with 422 on the
 * element, recorded, and never become orders — over real HTTP, with a real FHIR engine as
 * the EHR the references are read from.
 */
const FIXTURES = join(__dirname, '..', 'fixtures', 'fhir');
const fixture = (name: string) =>
  JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8')) as Record<string, unknown>;

describe('FHIR modifier elements are understood or refused, never dropped', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let db: PgClient;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(fixture('r4-patient-example-dicom') as never);
    await ehr.seed({
      resourceType: 'Practitioner',
      id: 'example',
      name: [{ family: 'Careful', given: ['Adam'], prefix: ['Dr'] }],
    } as never);
    adapter = await startTestAdapter({
      FHIR_SERVER_URL: ehr.baseUrl,
      JOBS_ENABLED: 'false',
      // So that the spec example is refused for its modifier, not for its SNOMED code.
      FHIR_UNKNOWN_PROCEDURE: 'default-products:brain-mr-volumetry',
    });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
  });

  async function post(body: unknown, path = '/fhir/ServiceRequest') {
    const res = await fetch(`${adapter.httpUrl}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(body),
    });
    return {
      status: res.status,
      outcome: (await res.json()) as {
        issue: Array<{ expression?: string[]; diagnostics?: string }>;
      },
    };
  }
  const orders = async () => Number((await db.query('SELECT count(*) AS n FROM orders')).rows[0].n);
  const refusals = async () =>
    Number(
      (await db.query(`SELECT count(*) AS n FROM inbound_messages WHERE outcome = 'rejected'`))
        .rows[0].n,
    );

  it('the R4 do-not-turn example (doNotPerform: true) is refused with 422 on ServiceRequest.doNotPerform, recorded, no order', async () => {
    const before = { orders: await orders(), refusals: await refusals() };
    const sr = fixture('r4-servicerequest-example-do-not-turn');
    delete sr.id;
    const { status, outcome } = await post(sr);
    expect(status).toBe(422);
    expect(outcome.issue.flatMap((i) => i.expression ?? [])).toContain(
      'ServiceRequest.doNotPerform',
    );
    expect(JSON.stringify(outcome)).toMatch(/NOT be performed/);
    expect(await orders()).toBe(before.orders);
    expect(await refusals()).toBe(before.refusals + 1);
  });

  it('doNotPerform: false is the default meaning, and is accepted', async () => {
    const sr = fixture('r4-servicerequest-example-di');
    delete sr.id;
    sr.identifier = [{ system: 'urn:oid:1.2.3.4', value: 'DNP-FALSE-1' }];
    sr.doNotPerform = false;
    expect((await post(sr)).status).toBe(201);
  });

  it('a modifierExtension on the ServiceRequest, or deep inside it, is refused naming where', async () => {
    const sr = fixture('r4-servicerequest-example-di');
    delete sr.id;
    sr.modifierExtension = [
      { url: 'http://example.org/fhir/StructureDefinition/hypothetical-only', valueBoolean: true },
    ];
    const top = await post(sr);
    expect(top.status).toBe(422);
    expect(top.outcome.issue.flatMap((i) => i.expression ?? [])).toContain(
      'ServiceRequest.modifierExtension',
    );

    const deep = fixture('r4-servicerequest-example-di');
    delete deep.id;
    deep.code = {
      ...(deep.code as object),
      modifierExtension: [{ url: 'http://example.org/negated', valueBoolean: true }],
    };
    // A CodeableConcept is not a BackboneElement: the R4 validator refuses it as structure,
    // and either way nothing is stored.
    expect((await post(deep)).status).toBeGreaterThanOrEqual(400);
  });

  it('implicitRules (a modifier of every resource) is refused, on the request or a contained resource', async () => {
    const before = await orders();
    const sr = fixture('r4-servicerequest-example-di');
    delete sr.id;
    sr.implicitRules = 'http://example.org/fhir/rules/local-radiology';
    const top = await post(sr);
    expect(top.status).toBe(422);
    expect(top.outcome.issue.flatMap((i) => i.expression ?? [])).toContain(
      'ServiceRequest.implicitRules',
    );

    const inner = fixture('r4-servicerequest-example-di');
    delete inner.id;
    inner.contained = [
      { ...fixture('r4-patient-example-dicom'), id: 'p', implicitRules: 'urn:local:rules' },
    ];
    inner.subject = { reference: '#p' };
    const contained = await post(inner);
    expect(contained.status).toBe(422);
    expect(contained.outcome.issue.flatMap((i) => i.expression ?? [])).toContain(
      'ServiceRequest.contained[0].implicitRules',
    );
    expect(await orders()).toBe(before);
  });

  it('a contained Patient that is inactive or replaced is refused on its modifier', async () => {
    const sr = fixture('r4-servicerequest-example-di');
    delete sr.id;
    const patient = fixture('r4-patient-example-dicom');
    sr.contained = [{ ...patient, id: 'p', active: false }];
    sr.subject = { reference: '#p' };
    const inactive = await post(sr);
    expect(inactive.status).toBe(422);
    expect(inactive.outcome.issue.flatMap((i) => i.expression ?? [])).toContain(
      'ServiceRequest.contained[0].active',
    );
  });

  it('a refusal on a resource beside the ServiceRequest names where that resource is: its Bundle entry, or the reference it was read through from the EHR', async () => {
    // The composed US Core transaction (test/fixtures/fhir/README.md): Patient at entry[0],
    // ServiceRequest at entry[1], the R4 ImagingStudy example at entry[2]. Before: every issue
    // was put under the ServiceRequest's entry, `Bundle.entry[1].resource.Patient.active` and
    // `Bundle.entry[1].resource.ImagingStudy.status`: elements that do not exist.
    const tx = fixture('us-core-chest-ct-transaction');
    const entries = tx.entry as Array<{ resource: Record<string, unknown> }>;
    entries[0]!.resource.active = false;
    entries[0]!.resource.modifierExtension = [
      { url: 'http://example.org/fhir/StructureDefinition/test-patient', valueBoolean: true },
    ];
    entries[2]!.resource.status = 'cancelled';
    const transaction = await post(tx, '/fhir');
    expect(transaction.status).toBe(422);
    expect(transaction.outcome.issue.flatMap((i) => i.expression ?? []).sort()).toEqual([
      'Bundle.entry[0].resource.active',
      'Bundle.entry[0].resource.modifierExtension',
      'Bundle.entry[2].resource.status',
    ]);

    // A batch: the entry's own 422 names the Study Instance UID on the ImagingStudy entry.
    const batch = fixture('us-core-chest-ct-transaction');
    batch.type = 'batch';
    const study = (batch.entry as Array<{ resource: Record<string, unknown> }>)[2]!.resource;
    (study.identifier as Array<{ value: string }>)[0]!.value = 'urn:oid:2.16.124.113543.6003.x';
    const res = await fetch(`${adapter.httpUrl}/fhir`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(batch),
    });
    const answer = (await res.json()) as {
      entry: Array<{
        response: { status: string; outcome?: { issue: Array<{ expression?: string[] }> } };
      }>;
    };
    expect(answer.entry[1]!.response.status).toMatch(/^422/);
    expect(answer.entry[1]!.response.outcome!.issue.flatMap((i) => i.expression ?? [])).toEqual([
      'Bundle.entry[2].resource.identifier[0].value',
    ]);

    // The Patient read from the EHR: the reference it was read through.
    await ehr.seed({ ...fixture('r4-patient-example-dicom'), id: 'gone', active: false } as never);
    const sr = fixture('r4-servicerequest-example-di');
    delete sr.id;
    sr.subject = { reference: 'Patient/gone' };
    const read = await post(sr);
    expect(read.status).toBe(422);
    expect(read.outcome.issue.flatMap((i) => i.expression ?? [])).toEqual([
      'ServiceRequest.subject.resolve().active',
    ]);
  });

  it('a modifier extension in a Subscription notification is refused as a whole', async () => {
    const bundle = fixture('backport-r4-notification-heartbeat');
    const status = (bundle.entry as Array<{ resource: Record<string, unknown> }>)[0]!.resource;
    (status.parameter as Array<Record<string, unknown>>)[0]!.modifierExtension = [
      { url: 'http://example.org/ignore-this-notification', valueBoolean: true },
    ];
    const res = await post(bundle, '/fhir/subscription-notifications');
    expect(res.status).toBe(422);
    expect(res.outcome.issue[0]!.expression?.[0]).toMatch(/modifierExtension$/);
  });
});
