import type { Client as PgClient } from 'pg';
import { TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import type { OrderRequest } from '../../src/domain/order-request';
import { toUpstreamMetadata } from '../../src/mappings/upstream-metadata';
import {
  chestCtRequest,
  expressions,
  fhirFixture,
  postFhir,
  type Json,
} from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * FHIR orders found answered or stored wrongly on a running adapter (a probe of the FHIR
 * front door): a batch whose one ServiceRequest breaks an R4 rule, identifiers that disagree
 * (accession numbers, If-None-Exist, subject), identifiers typed by text, primitive arrays
 * with nulls. A real FHIR engine plays the EHR, PostgreSQL stores.
 */

const V2_0203 = 'http://terminology.hl7.org/CodeSystem/v2-0203';

/** An identifier of HL7 table 0203 type `code`, as US Core and the Imaging IG write them. */
function typed(code: string, system: string, value: string): Json {
  return { type: { coding: [{ system: V2_0203, code }] }, system, value };
}

describe('hostile: FHIR orders as real senders write them', () => {
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

  it('a batch whose one ServiceRequest breaks an R4 rule: that entry is 422 on its element, the other entries are ordered', async () => {
    // An EHR's nightly batch (R4 http.html#brules: entries independent) of the R4 "di" example:
    // one order written with a local priority ("emergent", not in request-priority) and one
    // whose occurrence lacks its zone, as interface engines emit them.
    const broken = chestCtRequest('BATCH-R4-2', { priority: 'emergent' });
    const noZone = chestCtRequest('BATCH-R4-3', { occurrenceDateTime: '2013-05-08T09:33:27' });
    const res = await postFhir(adapter, '/fhir', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        {
          resource: chestCtRequest('BATCH-R4-1'),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
        { resource: broken, request: { method: 'POST', url: 'ServiceRequest' } },
        { resource: noZone, request: { method: 'POST', url: 'ServiceRequest' } },
        {
          resource: chestCtRequest('BATCH-R4-4'),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
      ],
    });
    expect(res.status).toBe(200);
    expect(res.body.type).toBe('batch-response');
    const entries = res.body.entry as Array<{ response: { status: string; outcome?: Json } }>;
    expect(entries.map((e) => e.response.status)).toEqual([
      '201 Created',
      '422 Unprocessable Entity',
      '422 Unprocessable Entity',
      '201 Created',
    ]);
    expect(expressions(entries[1]!.response.outcome)).toContain(
      'Bundle.entry[1].resource.priority',
    );
    expect(expressions(entries[2]!.response.outcome)).toEqual([
      'Bundle.entry[2].resource.occurrenceDateTime',
    ]);
    expect(await ordersWith('BATCH-R4-1')).toHaveLength(1);
    expect(await ordersWith('BATCH-R4-4')).toHaveLength(1);
    expect(await ordersWith('BATCH-R4-2')).toEqual([]);
    expect(await ordersWith('BATCH-R4-3')).toEqual([]);

    // A transaction is still all or nothing (R4 http.html#trules), naming the element.
    const txn = await postFhir(adapter, '/fhir', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          resource: chestCtRequest('TXN-R4-1'),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
        {
          resource: chestCtRequest('TXN-R4-2', { priority: 'emergent' }),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
      ],
    });
    expect(txn.status).toBe(422);
    expect(expressions(txn.body)).toContain('Bundle.entry[1].resource.priority');
    expect(await ordersWith('TXN-R4-1')).toEqual([]);

    // A batch's context entry that breaks a rule is still the whole batch's problem: the
    // orders that would use it cannot be told apart from those that would not.
    const patient = fhirFixture('r4-patient-example-dicom');
    const badContext = await postFhir(adapter, '/fhir', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        {
          fullUrl: 'urn:uuid:1f0c7b5e-3a57-4c8e-9b0d-2f5a9d6e1c01',
          resource: { ...patient, birthDate: '1974-02-30' },
          request: { method: 'PUT', url: 'Patient/dicom' },
        },
        {
          resource: chestCtRequest('BATCH-R4-5'),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
      ],
    });
    expect(badContext.status).toBe(422);
    expect(expressions(badContext.body)).toContain('Bundle.entry[0].resource.birthDate');
  });

  it('two accession numbers that differ, on the ServiceRequest or on the ImagingStudy it refers to: 422 on the second, nothing ordered', async () => {
    // A ServiceRequest with the RIS accession and a second ACSN identifier of another number
    // (the Imaging IG example's identifier shape, a second issuer's).
    const twoOnRequest = chestCtRequest('ACSN-TWO-1');
    (twoOnRequest.identifier as Json[]).push(
      typed('ACSN', 'http://hospital.example.org/accession', 'W12342398'),
      typed('ACSN', 'urn:oid:2.16.840.1.113883.3.999.7', 'RAD-55012'),
    );
    const res = await postFhir(adapter, '/fhir/ServiceRequest', twoOnRequest);
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
    expect((await postFhir(adapter, '/fhir/ServiceRequest', sameTwice)).status).toBe(201);

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
    const refused = await postFhir(adapter, '/fhir', txn);
    expect(refused.status).toBe(422);
    expect(expressions(refused.body)).toEqual(['Bundle.entry[2].resource.identifier[1].value']);
    expect(await ordersWith('ACSN-STUDY-1')).toEqual([]);

    // The study of the same exam: ordered with its Study Instance UID.
    (entries[2]!.resource.identifier as Json[])[1]!.value = 'W12342398';
    const ordered = await postFhir(adapter, '/fhir', txn);
    expect(ordered.status).toBe(200);
    expect(await ordersWith('ACSN-STUDY-1')).toEqual([
      {
        accession_number: 'W12342398',
        study_instance_uid: '2.16.124.113543.6003.1154777499.30246.19789.3503430045',
      },
    ]);
  });
  it('If-None-Exist naming an identifier the ServiceRequest does not carry (its requisition): 400 on the header, kept; the second order of the requisition is not answered with the first', async () => {
    // Two orders of one visit, as R4 ServiceRequest.requisition groups them (a chest CT and a
    // head MR under one requisition), each with its placer number; the EHR's interface puts
    // the requisition in If-None-Exist (R4 http.html#ccreate) instead of the placer number.
    const requisition = { system: 'urn:oid:2.16.840.1.113883.3.999.9', value: 'REQ-2013-0508' };
    const header = `identifier=${requisition.system}|${requisition.value}`;
    const send = (body: Json, ifNoneExist: string) =>
      fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
          'if-none-exist': ifNoneExist,
        },
        body: JSON.stringify(body),
      });
    for (const placer of ['REQ-ORDER-1', 'REQ-ORDER-2']) {
      const res = await send(chestCtRequest(placer, { requisition }), header);
      expect(res.status).toBe(400);
      const body = (await res.json()) as Json;
      expect(expressions(body)).toEqual(['If-None-Exist']);
      expect(JSON.stringify(body)).toMatch(/does not carry/);
      expect(await ordersWith(placer)).toEqual([]);
    }
    const kept = await db.query<{ outcome: string; response_code: string }>(
      `SELECT outcome, response_code FROM inbound_messages
        WHERE message_type = 'ServiceRequest create' ORDER BY received_at DESC LIMIT 2`,
    );
    expect(kept.rows).toEqual([
      { outcome: 'rejected', response_code: '400' },
      { outcome: 'rejected', response_code: '400' },
    ]);

    // Named by its placer identifier, each is its own order; a repeat is the same order.
    for (const placer of ['REQ-ORDER-1', 'REQ-ORDER-2']) {
      const byPlacer = `identifier=urn:oid:2.16.840.1.113883.3.999.1|${placer}`;
      expect((await send(chestCtRequest(placer, { requisition }), byPlacer)).status).toBe(201);
      expect((await send(chestCtRequest(placer, { requisition }), byPlacer)).status).toBe(200);
      expect(await ordersWith(placer)).toHaveLength(1);
    }
  });
  it('an Epic Patient whose identifiers are typed by text alone (CEID, EPI, MRN…): the order is known by the MRN, not the first', async () => {
    // The shape of Epic's Patient.Read (R4) answer (open.epic.com): every identifier typed
    // by `type.text` only, the enterprise and FHIR ids before the MRN, an SSN by OID.
    await harness!.ehr.seed({
      resourceType: 'Patient',
      id: 'eEpicShape0001',
      identifier: [
        {
          use: 'usual',
          type: { text: 'CEID' },
          system: 'urn:oid:1.2.840.114350.1.13.0.1.7.3.688884.100',
          value: 'FHRQX7TLC2ZRPBT',
        },
        {
          use: 'usual',
          type: { text: 'FHIR' },
          system: 'http://open.epic.com/FHIR/StructureDefinition/patient-dstu2-fhir-id',
          value: 'TnOZ.elPXC6zcBNFMcFA7A5KZbYxo2.4T-LylRk4GoW4B',
        },
        {
          use: 'usual',
          type: { text: 'EXTERNAL' },
          system: 'urn:oid:1.2.840.114350.1.13.0.1.7.2.698084',
          value: 'Z9001',
        },
        {
          use: 'usual',
          type: { text: 'MRN' },
          system: 'urn:oid:1.2.840.114350.1.13.0.1.7.5.737384.14',
          value: '203713',
        },
        { use: 'usual', system: 'urn:oid:2.16.840.1.113883.4.1', value: '000-00-0000' },
      ],
      active: true,
      name: [{ use: 'official', family: 'Lopez', given: ['Camila', 'Maria'] }],
      gender: 'female',
      birthDate: '1987-09-12',
    } as never);
    const res = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('EPIC-SHAPE-1', { subject: { reference: 'Patient/eEpicShape0001' } }),
    );
    expect(res.status).toBe(201);
    const [order] = (
      await db.query<{ patient_id: string; quirks: Array<{ code: string }> }>(
        `SELECT o.patient_id, m.quirks FROM orders o JOIN inbound_messages m ON m.id = o.inbound_message_id
          WHERE o.placer_order_number = 'EPIC-SHAPE-1'`,
      )
    ).rows;
    // Before: FHRQX7TLC2ZRPBT (the CEID), never the PACS's PatientID.
    expect(order!.patient_id).toBe('203713');
    expect(order!.quirks.map((q) => q.code)).toContain('fhir-identifier-type-text');
  });
  it('a subject given by reference and by an identifier the referenced Patient does not carry: 422 on subject.identifier, nothing ordered', async () => {
    // The R4 "di" example's subject (Patient/dicom: MINT1234 in http://nema.org/examples/patients)
    // with a logical identifier beside the reference, as interface engines add one.
    const subject = (value: string) => ({
      reference: 'Patient/dicom',
      identifier: { system: 'http://nema.org/examples/patients', value },
    });
    const agreeing = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('SUBJECT-BOTH-1', { subject: subject('MINT1234') }),
    );
    expect(agreeing.status).toBe(201);
    const other = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('SUBJECT-BOTH-2', { subject: subject('MINT5678') }),
    );
    expect(other.status).toBe(422);
    expect(expressions(other.body)).toEqual(['ServiceRequest.subject.identifier']);
    // The refusal names no record number (the answer is kept in the audit log).
    expect(JSON.stringify(other.body)).not.toMatch(/MINT/);
    expect(await ordersWith('SUBJECT-BOTH-2')).toEqual([]);
  });
  it("two contained resources under one id (the subject #p1 names both): 422 duplicate on the second id, nothing ordered, never the first one's patient", async () => {
    // An interface engine that merges two documents copies both contained Patients as `p1`;
    // `#p1` then names two patients. Before: 201, the order made for whichever came first.
    const patient = (family: string, mrn: string) => ({
      resourceType: 'Patient',
      id: 'p1',
      identifier: [{ system: 'urn:oid:1.2.36.146.595.217.0.1', value: mrn }],
      name: [{ family, given: ['Anna'] }],
      gender: 'female',
      birthDate: '1956-02-14',
    });
    const sr = chestCtRequest('CONT-DUP-1', {
      contained: [patient('SCHMIDT', 'MRN-1001'), patient('SCHMIDT-BERGER', 'MRN-2002')],
      subject: { reference: '#p1' },
    });
    const res = await postFhir(adapter, '/fhir/ServiceRequest', sr);
    expect(res.status).toBe(422);
    expect(expressions(res.body)).toEqual(['ServiceRequest.contained[1].id']);
    expect((res.body.issue as Json[])[0]).toMatchObject({ code: 'duplicate' });
    expect(await ordersWith('CONT-DUP-1')).toEqual([]);
    // In a Bundle entry, the path runs from the entry.
    const batch = await postFhir(adapter, '/fhir', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        {
          resource: chestCtRequest('CONT-DUP-2', {
            contained: [patient('SCHMIDT', 'MRN-1001'), patient('SCHMIDT-BERGER', 'MRN-2002')],
            subject: { reference: '#p1' },
          }),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
      ],
    });
    const entry = (batch.body.entry as Array<{ response: { status: string; outcome?: Json } }>)[0]!;
    expect(entry.response.status).toBe('422 Unprocessable Entity');
    expect(expressions(entry.response.outcome)).toEqual([
      'Bundle.entry[0].resource.contained[1].id',
    ]);
    expect(await ordersWith('CONT-DUP-2')).toEqual([]);
  });

  it("a reference that names two different entries of the Bundle (two Patients PUT as Patient/x): 422 on the subject, nothing ordered, never the first entry's patient", async () => {
    const patient = (family: string, mrn: string, fullUrl?: string) => ({
      ...(fullUrl ? { fullUrl } : {}),
      resource: {
        resourceType: 'Patient',
        id: 'x',
        identifier: [{ system: 'urn:oid:1.2.36.146.595.217.0.1', value: mrn }],
        name: [{ family, given: ['Anna'] }],
        gender: 'female',
        birthDate: '1956-02-14',
      },
      request: { method: 'PUT', url: 'Patient/x' },
    });
    const order = (placer: string) => ({
      resource: chestCtRequest(placer, { subject: { reference: 'Patient/x' } }),
      request: { method: 'POST', url: 'ServiceRequest' },
    });
    // A batch from an interface engine merging two feeds, both numbering their Patients x;
    // a transaction whose entries name two servers. Before: 201 for the first Patient.
    for (const [type, placer, entries] of [
      ['batch', 'SIB-DUP-1', [patient('SCHMIDT', 'MRN-1001'), patient('BERGER', 'MRN-2002')]],
      [
        'transaction',
        'SIB-DUP-2',
        [
          patient('SCHMIDT', 'MRN-1001', 'http://a.example/fhir/Patient/x'),
          patient('BERGER', 'MRN-2002', 'http://b.example/fhir/Patient/x'),
        ],
      ],
    ] as const) {
      const res = await postFhir(adapter, '/fhir', {
        resourceType: 'Bundle',
        type,
        entry: [...entries, order(placer)],
      });
      const outcome =
        type === 'batch'
          ? (res.body.entry as Array<{ response: { status: string; outcome?: Json } }>)[2]!.response
              .outcome
          : res.body;
      expect({ type, at: expressions(outcome) }).toEqual({
        type,
        at: ['Bundle.entry[2].resource.subject'],
      });
      expect(JSON.stringify(outcome)).toMatch(/Bundle\.entry\[0\].*Bundle\.entry\[1\]/);
      expect(await ordersWith(placer)).toEqual([]);
    }
  });

  it('a given name written as null with its extension (R4 JSON, _given): stored without the null, so the order can be placed', async () => {
    // R4 json.html#primitive: a repetition with no value but an extension is `null` in the
    // value array, its extension at the same index of `_given` (here data-absent-reason on
    // the first given name of the R4 DICOM example patient, contained).
    const patient = {
      resourceType: 'Patient',
      id: 'p1',
      identifier: [{ system: 'http://nema.org/examples/patients', value: 'MINT1234' }],
      name: [
        {
          family: 'MINT_TEST',
          given: [null, 'Mint'],
          _given: [
            {
              extension: [
                {
                  url: 'http://hl7.org/fhir/StructureDefinition/data-absent-reason',
                  valueCode: 'masked',
                },
              ],
            },
            null,
          ],
          prefix: [null],
          _prefix: [{ extension: [{ url: 'http://example.org/fhir/x', valueString: 'x' }] }],
        },
      ],
      gender: 'male',
    };
    const res = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('GIVEN-NULL-1', { contained: [patient], subject: { reference: '#p1' } }),
    );
    expect(res.status).toBe(201);
    const [order] = (
      await db.query<{ request: OrderRequest }>(
        `SELECT request FROM orders WHERE placer_order_number = 'GIVEN-NULL-1'`,
      )
    ).rows;
    // Before: {"given": [null, "Mint"], "prefix": ""}; the upstream PN builder threw on the
    // null and order.place-upstream failed at each of its attempts.
    expect(order!.request.patient?.name).toEqual({ family: 'MINT_TEST', given: ['Mint'] });
    // What the place job sends upstream is built from the stored request.
    expect(() => toUpstreamMetadata(order!.request)).not.toThrow();
  });
  it("a POST under a placer number that already names another patient's order: 409, kept, the first order untouched; the same patient's resend and a conditional create keep their answers; in a batch that entry's 409, a transaction's whole", async () => {
    // Two departments' EHR feeds whose order numbering overlaps (the R4 "di" example with a
    // contained Patient each, as a RIS-less clinic sends them): the second patient's order was
    // answered 200 with the first patient's, and never made.
    const patient = (id: string, mrn: string, family: string): Json => ({
      resourceType: 'Patient',
      id,
      identifier: [typed('MR', 'urn:oid:2.16.840.1.113883.3.999.2', mrn)],
      name: [{ family, given: ['Alex'] }],
    });
    const order = (mrn: string, family: string) =>
      chestCtRequest('PLACER-REUSED-1', {
        contained: [patient('p', mrn, family)],
        subject: { reference: '#p' },
      });
    expect(
      (await postFhir(adapter, '/fhir/ServiceRequest', order('MRN-1001', 'Okafor'))).status,
    ).toBe(201);
    const other = await postFhir(adapter, '/fhir/ServiceRequest', order('MRN-2002', 'Lindqvist'));
    expect(other.status).toBe(409);
    expect((other.body.issue as Array<{ code: string }>)[0]!.code).toBe('duplicate');
    expect(expressions(other.body)).toEqual(['ServiceRequest.identifier']);
    // no record number in the answer
    expect(JSON.stringify(other.body)).not.toContain('MRN-');
    const rows = (
      await db.query<{ patient_id: string }>(
        `SELECT patient_id FROM orders WHERE placer_order_number = 'PLACER-REUSED-1'`,
      )
    ).rows;
    expect(rows).toEqual([{ patient_id: 'MRN-1001' }]);
    const kept = (
      await db.query<{ outcome: string; response_code: string }>(
        `SELECT outcome, response_code FROM inbound_messages
          WHERE transport = 'fhir-rest' AND position(convert_to('Lindqvist', 'UTF8') IN raw) > 0`,
      )
    ).rows;
    expect(kept).toEqual([{ outcome: 'rejected', response_code: '409' }]);
    // the same patient's resend is still answered with the first order
    const resend = await postFhir(adapter, '/fhir/ServiceRequest', order('MRN-1001', 'Okafor'));
    expect(resend.status).toBe(200);

    // In a batch: that entry's 409, the other entries ordered; an entry asked with
    // If-None-Exist gets R4's answer, the match (200). In a transaction: the whole 409.
    const entry = (resource: Json, ifNoneExist?: string) => ({
      resource,
      request: { method: 'POST', url: 'ServiceRequest', ...(ifNoneExist ? { ifNoneExist } : {}) },
    });
    const batch = await postFhir(adapter, '/fhir', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        entry(order('MRN-3003', 'Haddad')),
        entry(
          order('MRN-3003', 'Haddad'),
          'identifier=urn:oid:2.16.840.1.113883.3.999.1|PLACER-REUSED-1',
        ),
        entry(chestCtRequest('PLACER-FRESH-1')),
      ],
    });
    const statuses = (
      batch.body.entry as Array<{ response: { status: string; outcome?: Json } }>
    ).map((e) => e.response.status);
    expect(statuses).toEqual(['409 Conflict', '200 OK', '201 Created']);
    expect(
      expressions(
        (batch.body.entry as Array<{ response: { outcome?: Json } }>)[0]!.response.outcome,
      ),
    ).toEqual(['Bundle.entry[0].resource.identifier']);
    const transaction = await postFhir(adapter, '/fhir', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [entry(chestCtRequest('PLACER-FRESH-2')), entry(order('MRN-3003', 'Haddad'))],
    });
    expect(transaction.status).toBe(409);
    expect(expressions(transaction.body)).toEqual(['Bundle.entry[1].resource.identifier']);
    expect(await ordersWith('PLACER-FRESH-2')).toEqual([]);
    expect(
      (
        await db.query<{ patient_id: string }>(
          `SELECT patient_id FROM orders WHERE placer_order_number = 'PLACER-REUSED-1'`,
        )
      ).rows,
    ).toEqual([{ patient_id: 'MRN-1001' }]);
  });

  it("a transaction PUT Patient/dicom whose Patient lacks that id: 422 on the entry, never an order for the EHR's Patient/dicom", async () => {
    // The US Core chest CT transaction (PUT of its Patient, the ServiceRequest naming it),
    // the Patient entry as an engine writes it: the URL's id, none in the resource. The
    // ServiceRequest refers to Patient/dicom, which the EHR also has (MINT1234).
    const txn = fhirFixture('us-core-chest-ct-transaction');
    // Its own Bundle.identifier: the fixture's is another test's message (a resend of it).
    txn.identifier = { system: 'http://hospital.smarthealthit.org/bundles', value: 'tx-put-no-id' };
    const entries = txn.entry as Array<{ resource: Json; request: Json; fullUrl?: string }>;
    const patient = entries[0]!.resource;
    delete patient.id;
    entries[0]!.request.url = 'Patient/dicom';
    const sr = entries[1]!.resource;
    sr.subject = { reference: 'Patient/dicom' };
    (sr.identifier as Json[])[0]!.value = 'PUT-NO-ID-1';
    entries[1]!.request.ifNoneExist =
      'identifier=http://hospital.smarthealthit.org/orders|PUT-NO-ID-1';
    const res = await postFhir(adapter, '/fhir', txn);
    // Before: 200, the order made for the EHR's MINT1234, not the Patient the transaction sent.
    expect(res.status).toBe(422);
    expect(expressions(res.body)).toEqual(['Bundle.entry[0].resource.id']);
    expect(await ordersWith('PUT-NO-ID-1')).toEqual([]);

    // With the URL's id, the transaction's Patient is the order's.
    patient.id = 'dicom';
    expect((await postFhir(adapter, '/fhir', txn)).status).toBe(200);
    const [order] = (
      await db.query<{ patient_id: string }>(
        `SELECT patient_id FROM orders WHERE placer_order_number = 'PUT-NO-ID-1'`,
      )
    ).rows;
    expect(order!.patient_id).toBe('1032702');
  });
});
