import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { MllpClient } from '../../src/hl7';
import { DicomWebClient } from '../../src/studies/dicomweb.client';
import { DimseClient } from '../../src/studies/dimse.client';
import { DimsePacs } from '../../src/studies/dimse-pull';
import { DefaultStudyAcquirer } from '../../src/studies/study-acquirer.service';
import { StudyStoragePaths } from '../../src/studies/study-storage.paths';
import { loadOrder } from '../../src/orders/order-transitions';
import { studyRequestOf } from '../../src/orders/study-request';
import { STUDY_ACQUIRER, type StudyAcquirer } from '../../src/domain/study-acquirer.port';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { createMrBrainStudy, type DicomInstance } from '../helpers/dicom-factory';
import { ackSummary, hl7Fixture, withControlId } from '../helpers/hl7-fixtures';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import { stowToAdapter } from '../studies/study-test-support';

jest.setTimeout(120_000);

/**
 * Issue #15 item 4: another patient's study is never used. A real PACS (Orthanc over
 * DICOMweb) holds studies whose accession number or patient ID differ from the order's; a
 * study is pushed (STOW-RS) to a running adapter under an order of another patient; and
 * accession numbers with DICOM matching characters arrive over MLLP and FHIR.
 */

async function insertOrder(
  db: TestDatabase,
  ids: { accession?: string; studyUid?: string; patientId?: string },
): Promise<string> {
  const rows = (await db.dataSource.query(
    `INSERT INTO orders (source, state, request, accession_number, study_instance_uid, patient_id)
     VALUES ('api', 'placed', '{}'::jsonb, $1, $2, $3) RETURNING id`,
    [ids.accession ?? null, ids.studyUid ?? null, ids.patientId ?? null],
  )) as Array<{ id: string }>;
  return rows[0]!.id;
}

/** The adapter's acquirer pulling from a PACS over DIMSE (C-FIND, C-GET), clock under test. */
function dimseAcquirer(
  db: TestDatabase,
  orthanc: RunningOrthanc,
  dataDir: string,
  now: () => Date,
): DefaultStudyAcquirer {
  const paths = new StudyStoragePaths(dataDir);
  return new DefaultStudyAcquirer({
    dataSource: db.dataSource,
    paths,
    logger: pino({ level: 'silent' }),
    quietPeriodSeconds: 60,
    now,
    dimse: new DimsePacs({
      client: new DimseClient({
        host: '127.0.0.1',
        port: orthanc.dicomPort,
        calledAeTitle: orthanc.aet,
        callingAeTitle: 'IMAGING-ADAPTER',
        timeoutMs: 5000,
        retrieveTimeoutMs: 60_000,
      }),
      retrieve: 'get',
      paths,
      maxInstances: 10_000,
      maxBytes: 4 * 1024 ** 3,
    }),
  });
}

describe('hostile: a PACS answer that is not the order’s study is never retrieved or uploaded', () => {
  let orthanc: RunningOrthanc;
  let db: TestDatabase;
  let dataDir: string;
  let client: DicomWebClient;
  let clock = Date.parse('2026-03-15T10:30:00Z');

  const acquirer = () =>
    new DefaultStudyAcquirer({
      dataSource: db.dataSource,
      paths: new StudyStoragePaths(dataDir),
      logger: pino({ level: 'silent' }),
      dicomWeb: client,
      quietPeriodSeconds: 60,
      now: () => new Date(clock),
    });
  const store = async (instances: DicomInstance[]) => {
    for (const i of instances) await orthanc.store(i.bytes);
  };
  const mismatchEvents = async (orderId: string) =>
    (
      await db.dataSource.query(
        `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'study.identity-mismatch'`,
        [orderId],
      )
    ).map(
      (r: { detail: { mismatches: Array<{ field: string; order: string; study: string }> } }) =>
        r.detail,
    );

  beforeAll(async () => {
    [orthanc, db] = await Promise.all([startOrthanc(), createTestDatabase()]);
    dataDir = mkdtempSync(join(tmpdir(), 'hostile-identity-'));
    client = new DicomWebClient({ baseUrl: orthanc.dicomWebUrl });
  });
  afterAll(async () => {
    await client?.close();
    await orthanc?.stop();
    await db?.drop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('same accession, another patient: failed with study-identity-mismatch, nothing retrieved', async () => {
    await store(
      createMrBrainStudy({ study: { accessionNumber: 'IDN-ACC-1' }, series: [{ slices: 2 }] }),
    );
    const orderId = await insertOrder(db, { accession: 'IDN-ACC-1', patientId: 'OTHER-PATIENT-9' });
    const result = await acquirer().acquire({
      orderId,
      accessionNumber: 'IDN-ACC-1',
      patientId: 'OTHER-PATIENT-9',
    });
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
    expect((result as { reason: string }).reason).toMatch(/patient-id/);
    // The audit log names the field, masked: never the IDs themselves.
    const events = await mismatchEvents(orderId);
    expect(events).toHaveLength(1);
    expect(events[0]!.mismatches).toEqual([
      { field: 'patient-id', order: 'O********9', study: 'S********3' },
    ]);
    expect(JSON.stringify(events)).not.toContain('OTHER-PATIENT-9');
    expect(existsSync(new StudyStoragePaths(dataDir).pulledDir(orderId))).toBe(false);
  });

  it('ordered by Study Instance UID, but the PACS study carries another accession: not used', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'IDN-ACC-PACS' },
      series: [{ slices: 2 }],
    });
    await store(study);
    const uid = study[0]!.studyInstanceUid;
    const orderId = await insertOrder(db, { accession: 'IDN-ACC-ORDER', studyUid: uid });
    const result = await acquirer().acquire({
      orderId,
      studyInstanceUid: uid,
      accessionNumber: 'IDN-ACC-ORDER',
    });
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
    expect(
      (await mismatchEvents(orderId))[0]!.mismatches.map((m: { field: string }) => m.field),
    ).toEqual(['accession-number']);
  });

  it('same accession and Patient ID, but another ID domain (Issuer of Patient ID): not used', async () => {
    // A PACS shared by two hospitals whose record numbers overlap (IHE PIX): patient 12345 of
    // HOSP_B is not patient 12345 of HOSPA, whose RIS placed the order.
    const patient = {
      patientId: 'IDN-12345',
      issuerOfPatientId: 'HOSP_B',
      patientName: 'OTHER^PATIENT',
    };
    await store(
      createMrBrainStudy({
        patient,
        study: { accessionNumber: 'IDN-ACC-ISS' },
        series: [{ slices: 2 }],
      }),
    );
    const orderId = await insertOrder(db, { accession: 'IDN-ACC-ISS', patientId: 'IDN-12345' });
    const result = await acquirer().acquire({
      orderId,
      accessionNumber: 'IDN-ACC-ISS',
      patientId: 'IDN-12345',
      patientIdIssuer: 'HOSPA',
    });
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
    expect((result as { reason: string }).reason).toMatch(
      /patient-id-issuer \(order HOSPA, study HOSP_B\)/,
    );
    expect((await mismatchEvents(orderId))[0]!.mismatches).toEqual([
      { field: 'patient-id-issuer', order: 'HOSPA', study: 'HOSP_B' },
    ]);
    expect(existsSync(new StudyStoragePaths(dataDir).pulledDir(orderId))).toBe(false);
  });

  it('an Issuer of Patient ID of several values (HOSPA\\HOSP_B) is not the domain HOSPA: not used', async () => {
    // VM 1, but written with two values (a study merged from two sources): only its first was
    // read, over QIDO-RS, C-FIND and from the instances, so a HOSPA order took it.
    const patient = {
      patientId: 'IDN-4242',
      issuerOfPatientId: 'HOSPA\\HOSP_B',
      patientName: 'OTHER^PATIENT',
    };
    await store(
      createMrBrainStudy({
        patient,
        study: { accessionNumber: 'IDN-ACC-ISS-MV' },
        series: [{ slices: 1 }],
      }),
    );
    const orderId = await insertOrder(db, { accession: 'IDN-ACC-ISS-MV', patientId: 'IDN-4242' });
    const request = {
      orderId,
      accessionNumber: 'IDN-ACC-ISS-MV',
      patientId: 'IDN-4242',
      patientIdIssuer: 'HOSPA',
    };
    const first = await acquirer().acquire(request);
    clock += 61_000;
    const result = first.status === 'failed' ? first : await acquirer().acquire(request);
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
    expect((result as { reason: string }).reason).toMatch(
      /patient-id-issuer \(order HOSPA, study HOSPA\\HOSP_B\)/,
    );
  });

  it('the same ID domain spelt with another case or as urn:oid: still matches', async () => {
    for (const [n, pacs, order] of [
      ['1', 'hospa', 'HOSPA'],
      ['2', '1.2.840.113619.6.197', 'urn:oid:1.2.840.113619.6.197'],
    ] as const) {
      const accession = `IDN-ACC-ISS-OK${n}`;
      const patient = {
        patientId: 'IDN-777',
        issuerOfPatientId: pacs,
        patientName: 'SAME^PATIENT',
      };
      await store(
        createMrBrainStudy({
          patient,
          study: { accessionNumber: accession },
          series: [{ slices: 1 }],
        }),
      );
      const orderId = await insertOrder(db, { accession, patientId: 'IDN-777' });
      const request = {
        orderId,
        accessionNumber: accession,
        patientId: 'IDN-777',
        patientIdIssuer: order,
      };
      expect(await acquirer().acquire(request)).toMatchObject({ status: 'waiting' });
      clock += 61_000;
      expect(await acquirer().acquire(request)).toMatchObject({ status: 'ready' });
    }
  });

  it('same accession and patient, but another issuing authority (Issuer of Accession Number): not used', async () => {
    // A PACS shared by two hospitals whose RIS number exams alike: ACC 555 of RIS_B is not
    // ACC 555 of RIS_A, whose order this is (HL7 IPC-1 EI ACC^RIS_A, DICOM 0008,0051).
    await store(
      createMrBrainStudy({
        study: {
          accessionNumber: 'IDN-ACC-AISS',
          issuerOfAccessionNumber: {
            namespace: 'RIS_B',
            universalId: '1.2.3.99',
            universalIdType: 'ISO',
          },
        },
        series: [{ slices: 2 }],
      }),
    );
    const orderId = await insertOrder(db, { accession: 'IDN-ACC-AISS', patientId: 'SBX-000123' });
    const request = {
      orderId,
      accessionNumber: 'IDN-ACC-AISS',
      patientId: 'SBX-000123',
      accessionIssuer: { namespace: 'RIS_A', universalId: '1.2.3.42', universalIdType: 'ISO' },
    };
    let result = await acquirer().acquire(request);
    clock += 61_000;
    if (result.status === 'waiting') result = await acquirer().acquire(request);
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
    expect((result as { reason: string }).reason).toMatch(
      /accession-issuer \(order 1\.2\.3\.42, study 1\.2\.3\.99\)/,
    );
    expect(existsSync(new StudyStoragePaths(dataDir).packageFile(orderId))).toBe(false);
  });

  it('over DIMSE (C-FIND answers carry no issuer): the retrieved instances of another issuing authority are not used', async () => {
    await store(
      createMrBrainStudy({
        study: {
          accessionNumber: 'IDN-ACC-AISS-D',
          issuerOfAccessionNumber: { namespace: 'RIS_B' },
        },
        series: [{ slices: 1 }],
      }),
    );
    const dimse = () => dimseAcquirer(db, orthanc, dataDir, () => new Date(clock));
    const orderId = await insertOrder(db, { accession: 'IDN-ACC-AISS-D', patientId: 'SBX-000123' });
    const request = {
      orderId,
      accessionNumber: 'IDN-ACC-AISS-D',
      patientId: 'SBX-000123',
      accessionIssuer: { namespace: 'RIS_A' },
    };
    let result = await dimse().acquire(request);
    clock += 61_000;
    if (result.status === 'waiting') result = await dimse().acquire(request);
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
    expect((result as { reason: string }).reason).toMatch(
      /accession-issuer \(order RIS_A, study RIS_B\)/,
    );
    expect(existsSync(new StudyStoragePaths(dataDir).packageFile(orderId))).toBe(false);
  });

  it('the same issuing authority (or a side that names none) still matches', async () => {
    for (const [n, study, order] of [
      ['1', { namespace: 'ris_a' }, { namespace: 'RIS_A' }],
      [
        '2',
        { universalId: '1.2.3.42', universalIdType: 'ISO' },
        { universalId: 'urn:oid:1.2.3.42' },
      ],
      ['3', undefined, { namespace: 'RIS_A' }],
      ['4', { namespace: 'RIS_B' }, undefined],
    ] as const) {
      const accession = `IDN-ACC-AISS-OK${n}`;
      await store(
        createMrBrainStudy({
          study: { accessionNumber: accession, issuerOfAccessionNumber: study },
          series: [{ slices: 1 }],
        }),
      );
      const orderId = await insertOrder(db, { accession, patientId: 'SBX-000123' });
      const request = {
        orderId,
        accessionNumber: accession,
        patientId: 'SBX-000123',
        accessionIssuer: order,
      };
      expect(await acquirer().acquire(request)).toMatchObject({ status: 'waiting' });
      clock += 61_000;
      expect(await acquirer().acquire(request)).toMatchObject({ status: 'ready' });
    }
  });

  it('an accession of "*" never reaches the PACS as a wildcard query', async () => {
    const orderId = await insertOrder(db, { accession: '*' });
    const result = await acquirer().acquire({ orderId, accessionNumber: '*' });
    expect(result).toMatchObject({ status: 'failed' });
    expect((result as { reason: string }).reason).toMatch(/matching characters/);
  });

  it('a PACS matching the accession without letter case: the other study is not taken, the order waits for its own', async () => {
    // Orthanc answers QIDO-RS (and C-FIND) AccessionNumber=IDN-CASE-AB with the study of
    // IDN-case-ab: its lookup ignores case. Before: the order failed at once (identity
    // mismatch), and again ("matches 2 studies") once its own study was in the PACS.
    await store(
      createMrBrainStudy({
        study: { accessionNumber: 'IDN-case-ab' },
        patient: { patientId: 'OTHER-77', patientName: 'Other^Patient' },
        series: [{ slices: 1 }],
      }),
    );
    const orderId = await insertOrder(db, { accession: 'IDN-CASE-AB', patientId: 'SBX-000123' });
    const request = { orderId, accessionNumber: 'IDN-CASE-AB', patientId: 'SBX-000123' };
    expect(await acquirer().acquire(request)).toMatchObject({
      status: 'waiting',
      reason: 'the study is not in the PACS yet',
    });
    expect(await acquirer().acquire(request)).toMatchObject({ status: 'waiting' });
    const notes = (await db.dataSource.query(
      `SELECT summary FROM audit_events WHERE order_id = $1 AND kind = 'study.retrieve-problem'`,
      [orderId],
    )) as Array<{ summary: string }>;
    expect(notes).toHaveLength(1);
    expect(notes[0]!.summary).toMatch(/1 study\(ies\) .* not the order's/);
    expect(await mismatchEvents(orderId)).toEqual([]);

    // The order's own study arrives: it is the one used, never the other.
    const own = createMrBrainStudy({
      study: { accessionNumber: 'IDN-CASE-AB' },
      series: [{ slices: 2 }],
    });
    await store(own);
    expect(await acquirer().acquire(request)).toMatchObject({ status: 'waiting' });
    clock += 61_000;
    expect(await acquirer().acquire(request)).toMatchObject({
      status: 'ready',
      study: { studyInstanceUid: own[0]!.studyInstanceUid, instanceCount: 2 },
    });
  });

  it('the matching study still goes through (same accession, same patient)', async () => {
    await store(
      createMrBrainStudy({ study: { accessionNumber: 'IDN-ACC-OK' }, series: [{ slices: 2 }] }),
    );
    const orderId = await insertOrder(db, { accession: 'IDN-ACC-OK', patientId: 'SBX-000123' });
    const request = { orderId, accessionNumber: 'IDN-ACC-OK', patientId: 'SBX-000123' };
    expect(await acquirer().acquire(request)).toMatchObject({ status: 'waiting' });
    clock += 61_000;
    expect(await acquirer().acquire(request)).toMatchObject({ status: 'ready' });
  });
});

describe('hostile: an accession of padding only never finds a study', () => {
  // A RIS that writes OBR-18 as a fixed-width field sends "   " for "no accession yet". Sent
  // as a C-FIND key it is zero length to the PACS, a universal match (PS3.4 §C.2.2.2.3):
  // Orthanc answers every study it holds. The identity check ignores padding, so it had no
  // accession to compare: a PACS with one study of this patient had it retrieved and
  // packaged for the order. Now the order names no study (failed), and is never queried.
  let orthanc: RunningOrthanc;
  let db: TestDatabase;
  let dataDir: string;
  beforeAll(async () => {
    [orthanc, db] = await Promise.all([startOrthanc(), createTestDatabase()]);
    dataDir = mkdtempSync(join(tmpdir(), 'hostile-blank-acc-'));
  });
  afterAll(async () => {
    await orthanc?.stop();
    await db?.drop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('an order whose accession is "   " fails as naming no study; nothing is queried or retrieved', async () => {
    // The patient's earlier study, the only one in this PACS.
    await orthanc.store(
      createMrBrainStudy({
        study: { accessionNumber: 'PRIOR-2025-1' },
        series: [{ slices: 1 }],
      })[0]!.bytes,
    );
    let clock = Date.parse('2026-03-15T10:30:00Z');
    const acquirer = dimseAcquirer(db, orthanc, dataDir, () => new Date(clock));
    const orderId = await insertOrder(db, { accession: '   ', patientId: 'SBX-000123' });
    const request = { orderId, accessionNumber: '   ', patientId: 'SBX-000123' };
    let result = await acquirer.acquire(request);
    clock += 61_000;
    if (result.status === 'waiting') result = await acquirer.acquire(request);
    expect(result).toEqual({
      status: 'failed',
      reason: 'the order names neither a Study Instance UID nor an accession number',
    });
    expect(existsSync(new StudyStoragePaths(dataDir).packageFile(orderId))).toBe(false);
    // The clients refuse such a key too, whoever asks.
    await expect(
      new DicomWebClient({ baseUrl: orthanc.dicomWebUrl }).findStudies({ accessionNumber: ' ' }),
    ).rejects.toMatchObject({ code: 'invalid_study' });
  });
});

describe('hostile: intake and pushes on a running adapter', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false', STUDY_QUIET_PERIOD_SECONDS: '1' });
  });
  afterAll(async () => adapter?.close());

  /** The instances pushed to the running adapter by STOW-RS; the answer's status. */
  const pushOverStow = async (study: DicomInstance[]) =>
    (await stowToAdapter(adapter.httpUrl, study)).status;

  /** The adapter's acquirer asked until the pushed study's quiet period has passed. */
  async function acquiredAfterQuiet(req: Parameters<StudyAcquirer['acquire']>[0]) {
    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    let result = await acquirer.acquire(req);
    for (let i = 0; i < 10 && result.status === 'waiting'; i++) {
      await new Promise((r) => setTimeout(r, 500));
      result = await acquirer.acquire(req);
    }
    return result;
  }

  it('an ORM whose OBR-18 accession is "*" gets AE with ERR at OBR-18, and no order', async () => {
    const text = withControlId(hl7Fixture('orm-o01-v231-ihe-swf-zds'), 'WILD-1')
      .toString('latin1')
      .replace(/ACC-20240318-0042/g, '*')
      .replace(/PLC-100234/g, 'PLC-WILD-1');
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      const reply = await client.send(Buffer.from(text, 'latin1'));
      const ack = ackSummary(reply);
      expect(ack.code).toBe('AE');
      expect(ack.errors.join(' ')).toMatch(/OBR\^1\^18/);
      // v2.3.1: the text travels in MSA-3.
      expect(reply.toString('latin1')).toMatch(/matching character/);
    } finally {
      await client.close();
    }
    const rows = await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM orders WHERE accession_number = '*'`,
    );
    expect(rows[0].n).toBe(0);
  });

  it.each([
    ['ACC*', /matching character/],
    // the TAB a barcode scanner appends to what it reads into the EHR's accession field;
    // before: 201, an order no study's Accession Number (SH: no control characters) can equal
    ['ACC-20240318-0077\t', /control character/],
  ])(
    'a ServiceRequest whose ACSN identifier is %j gets 422 naming the identifier',
    async (value, why) => {
      const res = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
        },
        body: JSON.stringify({
          resourceType: 'ServiceRequest',
          status: 'active',
          intent: 'order',
          identifier: [
            {
              type: {
                coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'ACSN' }],
              },
              system: 'urn:oid:1.2.3.4',
              value,
            },
          ],
          code: { coding: [{ system: 'http://loinc.org', code: '24590-2' }] },
          subject: { reference: '#p' },
          contained: [
            {
              resourceType: 'Patient',
              id: 'p',
              identifier: [{ system: 'urn:mrn', value: 'MRN-1' }],
            },
          ],
        }),
      });
      expect(res.status).toBe(422);
      const outcome = (await res.json()) as {
        issue: Array<{ expression?: string[]; diagnostics?: string }>;
      };
      expect(
        outcome.issue.some(
          (i) =>
            i.expression?.[0] === 'ServiceRequest.identifier[0].value' &&
            why.test(i.diagnostics ?? ''),
        ),
      ).toBe(true);
    },
  );

  it('instances pushed by STOW-RS under an order of another patient are matched by accession but never packaged', async () => {
    const rows = (await adapter.dataSource.query(
      `INSERT INTO orders (source, state, request, accession_number, patient_id)
       VALUES ('api', 'placed', '{}'::jsonb, 'PUSH-IDN-1', 'NOT-THIS-PATIENT') RETURNING id`,
    )) as Array<{ id: string }>;
    const orderId = rows[0]!.id;
    const study = createMrBrainStudy({
      study: { accessionNumber: 'PUSH-IDN-1' },
      series: [{ slices: 2 }],
    });
    expect(await pushOverStow(study)).toBe(200);
    const req = { orderId, accessionNumber: 'PUSH-IDN-1', patientId: 'NOT-THIS-PATIENT' };
    const result = await acquiredAfterQuiet(req);
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
  });

  it('an ORM for PAT-4711 of HOSPA (PID-3.4) never gets the pushed study of PAT-4711 of HOSP_B', async () => {
    const text = withControlId(hl7Fixture('orm-o01-v231-ihe-swf-zds'), 'ISSUER-1')
      .toString('latin1')
      .replace(/ACC-20240318-0042/g, 'PUSH-ISS-1')
      .replace(/PLC-100234/g, 'PLC-ISS-1');
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      expect(ackSummary(await client.send(Buffer.from(text, 'latin1'))).code).toBe('AA');
    } finally {
      await client.close();
    }
    const [{ id }] = (await adapter.dataSource.query(
      `SELECT id FROM orders WHERE accession_number = 'PUSH-ISS-1'`,
    )) as Array<{ id: string }>;
    const order = (await loadOrder(adapter.dataSource.manager, id!))!;
    // what the lifecycle asks the acquirer: the record number and its domain, from PID-3
    const req = studyRequestOf(order);
    expect(req).toMatchObject({ patientId: 'PAT-4711', patientIdIssuer: 'HOSPA' });
    const study = createMrBrainStudy({
      patient: { patientId: 'PAT-4711', issuerOfPatientId: 'HOSP_B', patientName: 'SCHMIDT^ANNA' },
      // the order names its study (ZDS-1): the same study, of another patient domain
      study: { accessionNumber: 'PUSH-ISS-1', studyInstanceUid: order.study_instance_uid! },
      series: [{ slices: 2 }],
    });
    expect(await pushOverStow(study)).toBe(200);
    const result = await acquiredAfterQuiet(req);
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
    expect((result as { reason: string }).reason).toMatch(
      /patient-id-issuer \(order HOSPA, study HOSP_B\)/,
    );
  });

  /**
   * The RIS orders for PAT-<tag>-OLD of HOSPA (fixture orm-o01-v231-ihe-swf-zds), then the MPI
   * merges that record into PAT-<tag>-NEW (ADT^A40, fixture adt-a40-v251-merge, IHE PAM ITI-30):
   * the order, answered AA, now belongs to the surviving record.
   */
  async function orderMergedByA40(tag: string) {
    const text = withControlId(hl7Fixture('orm-o01-v231-ihe-swf-zds'), `${tag}-ORM`)
      .toString('latin1')
      .replace(/ACC-20240318-0042/g, `PUSH-${tag}`)
      .replace(/PLC-100234/g, `PLC-${tag}`)
      .replace(/FIL-55012/g, `FIL-${tag}`)
      .replace('PAT-4711^^^HOSPA^MR', `PAT-${tag}-OLD^^^HOSPA^MR`)
      // a study of its own (ZDS-1): the fixture's is the one other tests push
      .replace(
        '1.2.276.0.7230010.3.1.2.2831176988.12345.1710769337.1',
        `2.25.${Date.now()}${tag.length}${tag.charCodeAt(3)}`,
      );
    const a40 = withControlId(hl7Fixture('adt-a40-v251-merge'), `${tag}-A40`)
      .toString('latin1')
      .replace('PAT-4711^^^HOSPA^MR', `PAT-${tag}-NEW^^^HOSPA^MR`)
      .replace('PAT-9902^^^HOSPA^MR', `PAT-${tag}-OLD^^^HOSPA^MR`);
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      expect(ackSummary(await client.send(Buffer.from(text, 'latin1'))).code).toBe('AA');
      expect(ackSummary(await client.send(Buffer.from(a40, 'latin1')))).toMatchObject({
        code: 'AA',
        errors: [],
      });
    } finally {
      await client.close();
    }
    const [{ id }] = (await adapter.dataSource.query(
      `SELECT id FROM orders WHERE accession_number = $1`,
      [`PUSH-${tag}`],
    )) as Array<{ id: string }>;
    const order = (await loadOrder(adapter.dataSource.manager, id!))!;
    expect(order.patient_id).toBe(`PAT-${tag}-NEW`);
    return order;
  }

  it('a study acquired under the record number an ADT^A40 merged into the order’s patient is the order’s study', async () => {
    // The modality took the worklist entry before the merge: the images carry the retired
    // record number PAT-…-OLD (the PACS, too, files them under it until it applies the merge).
    // Before, the order's patient ID was only the surviving one: the study was refused as
    // another patient's (study-identity-mismatch) and the order failed with no result.
    const order = await orderMergedByA40('MRG1');
    const study = createMrBrainStudy({
      patient: {
        patientId: 'PAT-MRG1-OLD',
        issuerOfPatientId: 'HOSPA',
        patientName: 'SCHMIDT^ANNA',
      },
      study: { accessionNumber: 'PUSH-MRG1', studyInstanceUid: order.study_instance_uid! },
      series: [{ slices: 2 }],
    });
    expect(await pushOverStow(study)).toBe(200);
    expect(await acquiredAfterQuiet(studyRequestOf(order))).toMatchObject({ status: 'ready' });
    // The timeline says why the Patient ID differs: the merge, not a wrong patient.
    const [packaged] = (await adapter.dataSource.query(
      `SELECT severity, summary FROM audit_events WHERE order_id = $1 AND kind = 'study.packaged'`,
      [order.id],
    )) as Array<{ severity: string; summary: string }>;
    expect(packaged).toMatchObject({ severity: 'warning' });
    expect(packaged!.summary).toContain(
      "the images carry a record number the patient's merge or identifier change (ADT^A40, A47) retired",
    );
    expect(packaged!.summary).not.toContain('PAT-MRG1');
  });

  it('after an ADT^A40, a study of the merged record number in another ID domain, or of a third patient, is still not the order’s', async () => {
    const order = await orderMergedByA40('MRG2');
    const other = createMrBrainStudy({
      patient: {
        patientId: 'PAT-MRG2-OLD',
        issuerOfPatientId: 'HOSP_B',
        patientName: 'SCHMIDT^ANNA',
      },
      study: { accessionNumber: 'PUSH-MRG2', studyInstanceUid: order.study_instance_uid! },
      series: [{ slices: 2 }],
    });
    expect(await pushOverStow(other)).toBe(200);
    const result = await acquiredAfterQuiet(studyRequestOf(order));
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
    expect((result as { reason: string }).reason).toMatch(
      /patient-id-issuer \(order HOSPA, study HOSP_B\)/,
    );

    const third = await orderMergedByA40('MRG3');
    const foreign = createMrBrainStudy({
      patient: { patientId: 'PAT-9902', issuerOfPatientId: 'HOSPA', patientName: 'SCHMIDT^ANNA' },
      study: { accessionNumber: 'PUSH-MRG3', studyInstanceUid: third.study_instance_uid! },
      series: [{ slices: 2 }],
    });
    expect(await pushOverStow(foreign)).toBe(200);
    expect(await acquiredAfterQuiet(studyRequestOf(third))).toMatchObject({
      status: 'failed',
      alert: 'study-identity-mismatch',
    });
  });

  it('an ORM whose OBR-18 names its issuer (ACC^RIS_A) never gets the pushed study of RIS_B with the same accession', async () => {
    const text = withControlId(hl7Fixture('orm-o01-v231-ihe-swf-zds'), 'AISSUER-1')
      .toString('latin1')
      .replace(/ACC-20240318-0042/g, 'PUSH-AISS-1^RIS_A')
      .replace(/PLC-100234/g, 'PLC-AISS-1');
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      expect(ackSummary(await client.send(Buffer.from(text, 'latin1'))).code).toBe('AA');
    } finally {
      await client.close();
    }
    const [{ id }] = (await adapter.dataSource.query(
      `SELECT id FROM orders WHERE accession_number = 'PUSH-AISS-1'`,
    )) as Array<{ id: string }>;
    const order = (await loadOrder(adapter.dataSource.manager, id!))!;
    const req = studyRequestOf(order);
    expect(req).toMatchObject({ accessionIssuer: { namespace: 'RIS_A' } });
    const study = createMrBrainStudy({
      patient: { patientId: 'PAT-4711', issuerOfPatientId: 'HOSPA', patientName: 'SCHMIDT^ANNA' },
      study: {
        accessionNumber: 'PUSH-AISS-1',
        studyInstanceUid: order.study_instance_uid!,
        issuerOfAccessionNumber: { namespace: 'RIS_B' },
      },
      series: [{ slices: 2 }],
    });
    expect(await pushOverStow(study)).toBe(200);
    const result = await acquiredAfterQuiet(req);
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
    expect((result as { reason: string }).reason).toMatch(
      /accession-issuer \(order RIS_A, study RIS_B\)/,
    );
  });
});
