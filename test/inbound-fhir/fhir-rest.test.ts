import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'fhir-kit-client';
import { Client as PgClient } from 'pg';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

const FIXTURES = join(__dirname, '..', 'fixtures', 'fhir');
const fixture = (name: string) => JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8'));

interface HttpError {
  response?: {
    status: number;
    data: {
      resourceType: string;
      issue: Array<{ code: string; expression?: string[]; diagnostics?: string }>;
    };
  };
}

async function failure(p: Promise<unknown>): Promise<NonNullable<HttpError['response']>> {
  try {
    await p;
  } catch (error) {
    const r = (error as HttpError).response;
    if (r) return r;
    throw error;
  }
  throw new Error('expected the request to fail');
}

/** The spec's practitioner-example (R4): Dr. Adam Careful. */
const PRACTITIONER_EXAMPLE = {
  resourceType: 'Practitioner',
  id: 'example',
  identifier: [{ system: 'http://www.acme.org/practitioners', value: '23' }],
  active: true,
  name: [{ family: 'Careful', given: ['Adam'], prefix: ['Dr'] }],
};

describe('FHIR R4 orders in over HTTP (fhir-kit-client → adapter; EHR reads from a real FHIR engine)', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let fhir: Client;
  let db: PgClient;
  let base: string;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(fixture('r4-patient-example-dicom'));
    await ehr.seed(PRACTITIONER_EXAMPLE as never);
    adapter = await startTestAdapter({ FHIR_SERVER_URL: ehr.baseUrl, JOBS_ENABLED: 'false' });
    base = `${adapter.httpUrl}/fhir`;
    fhir = new Client({ baseUrl: base, bearerToken: TEST_TOKENS.sender });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
  });

  const rows = async (sql: string, params: unknown[] = []) => (await db.query(sql, params)).rows;

  it('serves its CapabilityStatement without credentials', async () => {
    const res = await fetch(`${base}/metadata`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/fhir\+json/);
    const cs = (await res.json()) as {
      resourceType: string;
      fhirVersion: string;
      rest: Array<{ resource: Array<{ type: string; conditionalCreate?: boolean }> }>;
    };
    expect(cs.resourceType).toBe('CapabilityStatement');
    expect(cs.fhirVersion).toBe('4.0.1');
    expect(cs.rest[0]!.resource.map((r) => r.type)).toEqual(['ServiceRequest', 'Task']);
    expect(cs.rest[0]!.resource[0]!.conditionalCreate).toBe(true);
  });

  it('creates the spec example "di" conditionally; a repeat returns the same resource and no second order', async () => {
    const sr = fixture('r4-servicerequest-example-di');
    const ifNoneExist = 'identifier=http://example.org/ehr/orders|DI-2013-0508';
    const created = (await fhir.create({
      resourceType: 'ServiceRequest',
      body: sr,
      options: { headers: { 'If-None-Exist': ifNoneExist } },
    })) as unknown as { id: string; meta: { versionId: string }; code: unknown };
    const raw = Client.httpFor(created as never).response!;
    expect(raw.status).toBe(201);
    expect(raw.headers.get('etag')).toBe('W/"1"');
    expect(raw.headers.get('location')).toBe(`${base}/ServiceRequest/${created.id}/_history/1`);
    expect(created.meta.versionId).toBe('1');
    expect(created.code).toEqual(sr.code);

    const [order] = await rows(`SELECT * FROM orders WHERE id = $1`, [created.id]);
    expect(order).toMatchObject({ source: 'fhir', state: 'received', patient_id: 'MINT1234' });
    expect(order.request).toMatchObject({
      action: 'create',
      patient: {
        identifiers: [{ system: 'http://nema.org/examples/patients', value: 'MINT1234' }],
        name: { family: 'MINT_TEST' },
        sex: 'male',
      },
      procedure: { code: '24627-2', system: 'http://loinc.org', display: 'Chest CT' },
      products: ['lung-nodule-ct'],
      requestedAt: '2013-05-08T02:33:27.000Z',
      reasonForStudy: [{ display: 'Check for metastatic disease' }],
      // Practitioner/example was read from the EHR's FHIR server.
      orderingProvider: {
        identifier: { system: 'http://www.acme.org/practitioners', value: '23' },
        name: { family: 'Careful', given: ['Adam'], prefix: 'Dr' },
      },
    });
    const [message] = await rows(`SELECT * FROM inbound_messages WHERE id = $1`, [
      order.inbound_message_id,
    ]);
    expect(message).toMatchObject({
      transport: 'fhir-rest',
      outcome: 'accepted',
      response_code: '201',
    });
    expect(JSON.parse(message.raw.toString('utf8'))).toEqual(sr);
    expect(ehr.requests.some((r) => r.url.endsWith('/Patient/dicom'))).toBe(true);

    const again = (await fhir.create({
      resourceType: 'ServiceRequest',
      body: sr,
      options: { headers: { 'If-None-Exist': ifNoneExist } },
    })) as unknown as { id: string };
    expect(Client.httpFor(again as never).response!.status).toBe(200);
    expect(again.id).toBe(created.id);
    expect(await rows(`SELECT id FROM orders WHERE patient_id = 'MINT1234'`)).toHaveLength(1);
    const [dup] = await rows(
      `SELECT count(*)::int AS n FROM inbound_messages WHERE outcome = 'duplicate' AND transport = 'fhir-rest'`,
    );
    expect(dup.n).toBe(1);

    // read, and the Task an EHR that pulls follows
    const read = (await fhir.read({
      resourceType: 'ServiceRequest',
      id: created.id,
    })) as unknown as {
      id: string;
    };
    expect(read.id).toBe(created.id);
    const tasks = (await fhir.search({
      resourceType: 'Task',
      searchParams: { 'based-on': `ServiceRequest/${created.id}` },
    })) as unknown as {
      type: string;
      total: number;
      entry: Array<{
        resource: {
          id: string;
          status: string;
          basedOn: unknown;
          businessStatus: { text: string };
        };
      }>;
    };
    expect(tasks.type).toBe('searchset');
    expect(tasks.total).toBe(1);
    expect(tasks.entry[0]!.resource).toMatchObject({
      id: created.id,
      status: 'received',
      basedOn: [{ reference: `ServiceRequest/${created.id}` }],
      businessStatus: { text: 'received' },
    });
    const task = (await fhir.read({ resourceType: 'Task', id: created.id })) as unknown as {
      meta: { versionId: string };
    };
    expect(Client.httpFor(task as never).response!.headers.get('etag')).toBe(
      `W/"${task.meta.versionId}"`,
    );
  });

  it('PUT with status revoked cancels upstream; a stale If-Match is refused with 412', async () => {
    const sr = {
      ...fixture('r4-servicerequest-example-di'),
      identifier: [{ system: 'http://example.org/ehr/orders', value: 'DI-REVOKE-1' }],
    };
    const created = (await fhir.create({
      resourceType: 'ServiceRequest',
      body: sr,
    })) as unknown as {
      id: string;
    };
    const stale = await failure(
      fhir.update({
        resourceType: 'ServiceRequest',
        id: created.id,
        body: { ...sr, id: created.id, status: 'revoked' },
        options: { headers: { 'If-Match': 'W/"7"' } },
      }),
    );
    expect(stale.status).toBe(412);
    expect(stale.data.resourceType).toBe('OperationOutcome');

    // a change (priority) goes upstream as metadata
    const changed = (await fhir.update({
      resourceType: 'ServiceRequest',
      id: created.id,
      body: { ...sr, id: created.id, priority: 'stat' },
      options: { headers: { 'If-Match': 'W/"1"' } },
    })) as unknown as { meta: { versionId: string } };
    expect(changed.meta.versionId).toBe('2');
    expect(
      await rows(
        `SELECT 1 FROM job_outbox WHERE task = 'order.update-metadata' AND payload->>'orderId' = $1
         UNION ALL
         SELECT 1 FROM graphile_worker.jobs WHERE task_identifier = 'order.update-metadata' AND key = $2`,
        [created.id, `metadata:${created.id}`],
      ),
    ).toHaveLength(1);

    const revoked = (await fhir.update({
      resourceType: 'ServiceRequest',
      id: created.id,
      body: { ...sr, id: created.id, status: 'revoked', priority: 'stat' },
      options: { headers: { 'If-Match': 'W/"2"' } },
    })) as unknown as { status: string; meta: { versionId: string } };
    expect(revoked).toMatchObject({ status: 'revoked', meta: { versionId: '3' } });
    const [order] = await rows(`SELECT cancel_requested_at, version FROM orders WHERE id = $1`, [
      created.id,
    ]);
    expect(order.cancel_requested_at).not.toBeNull();
    // the cancel job, in the job outbox or already relayed into the queue
    expect(
      await rows(
        `SELECT 1 FROM job_outbox WHERE task = 'order.cancel-upstream' AND payload->>'orderId' = $1
         UNION ALL
         SELECT 1 FROM graphile_worker.jobs WHERE task_identifier = 'order.cancel-upstream' AND key = $2`,
        [created.id, `cancel:${created.id}`],
      ),
    ).toHaveLength(1);
    const current = (await fhir.read({
      resourceType: 'ServiceRequest',
      id: created.id,
    })) as unknown as {
      status: string;
    };
    expect(current.status).toBe('revoked');

    // once the order has ended, the EHR's own resource still moves on (status completed) but
    // the order does not change: 200 with the new version, the change recorded as not applied
    await rows(`UPDATE orders SET state = 'delivered' WHERE id = $1`, [created.id]);
    const completed = (await fhir.update({
      resourceType: 'ServiceRequest',
      id: created.id,
      body: { ...sr, id: created.id, status: 'completed', priority: 'routine' },
    })) as unknown as { status: string; meta: { versionId: string } };
    expect(completed).toMatchObject({ status: 'completed', meta: { versionId: '4' } });
    const [ended] = await rows(`SELECT state, request FROM orders WHERE id = $1`, [created.id]);
    expect(ended.state).toBe('delivered');
    expect(ended.request.priority).toBe('stat');
    expect(
      await rows(
        `SELECT 1 FROM audit_events WHERE order_id = $1 AND kind = 'order.change-refused'`,
        [created.id],
      ),
    ).toHaveLength(1);

    const unknown = await failure(
      fhir.update({
        resourceType: 'ServiceRequest',
        id: 'not-here',
        body: { ...sr, id: 'not-here' },
      }),
    );
    expect(unknown.status).toBe(405);
  });

  it("a revoke refused 409 (the order already completed) stands on the order's timeline as order.cancel-refused, as the HL7 cancel answered UC does, without PHI (was: nothing on the timeline)", async () => {
    const sr = {
      ...fixture('r4-servicerequest-example-di'),
      identifier: [{ system: 'http://example.org/ehr/orders', value: 'DI-REVOKE-LATE-1' }],
    };
    const created = (await fhir.create({
      resourceType: 'ServiceRequest',
      body: sr,
    })) as unknown as { id: string };
    await rows(`UPDATE orders SET state = 'delivered' WHERE id = $1`, [created.id]);
    const refused = await failure(
      fhir.update({
        resourceType: 'ServiceRequest',
        id: created.id,
        body: { ...sr, id: created.id, status: 'revoked' },
      }),
    );
    expect(refused.status).toBe(409);
    const events = await rows(
      `SELECT severity, summary, detail FROM audit_events WHERE order_id = $1 AND kind = 'order.cancel-refused'`,
      [created.id],
    );
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      severity: 'warning',
      summary: 'cancel refused: the order is already delivered',
      detail: { sourceRef: `ServiceRequest/${created.id}`, state: 'delivered' },
    });
    const [order] = await rows(
      `SELECT patient_id, accession_number, cancel_requested_at FROM orders WHERE id = $1`,
      [created.id],
    );
    expect(order.cancel_requested_at).toBeNull();
    const written = JSON.stringify(events[0]);
    for (const phi of [order.patient_id, order.accession_number, 'DI-REVOKE-LATE-1']) {
      if (phi) expect(written).not.toContain(phi);
    }
  });

  it('a refused revoke and its order.cancel-refused are one transaction: when the event cannot be written, the refusal is not stored either (was: the refused message committed without the event)', async () => {
    const sr = {
      ...fixture('r4-servicerequest-example-di'),
      identifier: [{ system: 'http://example.org/ehr/orders', value: 'DI-REVOKE-ATOMIC-1' }],
    };
    const created = (await fhir.create({
      resourceType: 'ServiceRequest',
      body: sr,
    })) as unknown as { id: string };
    await rows(`UPDATE orders SET state = 'delivered' WHERE id = $1`, [created.id]);
    // A real failure of the second write (as a crash between the two would leave it): the
    // database refuses this one event kind for this order.
    await rows(`
      CREATE FUNCTION refuse_cancel_refused() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.kind = 'order.cancel-refused' AND NEW.order_id::text = '${created.id}' THEN
          RAISE EXCEPTION 'test: audit write fails';
        END IF;
        RETURN NEW;
      END $$`);
    await rows(
      `CREATE TRIGGER refuse_cancel_refused BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION refuse_cancel_refused()`,
    );
    const before = await rows(
      `SELECT count(*)::int AS n FROM inbound_messages WHERE outcome = 'rejected'`,
    );
    try {
      const failed = await failure(
        fhir.update({
          resourceType: 'ServiceRequest',
          id: created.id,
          body: { ...sr, id: created.id, status: 'revoked' },
        }),
      );
      expect(failed.status).toBeGreaterThanOrEqual(500);
    } finally {
      await rows(`DROP TRIGGER refuse_cancel_refused ON audit_events`);
      await rows(`DROP FUNCTION refuse_cancel_refused()`);
    }
    const after = await rows(
      `SELECT count(*)::int AS n FROM inbound_messages WHERE outcome = 'rejected'`,
    );
    // neither without the other: no refusal stored that the order's timeline does not carry
    expect(after[0].n).toBe(before[0].n);
    expect(
      await rows(
        `SELECT 1 FROM audit_events WHERE order_id = $1 AND kind = 'order.cancel-refused'`,
        [created.id],
      ),
    ).toHaveLength(0);

    // the sender's resend, with the database well again, is refused and recorded with its event
    const refused = await failure(
      fhir.update({
        resourceType: 'ServiceRequest',
        id: created.id,
        body: { ...sr, id: created.id, status: 'revoked' },
      }),
    );
    expect(refused.status).toBe(409);
    const [event] = await rows(
      `SELECT e.inbound_message_id, m.outcome FROM audit_events e JOIN inbound_messages m ON m.id = e.inbound_message_id
        WHERE e.order_id = $1 AND e.kind = 'order.cancel-refused'`,
      [created.id],
    );
    expect(event).toMatchObject({ outcome: 'rejected' });
  });

  it('takes a transaction Bundle with the US Core Patient and an ImagingStudy; a resend changes nothing', async () => {
    const bundle = fixture('us-core-chest-ct-transaction');
    const response = (await fhir.transaction({ body: bundle })) as unknown as {
      type: string;
      entry: Array<{
        response: { status: string; location?: string; etag?: string };
        resource?: { id: string };
      }>;
    };
    expect(response.type).toBe('transaction-response');
    expect(response.entry.map((e) => e.response.status)).toEqual([
      '200 OK',
      '201 Created',
      '200 OK',
    ]);
    const id = response.entry[1]!.resource!.id;
    expect(response.entry[1]!.response).toMatchObject({
      location: `ServiceRequest/${id}/_history/1`,
      etag: 'W/"1"',
    });
    const [order] = await rows(`SELECT * FROM orders WHERE id = $1`, [id]);
    expect(order).toMatchObject({
      accession_number: 'W12342398',
      placer_order_number: 'ORD-2013-0508-77',
      placer_group_number: 'REQ-77',
      patient_id: '1032702',
      study_instance_uid: '2.16.124.113543.6003.1154777499.30246.19789.3503430045',
    });
    // The US Core example has no gender element (only the us-core-birthsex extension).
    expect(order.request.patient.sex).toBeUndefined();
    expect(order.request).toMatchObject({
      // name[0] is `old` (ended 2020-07-22): the current name is used
      patient: {
        name: { family: 'Baxter', given: ['Amy', 'V.'], suffix: 'PharmD' },
        birthDate: '1987-02-20',
      },
      priority: 'urgent',
      modality: 'CT',
      reasonForStudy: [
        { code: '363358000', system: 'http://snomed.info/sct', display: 'Malignant tumor of lung' },
      ],
      notes: ['Prior CT 2012 available in PACS'],
      products: ['lung-nodule-ct'],
    });
    const lineage = (
      await rows(
        `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'mapping.applied'`,
        [id],
      )
    )[0].detail.lineage as Array<{ target: string; source: string }>;
    expect(lineage).toEqual(
      expect.arrayContaining([
        {
          target: 'studyInstanceUid',
          source: 'Bundle.entry[2] ImagingStudy.identifier[0].value',
          value: '2.16.124.113543.6003.1154777499.30246.19789.3503430045',
          ruleId: 'fhir.order.study-uid',
        },
        expect.objectContaining({
          target: 'accessionNumber',
          source: 'ServiceRequest.identifier[1].value',
        }),
      ]),
    );
    const quirks = (
      await rows(`SELECT quirks FROM inbound_messages WHERE id = $1`, [order.inbound_message_id])
    )[0].quirks;
    expect(quirks).toEqual(
      expect.arrayContaining([expect.objectContaining({ code: 'fhir-name-not-first' })]),
    );

    const again = (await fhir.transaction({ body: bundle })) as unknown as {
      entry: Array<{ resource?: { id: string } }>;
    };
    expect(again.entry[1]!.resource!.id).toBe(id);
    expect(
      await rows(`SELECT 1 FROM orders WHERE placer_order_number = 'ORD-2013-0508-77'`),
    ).toHaveLength(1);
  });

  it("a transaction's urn:uuid references are replaced in the ServiceRequests we keep: another created request by its location, a context entry by its identifier", async () => {
    // The composed US Core transaction, plus a second ServiceRequest (a CT of the abdomen)
    // basedOn the first by its urn:uuid (R4 bundle.html#references). R4 http.html#trules: the
    // server replaces references to an entry's fullUrl. Before: the served ServiceRequest named
    // subject urn:uuid:5cbc… and supportingInfo urn:uuid:b2a4…, resolvable nowhere.
    const bundle = fixture('us-core-chest-ct-transaction');
    bundle.identifier.value = 'tx-urn-rewrite-1';
    const first = bundle.entry[1];
    first.request.ifNoneExist = 'identifier=http://hospital.smarthealthit.org/orders|ORD-URN-1';
    first.resource.identifier = [
      { ...first.resource.identifier[0], value: 'ORD-URN-1' },
      { ...first.resource.identifier[1], value: 'ACC-URN-1' },
    ];
    const second = structuredClone(first);
    second.fullUrl = 'urn:uuid:0d7a3e5c-4a52-4c1f-9d0e-6b1f5e2a9c11';
    second.request.ifNoneExist = 'identifier=http://hospital.smarthealthit.org/orders|ORD-URN-2';
    second.resource.identifier = [
      { ...first.resource.identifier[0], value: 'ORD-URN-2' },
      { ...first.resource.identifier[1], value: 'ACC-URN-2' },
    ];
    second.resource.basedOn = [{ reference: first.fullUrl }];
    delete second.resource.supportingInfo;
    bundle.entry.push(second);
    const response = (await fhir.transaction({ body: bundle })) as unknown as {
      entry: Array<{ response: { status: string }; resource?: { id: string } }>;
    };
    expect(response.entry.map((e) => e.response.status)).toEqual([
      '200 OK',
      '201 Created',
      '200 OK',
      '201 Created',
    ]);
    const [a, b] = [response.entry[1]!.resource!.id, response.entry[3]!.resource!.id];
    const served = async (id: string) =>
      (await fhir.read({ resourceType: 'ServiceRequest', id })) as unknown as Record<
        string,
        unknown
      >;
    const one = await served(a);
    expect(JSON.stringify(one)).not.toContain('urn:uuid:');
    expect(one.subject).toEqual({
      type: 'Patient',
      identifier: expect.objectContaining({
        system: 'http://hospital.smarthealthit.org',
        value: '1032702',
      }),
    });
    expect(one.supportingInfo).toEqual([
      {
        type: 'ImagingStudy',
        identifier: expect.objectContaining({
          system: 'urn:dicom:uid',
          value: 'urn:oid:2.16.124.113543.6003.1154777499.30246.19789.3503430045',
        }),
      },
    ]);
    expect((await served(b)).basedOn).toEqual([{ reference: `ServiceRequest/${a}` }]);
  });

  it('a batch answers each entry: one order created, one refused with its OperationOutcome', async () => {
    const di = fixture('r4-servicerequest-example-di');
    const patient = fixture('r4-patient-example-dicom');
    const batch = {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        {
          fullUrl: 'urn:uuid:0c3b6b0e-5d7e-4a55-9d0c-3f4b1a2c9e01',
          resource: { ...patient, id: undefined },
          request: { method: 'POST', url: 'Patient' },
        },
        {
          resource: {
            ...di,
            id: undefined,
            identifier: [{ system: 'http://example.org/ehr/orders', value: 'BATCH-OK' }],
            subject: { reference: 'urn:uuid:0c3b6b0e-5d7e-4a55-9d0c-3f4b1a2c9e01' },
          },
          request: { method: 'POST', url: 'ServiceRequest' },
        },
        {
          resource: {
            ...di,
            id: undefined,
            identifier: [{ system: 'http://example.org/ehr/orders', value: 'BATCH-BAD' }],
            subject: { reference: 'urn:uuid:0c3b6b0e-5d7e-4a55-9d0c-3f4b1a2c9e01' },
            code: { text: 'Whole body MRI' },
          },
          request: { method: 'POST', url: 'ServiceRequest' },
        },
      ],
    };
    const response = (await fhir.batch({ body: batch })) as unknown as {
      type: string;
      entry: Array<{
        response: { status: string; outcome?: { issue: Array<{ expression: string[] }> } };
      }>;
    };
    expect(response.type).toBe('batch-response');
    expect(response.entry.map((e) => e.response.status)).toEqual([
      '200 OK',
      '201 Created',
      '422 Unprocessable Entity',
    ]);
    expect(response.entry[2]!.response.outcome!.issue[0]!.expression).toEqual([
      'Bundle.entry[2].resource.code',
    ]);
    expect(await rows(`SELECT 1 FROM orders WHERE placer_order_number = 'BATCH-OK'`)).toHaveLength(
      1,
    );
    expect(await rows(`SELECT 1 FROM orders WHERE placer_order_number = 'BATCH-BAD'`)).toHaveLength(
      0,
    );
  });

  it('resolves a contained Patient (no EHR read)', async () => {
    const di = fixture('r4-servicerequest-example-di');
    const patient = fixture('r4-patient-example-dicom');
    ehr.requests.length = 0;
    const created = (await fhir.create({
      resourceType: 'ServiceRequest',
      body: {
        ...di,
        contained: [
          {
            ...patient,
            id: 'p1',
            identifier: [{ system: 'urn:oid:1.2.36.146.595.217.0.1', value: 'CONTAINED-7' }],
          },
        ],
        identifier: [{ system: 'http://example.org/ehr/orders', value: 'CONTAINED-1' }],
        subject: { reference: '#p1' },
        requester: { display: 'Dr. Adam Careful' },
      },
    })) as unknown as { id: string };
    const [order] = await rows(`SELECT patient_id FROM orders WHERE id = $1`, [created.id]);
    expect(order.patient_id).toBe('CONTAINED-7');
    expect(ehr.requests).toHaveLength(0);
  });

  it('refuses a contained resource nothing references (R4 dom-3) with 422 naming its id; one referring to its container (`#`) is kept', async () => {
    // An EHR export carried the ordering Practitioner contained but named the requester by
    // display only: before, 201, the contained resource stored and served back, a resource a
    // validating server (HAPI, Firely) refuses and HAPI's parser drops silently.
    const di = fixture('r4-servicerequest-example-di');
    const patient = {
      ...fixture('r4-patient-example-dicom'),
      id: 'p1',
      identifier: [{ system: 'urn:oid:1.2.36.146.595.217.0.1', value: 'DOM3-7' }],
    };
    const body = (value: string, contained: unknown[]) => ({
      ...di,
      contained: [patient, ...contained],
      identifier: [{ system: 'http://example.org/ehr/orders', value }],
      subject: { reference: '#p1' },
      requester: { display: 'Dr. Adam Careful' },
    });
    const orphan = { ...PRACTITIONER_EXAMPLE, id: 'orphan-dr' };
    const refused = await failure(
      fhir.create({ resourceType: 'ServiceRequest', body: body('DOM3-1', [orphan]) }),
    );
    expect(refused.status).toBe(422);
    expect(refused.data.resourceType).toBe('OperationOutcome');
    const issue = refused.data.issue.find((i) =>
      (i.expression ?? []).includes('ServiceRequest.contained[1]'),
    );
    expect(issue?.code).toBe('invariant');
    expect(issue?.diagnostics).toContain('orphan-dr');
    expect(await rows(`SELECT 1 FROM orders WHERE placer_order_number = 'DOM3-1'`)).toHaveLength(0);

    // The same Practitioner named by the requester (`#orphan-dr`) is referenced: accepted.
    const named = { ...body('DOM3-2', [orphan]), requester: { reference: '#orphan-dr' } };
    await fhir.create({ resourceType: 'ServiceRequest', body: named });
    // A contained Provenance whose target is its container (`#`) is referenced by that (dom-3).
    const provenance = {
      resourceType: 'Provenance',
      id: 'prov',
      target: [{ reference: '#' }],
      recorded: '2026-11-25T09:00:00Z',
      agent: [{ who: { display: 'EHR order entry' } }],
    };
    await fhir.create({ resourceType: 'ServiceRequest', body: body('DOM3-3', [provenance]) });
    expect(
      await rows(
        `SELECT placer_order_number FROM orders WHERE placer_order_number IN ('DOM3-2', 'DOM3-3') ORDER BY 1`,
      ),
    ).toEqual([{ placer_order_number: 'DOM3-2' }, { placer_order_number: 'DOM3-3' }]);
  });

  it('refuses invalid resources with 422 and issues an integrator can act on; the raw body is kept', async () => {
    const ig = fixture('imaging-ig-servicerequest-example');
    const refused = await failure(fhir.create({ resourceType: 'ServiceRequest', body: ig }));
    expect(refused.status).toBe(422);
    const expressions = refused.data.issue.flatMap((i) => i.expression ?? []);
    // The IG example's subject is a profile name, not a Patient; it has no code to choose AI products by.
    expect(expressions).toEqual(
      expect.arrayContaining(['ServiceRequest.subject', 'ServiceRequest.code']),
    );
    const [kept] = await rows(
      `SELECT raw, response_code, outcome FROM inbound_messages WHERE outcome = 'rejected' ORDER BY received_at DESC LIMIT 1`,
    );
    expect(kept.response_code).toBe('422');
    expect(JSON.parse(kept.raw.toString('utf8'))).toEqual(ig);

    const di = fixture('r4-servicerequest-example-di');
    const badStatus = await failure(
      fhir.create({
        resourceType: 'ServiceRequest',
        body: { ...di, status: 'ordered', intent: undefined },
      }),
    );
    expect(badStatus.status).toBe(422);
    expect(badStatus.data.issue.flatMap((i) => i.expression ?? [])).toEqual(
      expect.arrayContaining(['ServiceRequest.status', 'ServiceRequest.intent']),
    );
    const unknownCode = await failure(
      fhir.create({
        resourceType: 'ServiceRequest',
        body: { ...di, code: { coding: [{ system: 'http://loinc.org', code: '30746-2' }] } },
      }),
    );
    expect(unknownCode.status).toBe(422);
    expect(unknownCode.data.issue[0]).toMatchObject({
      code: 'code-invalid',
      expression: ['ServiceRequest.code.coding'],
    });

    const notJson = await fetch(`${base}/ServiceRequest`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: '{"resourceType": "ServiceRequest", ',
    });
    expect(notJson.status).toBe(400);
    const outcome = (await notJson.json()) as {
      resourceType: string;
      issue: Array<{ code: string; expression: string[] }>;
    };
    expect(outcome).toMatchObject({
      resourceType: 'OperationOutcome',
      issue: [{ code: 'structure', expression: ['(body)'] }],
    });
  });

  it('answers 404/405/406/415 for what it does not support, as OperationOutcomes', async () => {
    const auth = { authorization: `Bearer ${TEST_TOKENS.sender}` };
    const del = await fetch(`${base}/ServiceRequest/abc`, { method: 'DELETE', headers: auth });
    expect(del.status).toBe(405);
    expect(del.headers.get('allow')).toBe('GET, HEAD, PUT');
    expect(((await del.json()) as { resourceType: string }).resourceType).toBe('OperationOutcome');
    const obs = await fetch(`${base}/Observation?code=1234-5`, { headers: auth });
    expect(obs.status).toBe(404);
    expect((await obs.json()) as object).toMatchObject({ issue: [{ code: 'not-supported' }] });
    expect(
      (
        await fetch(`${base}/ServiceRequest/00000000-0000-4000-8000-000000000000`, {
          headers: auth,
        })
      ).status,
    ).toBe(404);
    const xml = await fetch(`${base}/metadata?_format=xml`);
    expect(xml.status).toBe(406);
    const text = await fetch(`${base}/ServiceRequest`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'text/plain' },
      body: 'hello',
    });
    expect(text.status).toBe(415);
  });

  it('honours _format, Accept and Prefer', async () => {
    const auth = { authorization: `Bearer ${TEST_TOKENS.sender}` };
    const json = await fetch(`${base}/metadata?_format=application/json`);
    expect(json.headers.get('content-type')).toMatch(/^application\/json/);
    // `_format=application/fhir+json` typed into a URL unescaped: a query decodes `+` as a
    // space (application/x-www-form-urlencoded). It was 406, and a create under it no order.
    for (const format of [
      'application/fhir+json',
      'application/fhir%2Bjson',
      'application/json+fhir',
    ]) {
      const read = await fetch(`${base}/metadata?_format=${format}`);
      expect({ format, status: read.status, type: read.headers.get('content-type') }).toEqual({
        format,
        status: 200,
        type: expect.stringMatching(/^application\/fhir\+json/),
      });
    }
    const plus = await fetch(`${base}/ServiceRequest?_format=application/fhir+json`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/fhir+json' },
      body: JSON.stringify({
        ...fixture('r4-servicerequest-example-di'),
        identifier: [{ system: 'http://example.org/ehr/orders', value: 'DI-FORMAT-PLUS-1' }],
      }),
    });
    expect(plus.status).toBe(201);
    expect((await fetch(`${base}/metadata?_format=application/fhir+xml`)).status).toBe(406);
    // q=0 is "not acceptable" (RFC 9110 §12.4.2), not one more choice: JSON refused so, with
    // XML asked for, was answered JSON 200 (a client that reads only what it asked for failed)
    for (const [accept, status, type] of [
      ['application/fhir+json;q=0, application/fhir+xml', 406, /^application\/fhir\+json/],
      [
        'application/json;q=0, application/fhir+json;q=0, text/html',
        406,
        /^application\/fhir\+json/,
      ],
      ['*/*;q=0', 406, /^application\/fhir\+json/],
      ['application/fhir+xml;q=0, application/fhir+json;q=0.5', 200, /^application\/fhir\+json/],
      ['application/fhir+json;q=0, */*', 200, /^application\/json/],
      ['application/fhir+json; q=0.0, application/json', 200, /^application\/json/],
    ] as const) {
      const read = await fetch(`${base}/metadata`, { headers: { accept } });
      expect({ accept, status: read.status, type: read.headers.get('content-type') }).toEqual({
        accept,
        status,
        type: expect.stringMatching(type),
      });
    }
    const sr = {
      ...fixture('r4-servicerequest-example-di'),
      identifier: [{ system: 'http://example.org/ehr/orders', value: 'DI-PREFER-1' }],
    };
    const minimal = await fetch(`${base}/ServiceRequest`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json', prefer: 'return=minimal' },
      body: JSON.stringify(sr),
    });
    expect(minimal.status).toBe(201);
    expect(await minimal.text()).toBe('');
    expect(minimal.headers.get('location')).toMatch(
      /\/fhir\/ServiceRequest\/[0-9a-f-]{36}\/_history\/1$/,
    );
    const oo = await fetch(`${base}/ServiceRequest`, {
      method: 'POST',
      headers: {
        ...auth,
        'content-type': 'application/fhir+json',
        prefer: 'return=OperationOutcome',
      },
      body: JSON.stringify(sr),
    });
    expect(oo.status).toBe(200); // a repeat (same placer identifier): the existing one
    expect(((await oo.json()) as { resourceType: string }).resourceType).toBe('OperationOutcome');
  });

  it('counts its answers by route pattern and status (no ids in labels)', async () => {
    const res = await fetch(`${adapter.httpUrl}/metrics`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
    });
    const text = await res.text();
    expect(text).toMatch(
      /adapter_fhir_requests_total\{method="POST",route="\/fhir\/ServiceRequest",status="201"\} \d+/,
    );
    expect(text).toMatch(
      /adapter_fhir_requests_total\{method="GET",route="\/fhir\/ServiceRequest\/:id",status="200"\}/,
    );
    expect(text).not.toMatch(/adapter_fhir_requests_total\{[^}]*[0-9a-f]{8}-[0-9a-f]{4}/);
  });

  it('401 without a credential and 403 with the wrong role, as OperationOutcomes', async () => {
    const none = await fetch(`${base}/ServiceRequest/abc`);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect((await none.json()) as object).toMatchObject({
      resourceType: 'OperationOutcome',
      issue: [{ code: 'login' }],
    });
    const analyst = new Client({ baseUrl: base, bearerToken: TEST_TOKENS.analyst });
    const forbidden = await failure(
      analyst.create({
        resourceType: 'ServiceRequest',
        body: fixture('r4-servicerequest-example-di'),
      }),
    );
    expect(forbidden.status).toBe(403);
    expect(forbidden.data.issue[0]!.code).toBe('forbidden');
  });
});
