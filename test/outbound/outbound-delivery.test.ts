import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import type { DiagnosticReport, Task } from '@medplum/fhirtypes';
import { parseHl7 } from '../../src/hl7/hl7-message';
import { DicomWebResultPublisher } from '../../src/outbound/dicomweb-result.publisher';
import { FhirResultPublisher } from '../../src/outbound/fhir-result.publisher';
import { Hl7ResultPublisher } from '../../src/outbound/hl7-result.publisher';
import { OutboxOrderEvents } from '../../src/outbound/outbox-order-events';
import { OutboxWorker } from '../../src/outbound/outbox.worker';
import { DESTINATIONS, type OutboundSettings } from '../../src/outbound/outbound.settings';
import type { SourceStudy } from '../../src/outbound/dicom-result.builder';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { createMrBrainStudy } from '../helpers/dicom-factory';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import {
  startAckingRis,
  startDroppingRis,
  startValidatingEhr,
  type TestEhr,
  type TestRis,
} from './outbound-peers';
import {
  endLocally,
  FAILURE_DOCS,
  playStatus,
  QC_DOCS,
  RESULT_DOCS,
  seedOrder,
  testOutboundSettings,
} from './outbound-seed';

/**
 * Every outcome, end to end against real peers on loopback: a FHIR engine that validates
 * what it stores, MLLP receivers (ACK, AE then AA, dropped connection, AR), and Orthanc
 * receiving the SR and the PDF by STOW-RS, read back and checked with dciodvfy and dsrdump.
 */
const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

function settings(overrides: Partial<OutboundSettings> = {}): OutboundSettings {
  return testOutboundSettings({
    destinations: [DESTINATIONS.fhir, DESTINATIONS.hl7, DESTINATIONS.dicom],
    ormStatusMessages: true,
    devices: { 'brain-mr-volumetry': { udi: '(01)00850012345678(10)3.2.1', version: '3.2.1' } },
    ...overrides,
  });
}

describe('results back to the clinic (real peers on loopback)', () => {
  let db: TestDatabase;
  let ehr: TestEhr;
  let ris: TestRis;
  let orthanc: RunningOrthanc;
  let source: SourceStudy;
  let tmp: string;

  beforeAll(async () => {
    db = await createTestDatabase();
    ehr = await startValidatingEhr();
    ris = await startAckingRis();
    orthanc = await startOrthanc();
    tmp = mkdtempSync(join(tmpdir(), 'outbound-'));
    const study = createMrBrainStudy({
      patient: {
        patientId: 'PAT-4711',
        patientName: 'SCHMIDT^ANNA^MARIA',
        birthDate: '19560214',
        sex: 'F',
      },
      study: {
        accessionNumber: 'ACC-2403180042',
        studyDate: '20240318',
        studyTime: '150000',
        studyId: 'S1',
        studyDescription: 'MR Brain',
        referringPhysicianName: 'WELBY^MARCUS',
      },
      series: [{ slices: 2, rows: 32, columns: 32 }],
    });
    for (const i of study) await orthanc.store(i.bytes);
    source = {
      attributes: {
        studyInstanceUid: study[0]!.studyInstanceUid,
        accessionNumber: 'ACC-2403180042',
        patientId: 'PAT-4711',
        patientName: 'SCHMIDT^ANNA^MARIA',
        patientBirthDate: '19560214',
        patientSex: 'F',
        studyDate: '20240318',
        studyTime: '150000',
        studyId: 'S1',
        studyDescription: 'MR Brain',
        referringPhysicianName: 'WELBY^MARCUS',
        modalities: ['MR'],
      },
      instances: study.map((i) => ({
        sopClassUid: '1.2.840.10008.5.1.4.1.1.4',
        sopInstanceUid: i.sopInstanceUid,
        seriesInstanceUid: i.seriesInstanceUid,
      })),
    };
  }, 60_000);

  afterAll(async () => {
    await ris?.close();
    await ehr?.close();
    await orthanc?.stop();
    await db?.drop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  function worker(s: OutboundSettings, risPort = ris.port): OutboxWorker {
    return new OutboxWorker({
      dataSource: db.dataSource,
      settings: s,
      logger,
      pollMs: 20,
      concurrency: 4,
      leaseMs: 30_000,
      publishers: [
        new FhirResultPublisher({ baseUrl: ehr.baseUrl, dataSource: db.dataSource }),
        new Hl7ResultPublisher({
          host: '127.0.0.1',
          port: risPort,
          responseTimeoutMs: 2000,
          settings: s.hl7,
          connections: 2,
        }),
        new DicomWebResultPublisher({ baseUrl: orthanc.dicomWebUrl }),
      ],
    });
  }

  /** Runs the worker until no row of the order is pending (or the deadline). */
  async function drain(w: OutboxWorker, orderId: string, deadlineMs = 20_000): Promise<void> {
    await drainAll([w], [orderId], deadlineMs);
  }

  /** Runs the workers until no row of the orders is pending (or the deadline), then stops them. */
  async function drainAll(workers: OutboxWorker[], orderIds: string[], deadlineMs = 20_000) {
    for (const w of workers) w.start();
    const end = Date.now() + deadlineMs;
    try {
      for (;;) {
        const rows: Array<{ n: number }> = await db.dataSource.query(
          `SELECT count(*)::int AS n FROM outbox WHERE order_id = ANY($1::uuid[]) AND status = 'pending'`,
          [orderIds],
        );
        if (rows[0]!.n === 0) return;
        if (Date.now() > end) throw new Error('outbox not drained');
        await new Promise((r) => setTimeout(r, 30));
      }
    } finally {
      await Promise.all(workers.map((w) => w.stop()));
    }
  }

  async function outbox(orderId: string) {
    return db.dataSource.query(
      `SELECT id::text, destination, kind, status, attempts, last_error FROM outbox WHERE order_id = $1 ORDER BY outbox.id`,
      [orderId],
    ) as Promise<
      Array<{
        id: string;
        destination: string;
        kind: string;
        status: string;
        attempts: number;
        last_error: string | null;
      }>
    >;
  }

  it('DELIVERED: Task completed, DiagnosticReport final with measurements, ORU RE/CM/F, SR and PDF in the PACS', async () => {
    const s = settings();
    const events = new OutboxOrderEvents(s);
    // The patient its ORM (the seed's IHE SWF fixture) names, as intake stores it: the ORU's
    // PID is the order's as received while the order still holds that patient.
    const order = await seedOrder(db.dataSource, {
      source,
      request: {
        patient: {
          identifiers: [
            { value: 'PAT-4711', system: 'HOSPA', type: 'MR' },
            { value: '998877665', system: 'SSA', type: 'SS' },
          ],
          name: { family: 'SCHMIDT', given: ['ANNA', 'MARIA'] },
          birthDate: '1956-02-14',
          sex: 'female',
        },
      },
    });
    const before = ris.received.length;
    await playStatus(db.dataSource, events, order, 'ANALYSIS_RUNNING');
    await playStatus(db.dataSource, events, order, 'DELIVERED', { documents: RESULT_DOCS });
    await drain(worker(s), order.id);

    const rows = await outbox(order.id);
    expect(rows.map((r) => [r.destination, r.kind, r.status])).toEqual([
      ['ehr-fhir', 'fhir-task', 'delivered'],
      ['ris-hl7', 'hl7-orm-status', 'delivered'],
      ['ehr-fhir', 'fhir-task', 'delivered'],
      ['ehr-fhir', 'fhir-diagnostic-report', 'delivered'],
      ['ris-hl7', 'hl7-oru', 'delivered'],
      ['pacs-dicomweb', 'dicom-sr', 'delivered'],
      ['pacs-dicomweb', 'dicom-pdf', 'delivered'],
    ]);

    // Each row keeps what its last attempt sent and what the peer answered (the audit page).
    type Side = { contentType: string; text: string; status?: number | string };
    const exchanges: Array<{ kind: string; x: { sent: Side; answer: Side } }> =
      await db.dataSource.query(
        `SELECT kind, last_exchange AS x FROM outbox WHERE order_id = $1 ORDER BY id`,
        [order.id],
      );
    const oruX = exchanges.find((e) => e.kind === 'hl7-oru')!.x;
    expect(oruX.sent.contentType).toBe('application/hl7-v2');
    expect(oruX.sent.text).toMatch(/^MSH\|.*ORU\^R01/);
    expect(oruX.answer.text).toMatch(/^MSH\|[^\r]*\rMSA\|AA\|/);
    const report = exchanges.find((e) => e.kind === 'fhir-diagnostic-report')!.x;
    expect(JSON.parse(report.sent.text).resourceType).toBe('DiagnosticReport');
    expect(report.answer).toMatchObject({ status: 'stored', contentType: 'application/fhir+json' });
    const sr = exchanges.find((e) => e.kind === 'dicom-sr')!.x;
    const srDump = JSON.parse(sr.sent.text) as Array<{ keyword: string; value: string }>;
    expect(srDump.find((l) => l.keyword === 'SOPClassUID')?.value).toBe(
      '1.2.840.10008.5.1.4.1.1.88.34',
    );
    expect(sr.answer.status).toBe(200);

    // FHIR: one Task (updated, not duplicated) and one DiagnosticReport.
    const tasks = await ehr.search<Task>(
      'Task',
      `identifier=urn:imaging-ai-adapter:order|${order.id}`,
    );
    expect(tasks).toHaveLength(1);
    expect(tasks[0]).toMatchObject({
      status: 'completed',
      businessStatus: { coding: [{ code: 'DELIVERED' }] },
    });
    const reports = await ehr.search<DiagnosticReport>(
      'DiagnosticReport',
      `identifier=urn:imaging-ai-adapter:diagnostic-report|${order.id}`,
    );
    expect(reports).toHaveLength(1);
    const dr = reports[0]!;
    expect(dr.status).toBe('final');
    expect(dr.category?.[0]?.coding?.[0]).toMatchObject({ code: 'RAD' });
    expect(dr.presentedForm?.[0]?.contentType).toBe('application/pdf');
    expect(dr.conclusion).toMatch(/Left hippocampus volume below the 5th percentile/);
    const obs = (dr.contained ?? []).filter((c) => c.resourceType === 'Observation');
    expect(obs.length).toBeGreaterThan(10);
    expect(obs[0]).toMatchObject({
      valueQuantity: { system: 'http://unitsofmeasure.org', code: 'mL' },
    });
    expect(dr.imagingStudy?.[0]?.identifier?.value).toBe(
      `urn:oid:${source.attributes.studyInstanceUid}`,
    );

    // HL7: ORM SC status then the ORU, in the order's version (2.3.1), PID/PV1 from the order.
    const sent = ris.received.slice(before).map((m) => parseHl7(m));
    expect(sent.map((m) => m.messageType.code)).toEqual(['ORM', 'ORU']);
    const oru = sent[1]!;
    expect(oru.version).toBe('2.3.1');
    expect(oru.get('PID-3')).toBe('PAT-4711');
    expect(oru.get('PV1-2')).toBe('O');
    expect([oru.get('ORC-1'), oru.get('ORC-5'), oru.get('OBR-25')]).toEqual(['RE', 'CM', 'F']);
    const obx = oru.segmentsById('OBX');
    expect(obx.map((o) => o.value(2))).toEqual(
      expect.arrayContaining(['TX', 'NM', 'CE', 'ED', 'ST']),
    );
    const ed = obx.find((o) => o.value(2) === 'ED')!;
    expect([ed.value(5, 1, 2), ed.value(5, 1, 3), ed.value(5, 1, 4)]).toEqual([
      'Application',
      'PDF',
      'Base64',
    ]);
    expect(
      Buffer.from(ed.value(5, 1, 5)!, 'base64')
        .subarray(0, 5)
        .toString(),
    ).toBe('%PDF-');
    const nm = obx.find((o) => o.value(2) === 'NM')!;
    expect(nm.value(6)).toBe('mL');
    expect(obx.every((o) => o.value(11) === 'F')).toBe(true);
    expect(obx.some((o) => o.value(5) === source.attributes.studyInstanceUid)).toBe(true);

    // DICOM: both new instances are in the source study; read back and checked.
    const study = (await (
      await fetch(`${orthanc.dicomWebUrl}/studies/${source.attributes.studyInstanceUid}/series`)
    ).json()) as Array<Record<string, { Value?: string[] }>>;
    expect(study.map((s) => s['00080060']?.Value?.[0]).sort()).toEqual(['DOC', 'MR', 'SR']);
    const instances = (await (await fetch(`${orthanc.url}/instances?expand`)).json()) as Array<{
      ID: string;
      MainDicomTags: { SOPInstanceUID: string };
    }>;
    const fetchFile = async (uid: string) => {
      const inst = instances.find((i) => i.MainDicomTags.SOPInstanceUID === uid);
      const file = join(tmp, `${uid}.dcm`);
      writeFileSync(
        file,
        Buffer.from(await (await fetch(`${orthanc.url}/instances/${inst!.ID}/file`)).arrayBuffer()),
      );
      return file;
    };
    const srRow = await db.dataSource.query(
      `SELECT payload FROM outbox WHERE order_id = $1 AND kind = 'dicom-sr'`,
      [order.id],
    );
    expect(srRow).toHaveLength(1);
    const srUids = instances.map((i) => i.MainDicomTags.SOPInstanceUID);
    const { dicomUidsFor } = await import('../../src/mappings/publication.model');
    const uids = dicomUidsFor(order.id, 0, source.attributes.studyInstanceUid);
    expect(srUids).toEqual(expect.arrayContaining([uids.srInstanceUid, uids.pdfInstanceUid]));
    const srFile = await fetchFile(uids.srInstanceUid);
    const pdfFile = await fetchFile(uids.pdfInstanceUid);
    for (const file of [srFile, pdfFile]) {
      const report = dciodvfy(file);
      expect(report.iod).toMatch(file === srFile ? /^Comprehensive3DSR$/m : /^EncapsulatedPDF$/m);
      expect({ file, errors: report.errors }).toEqual({ file, errors: [] });
    }
    const tree = execFileSync('dsrdump', ['+Pc', srFile], { encoding: 'utf8' });
    expect(tree).toContain('Verification Flag   : UNVERIFIED');
    expect(tree).toContain('<CONTAINER:(126000,DCM,"Imaging Measurement Report")=SEPARATE>');
    expect(tree).toContain(
      '<has obs context CODE:(121005,DCM,"Observer Type")=(121007,DCM,"Device")>',
    );
    expect(tree).toContain('<contains CONTAINER:(111028,DCM,"Image Library")=SEPARATE>');
    expect(tree).toContain(
      '<has obs context TEXT:(112039,DCM,"Tracking Identifier")="Left hippocampus">',
    );
    expect(tree).toContain(
      '<has concept mod TEXT:(111001,DCM,"Algorithm Name")="brain-mr-volumetry">',
    );
    expect(tree).toMatch(
      /<contains NUM:\(LEFT-HIPPO-\w+\.V,99IAA,"Left hippocampus volume"\)="[\d.]+" \(mL,UCUM,"mL"\)>/,
    );
    expect(tree).toMatch(
      /<contains CODE:\(121071,DCM,"Finding"\)=\(LEFT-HIPPO-\w+,99IAA,"Left hippocampus"\)>/,
    );
    expect(tree).toMatch(
      /<contains NUM:\(LEFT-HIPPO-\w+\.P,99IAA,"Left hippocampus normative percentile"\)="3"/,
    );
    const dump = execFileSync('dcmdump', [srFile], { encoding: 'utf8' });
    expect(dump).toMatch(/\(0040,a370\) SQ .*ReferencedRequestSequence/);
    expect(dump).toContain('[ACC-2403180042]');
    const pdfDump = execFileSync('dcmdump', [pdfFile], { encoding: 'utf8' });
    expect(pdfDump).toMatch(/\(0042,0012\) LO \[application\/pdf\]/);
  }, 60_000);

  it.each([
    ['FAILED', FAILURE_DOCS, 'failed', 'No result: the analysis failed.'],
    [
      'PREPROCESSING_FAILED',
      FAILURE_DOCS,
      'failed',
      'No result: preprocessing of the study failed.',
    ],
    ['QC_FAILED', QC_DOCS, 'failed', 'Not analysable: the study failed quality control.'],
    ['EXPIRED', undefined, 'failed', 'No result: the order expired'],
    ['CANCELLED', undefined, 'cancelled', 'No result: the order was cancelled.'],
  ] as const)(
    '%s is never a finding: Task %s, DiagnosticReport cancelled, ORU OC/CA/X, nothing to the PACS',
    async (status, docs, taskStatus, conclusion) => {
      const s = settings({ ormStatusMessages: false });
      const events = new OutboxOrderEvents(s);
      const order = await seedOrder(db.dataSource, { source });
      const before = ris.received.length;
      await playStatus(db.dataSource, events, order, status, {
        documents: docs ? [...docs] : undefined,
        qcBypassPossible: false,
      });
      await drain(worker(s), order.id);
      const rows = await outbox(order.id);
      expect(rows.map((r) => [r.kind, r.status])).toEqual([
        ['fhir-task', 'delivered'],
        ['fhir-diagnostic-report', 'delivered'],
        ['hl7-oru', 'delivered'],
      ]);
      const [task] = await ehr.search<Task>(
        'Task',
        `identifier=urn:imaging-ai-adapter:order|${order.id}`,
      );
      expect(task!.status).toBe(taskStatus);
      expect(task!.statusReason?.text).toBeTruthy();
      const [dr] = await ehr.search<DiagnosticReport>(
        'DiagnosticReport',
        `identifier=urn:imaging-ai-adapter:diagnostic-report|${order.id}`,
      );
      expect(dr!.status).toBe('cancelled');
      expect(dr!.conclusion).toContain(conclusion);
      expect((dr!.contained ?? []).filter((c) => c.resourceType === 'Observation')).toHaveLength(0);
      if (docs) expect(dr!.presentedForm?.length).toBeGreaterThan(0);
      const oru = parseHl7(ris.received.slice(before).at(-1)!);
      expect([oru.get('ORC-1'), oru.get('ORC-5'), oru.get('OBR-25')]).toEqual(['OC', 'CA', 'X']);
      expect(oru.get('ORC-16.2')).toBeTruthy();
      expect(oru.segmentsById('OBX').every((o) => o.value(11) === 'X')).toBe(true);
      expect(oru.segmentsById('OBX').some((o) => o.value(2) === 'NM')).toBe(false);
    },
    30_000,
  );

  it('a bypassable QC rejection is on-hold awaiting a decision, never a report', async () => {
    const s = settings();
    const events = new OutboxOrderEvents(s);
    const order = await seedOrder(db.dataSource, { source });
    await playStatus(db.dataSource, events, order, 'QC_FAILED', {
      qcBypassPossible: true,
      documents: [...QC_DOCS],
    });
    await drain(worker(s), order.id);
    expect((await outbox(order.id)).map((r) => r.kind)).toEqual(['fhir-task', 'hl7-orm-status']);
    const [task] = await ehr.search<Task>(
      'Task',
      `identifier=urn:imaging-ai-adapter:order|${order.id}`,
    );
    expect(task).toMatchObject({
      status: 'on-hold',
      statusReason: { text: expect.stringContaining('awaiting') },
    });
  }, 30_000);

  it('an order ended here (study never arrived) tells every system why, as a no-result', async () => {
    const s = settings();
    const events = new OutboxOrderEvents(s);
    const order = await seedOrder(db.dataSource, {});
    const before = ris.received.length;
    await endLocally(
      db.dataSource,
      events,
      order,
      'failed',
      'no usable study arrived within 1440 minutes',
    );
    await drain(worker(s), order.id);
    const [dr] = await ehr.search<DiagnosticReport>(
      'DiagnosticReport',
      `identifier=urn:imaging-ai-adapter:diagnostic-report|${order.id}`,
    );
    expect(dr).toMatchObject({
      status: 'cancelled',
      conclusion: expect.stringContaining('no usable study arrived'),
    });
    const oru = parseHl7(ris.received.slice(before).at(-1)!);
    expect([oru.get('ORC-1'), oru.get('ORC-5'), oru.get('OBR-25')]).toEqual(['OC', 'CA', 'X']);
  }, 30_000);

  it('the Task of a cancelled order names the upstream status in businessStatus, not the note of the mapping table for the analyst (was: "ORC-1 CR when the orderer asked for the cancel, OC otherwise")', async () => {
    const s = settings();
    const events = new OutboxOrderEvents(s);
    const order = await seedOrder(db.dataSource, { source });
    await playStatus(db.dataSource, events, order, 'CANCELLED');
    await drain(worker(s), order.id);
    const [task] = await ehr.search<Task>(
      'Task',
      `identifier=urn:imaging-ai-adapter:order|${order.id}`,
    );
    expect(task).toMatchObject({
      status: 'cancelled',
      statusReason: { text: 'the order was cancelled' },
      businessStatus: { coding: [{ code: 'CANCELLED' }], text: 'CANCELLED' },
    });
    expect(JSON.stringify(task)).not.toMatch(/ORC-1|OC otherwise/);
  }, 30_000);

  it('the Task of an order ended here says so in businessStatus as a coded concept a clinician can read (our system, the row key as code, a display, a short text), stored by the validating EHR (was: text "ENDED_LOCALLY_CANCELLED", the key under the upstream-status system)', async () => {
    const s = settings();
    const events = new OutboxOrderEvents(s);
    const expected = {
      failed: {
        code: 'ENDED_LOCALLY_FAILED',
        display: 'Failed without a result (ended by the adapter)',
        text: 'failed, no result',
      },
      cancelled: {
        code: 'ENDED_LOCALLY_CANCELLED',
        display: 'Cancelled without a result (ended by the adapter)',
        text: 'cancelled, no result',
      },
    } as const;
    for (const state of ['failed', 'cancelled'] as const) {
      const order = await seedOrder(db.dataSource, {});
      await endLocally(
        db.dataSource,
        events,
        order,
        state,
        'the study could not be sent to the analysis service; no result will come',
      );
      await drain(worker(s), order.id);
      const [task] = await ehr.search<Task>(
        'Task',
        `identifier=urn:imaging-ai-adapter:order|${order.id}`,
      );
      const { code, display, text } = expected[state];
      expect(task?.businessStatus).toEqual({
        coding: [{ system: 'urn:imaging-ai-adapter:local-end', code, display }],
        text,
      });
    }
  }, 60_000);

  it('a resend after an upstream correction is `corrected` (FHIR) and C (OBR-25, OBX-11), as an update', async () => {
    const s = settings();
    const events = new OutboxOrderEvents(s);
    const order = await seedOrder(db.dataSource, { source });
    await playStatus(db.dataSource, events, order, 'DELIVERED', { documents: RESULT_DOCS });
    await drain(worker(s), order.id);
    const before = ris.received.length;
    await db.dataSource
      .transaction(async (manager) => {
        const { storeDocuments } = await import('./outbound-seed');
        const stored = await storeDocuments(
          manager,
          order.id,
          'DELIVERED',
          RESULT_DOCS.map((d) => ({ ...d, reportType: d.reportType })),
        );
        await events.documentsStored(manager, {
          order: order.snapshot,
          upstreamStatus: 'DELIVERED',
          documents: stored,
        });
      })
      .catch(async () => {
        // order_documents is unique per (order, status, kind, type): a correction replaces the body.
        await db.dataSource.query(`DELETE FROM order_documents WHERE order_id = $1`, [order.id]);
        await db.dataSource.transaction(async (manager) => {
          const { storeDocuments } = await import('./outbound-seed');
          const stored = await storeDocuments(manager, order.id, 'DELIVERED', RESULT_DOCS);
          await events.documentsStored(manager, {
            order: order.snapshot,
            upstreamStatus: 'DELIVERED',
            documents: stored,
          });
        });
      });
    await drain(worker(s), order.id);
    const reports = await ehr.search<DiagnosticReport>(
      'DiagnosticReport',
      `identifier=urn:imaging-ai-adapter:diagnostic-report|${order.id}`,
    );
    expect(reports).toHaveLength(1);
    expect(reports[0]!.status).toBe('corrected');
    const oru = parseHl7(ris.received.slice(before).at(-1)!);
    expect(oru.get('OBR-25')).toBe('C');
    expect(oru.segmentsById('OBX').every((o) => o.value(11) === 'C')).toBe(true);
    // The PACS gets a new SR that names the one it corrects.
    const { dicomUidsFor } = await import('../../src/mappings/publication.model');
    const uids = dicomUidsFor(order.id, 1, source.attributes.studyInstanceUid);
    const found = (await (
      await fetch(`${orthanc.url}/tools/lookup`, { method: 'POST', body: uids.srInstanceUid })
    ).json()) as Array<{ ID: string }>;
    expect(found).toHaveLength(1);
    const file = join(tmp, 'corrected-sr.dcm');
    writeFileSync(
      file,
      Buffer.from(
        await (await fetch(`${orthanc.url}/instances/${found[0]!.ID}/file`)).arrayBuffer(),
      ),
    );
    expect(dciodvfy(file).errors).toEqual([]);
    const dump = execFileSync('dcmdump', [file], { encoding: 'utf8' });
    expect(dump).toContain('PredecessorDocumentsSequence');
    expect(dump).toContain(`[${uids.previousSrInstanceUid}]`);
  }, 30_000);

  it('successive corrections each get their own Instance Number in the SR and PDF series', async () => {
    // Two amended results after the first: the PACS holds three SRs in one series, each a
    // document that replaces the one before (Predecessor Documents Sequence). Viewers and
    // PACS order a series by Instance Number, and the series' instances must be told apart by
    // it (PS3.3 C.7.6.1.1.1 / C.17.2): 1, 2, 3, not 1, 2, 2.
    const s = settings({ destinations: [DESTINATIONS.dicom] });
    const events = new OutboxOrderEvents(s);
    const order = await seedOrder(db.dataSource, { source });
    await playStatus(db.dataSource, events, order, 'DELIVERED', { documents: RESULT_DOCS });
    await drain(worker(s), order.id);
    const { storeDocuments } = await import('./outbound-seed');
    for (let correction = 1; correction <= 2; correction++) {
      await db.dataSource.query(`DELETE FROM order_documents WHERE order_id = $1`, [order.id]);
      await db.dataSource.transaction(async (manager) => {
        const stored = await storeDocuments(manager, order.id, 'DELIVERED', RESULT_DOCS);
        await events.documentsStored(manager, {
          order: order.snapshot,
          upstreamStatus: 'DELIVERED',
          documents: stored,
        });
      });
      await drain(worker(s), order.id);
    }
    const { dicomUidsFor } = await import('../../src/mappings/publication.model');
    const numbersOf = async (seriesUid: string) => {
      const [series] = (await (
        await fetch(`${orthanc.url}/tools/lookup`, { method: 'POST', body: seriesUid })
      ).json()) as Array<{ ID: string }>;
      const instances = (await (
        await fetch(`${orthanc.url}/series/${series!.ID}/instances`)
      ).json()) as Array<{ MainDicomTags: { SOPInstanceUID: string; InstanceNumber: string } }>;
      return Object.fromEntries(
        instances.map((i) => [
          i.MainDicomTags.SOPInstanceUID,
          Number(i.MainDicomTags.InstanceNumber),
        ]),
      );
    };
    const uids = [0, 1, 2].map((r) =>
      dicomUidsFor(order.id, r, source.attributes.studyInstanceUid),
    );
    expect(await numbersOf(uids[0]!.srSeriesUid)).toEqual({
      [uids[0]!.srInstanceUid]: 1,
      [uids[1]!.srInstanceUid]: 2,
      [uids[2]!.srInstanceUid]: 3,
    });
    expect(await numbersOf(uids[0]!.pdfSeriesUid)).toEqual({
      [uids[0]!.pdfInstanceUid]: 1,
      [uids[1]!.pdfInstanceUid]: 2,
      [uids[2]!.pdfInstanceUid]: 3,
    });
  }, 60_000);

  it.each([
    ['letters', (uid: string) => `${uid}.A1`],
    ['a backslash', (uid: string) => `${uid}\\9`],
    ['an empty component', (uid: string) => uid.replace('.', '..')],
    ['more than 64 characters', (uid: string) => `${uid}.${'1'.repeat(64)}`],
  ])(
    'a study whose Study Instance UID is not a valid UID (%s): no SR or PDF built or sent, a dead letter on the order timeline naming the attribute',
    async (_what, spoil) => {
      const s = settings({ destinations: [DESTINATIONS.dicom] });
      const events = new OutboxOrderEvents(s);
      const spoilt = structuredClone(source);
      spoilt.attributes.studyInstanceUid = spoil(source.attributes.studyInstanceUid);
      const order = await seedOrder(db.dataSource, { source: spoilt });
      const countBefore = ((await (await fetch(`${orthanc.url}/instances`)).json()) as string[])
        .length;
      await playStatus(db.dataSource, events, order, 'DELIVERED', { documents: RESULT_DOCS });
      await drain(worker(s), order.id);
      const rows = await outbox(order.id);
      expect(rows.map((r) => [r.kind, r.status, r.attempts])).toEqual([
        ['dicom-sr', 'dead', 1],
        ['dicom-pdf', 'dead', 1],
      ]);
      for (const r of rows)
        expect(r.last_error).toMatch(/^StudyInstanceUID is not a valid DICOM UID/);
      const audit: Array<{ kind: string; summary: string; detail: Record<string, unknown> }> =
        await db.dataSource.query(
          `SELECT kind, summary, detail FROM audit_events WHERE order_id = $1 AND kind = 'outbound.dead-letter' ORDER BY id`,
          [order.id],
        );
      expect(audit).toHaveLength(2);
      for (const a of audit)
        expect(JSON.stringify(a)).toContain('StudyInstanceUID is not a valid DICOM UID');
      // nothing reached the PACS under an altered UID
      expect(((await (await fetch(`${orthanc.url}/instances`)).json()) as string[]).length).toBe(
        countBefore,
      );
    },
  );

  it('the EHR refuses an invalid resource with an OperationOutcome: dead letter with the answer audited', async () => {
    const s = settings({ destinations: [DESTINATIONS.fhir] });
    const events = new OutboxOrderEvents(s);
    const order = await seedOrder(db.dataSource, { source });
    // A site override that writes a Task status that is no valid FHIR code (leading space); our own check is off here so
    // the EHR's validation is what refuses it.
    const bad = settings({
      destinations: [DESTINATIONS.fhir],
      overrides: { ANALYSIS_RUNNING: { task: { status: ' in-progress' as never } } },
    });
    await playStatus(db.dataSource, new OutboxOrderEvents(bad), order, 'ANALYSIS_RUNNING');
    const w = new OutboxWorker({
      dataSource: db.dataSource,
      settings: s,
      logger,
      pollMs: 20,
      concurrency: 2,
      publishers: [new FhirResultPublisher({ baseUrl: ehr.baseUrl, validate: false })],
    });
    const rejectedBefore = ehr.rejected;
    await drain(w, order.id);
    expect(ehr.rejected).toBe(rejectedBefore + 1);
    const [row] = await outbox(order.id);
    expect(row).toMatchObject({ status: 'dead', attempts: 1 });
    const audit: Array<{
      kind: string;
      severity: string;
      summary: string;
      detail: Record<string, unknown>;
    }> = await db.dataSource.query(
      `SELECT kind, severity, summary, detail FROM audit_events WHERE order_id = $1 AND kind LIKE 'outbound.%' ORDER BY id`,
      [order.id],
    );
    expect(audit.map((a) => [a.kind, a.severity])).toEqual([
      ['outbound.attempt', 'error'],
      ['outbound.dead-letter', 'error'],
    ]);
    expect(audit[0]!.detail).toMatchObject({
      outboxId: row!.id,
      destination: 'ehr-fhir',
      httpStatus: 400,
      operationOutcome: expect.any(Array),
    });
    // the EHR's status and OperationOutcome as it answered, kept for the audit page
    const [{ x }] = await db.dataSource.query(
      `SELECT last_exchange AS x FROM outbox WHERE id = $1`,
      [row!.id],
    );
    expect(x.answer.status).toBe(400);
    expect(JSON.parse(x.answer.text).resourceType).toBe('OperationOutcome');
    expect(JSON.parse(x.sent.text).resourceType).toBe('Task');
    // With our validator on, the same resource never leaves.
    const w2 = new OutboxWorker({
      dataSource: db.dataSource,
      settings: s,
      logger,
      pollMs: 20,
      concurrency: 2,
      publishers: [new FhirResultPublisher({ baseUrl: ehr.baseUrl })],
    });
    await db.dataSource.query(
      `UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = now() WHERE id = $1`,
      [row!.id],
    );
    await drain(w2, order.id);
    expect(ehr.rejected).toBe(rejectedBefore + 1);
    const [again] = await outbox(order.id);
    expect(again!.last_error).toMatch(/failed R4 validation/);
    void events;
  }, 30_000);

  it('SMART: a revoked token gets one renewal after the 401, and the Task is stored', async () => {
    const s = settings({ destinations: [DESTINATIONS.fhir] });
    const order = await seedOrder(db.dataSource, { source });
    await playStatus(db.dataSource, new OutboxOrderEvents(s), order, 'ANALYSIS_RUNNING');
    const issued: string[] = [];
    let current = 'revoked-token';
    const smart = {
      token: () => {
        issued.push(current);
        return Promise.resolve(current);
      },
      invalidate: () => {
        current = 'fresh-token';
      },
    };
    ehr.requiredToken = 'fresh-token';
    try {
      const w = new OutboxWorker({
        dataSource: db.dataSource,
        settings: s,
        logger,
        pollMs: 20,
        concurrency: 1,
        publishers: [new FhirResultPublisher({ baseUrl: ehr.baseUrl, smart })],
      });
      await drain(w, order.id);
    } finally {
      ehr.requiredToken = undefined;
    }
    expect(issued).toEqual(['revoked-token', 'fresh-token']);
    expect((await outbox(order.id))[0]).toMatchObject({ status: 'delivered', attempts: 1 });
  }, 30_000);

  it('MLLP over TLS: the RIS certificate is verified against the configured CA', async () => {
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        join(tmp, 'ris-key.pem'),
        '-out',
        join(tmp, 'ris-cert.pem'),
        '-days',
        '1',
        '-subj',
        '/CN=127.0.0.1',
        '-addext',
        'subjectAltName=IP:127.0.0.1',
      ],
      { stdio: 'ignore' },
    );
    const cert = readFileSync(join(tmp, 'ris-cert.pem'));
    const secure = await startAckingRis(undefined, {
      key: readFileSync(join(tmp, 'ris-key.pem')),
      cert,
    });
    try {
      const s = settings({ destinations: [DESTINATIONS.hl7] });
      const tlsWorker = (ca?: Buffer) =>
        new OutboxWorker({
          dataSource: db.dataSource,
          settings: s,
          logger,
          pollMs: 20,
          concurrency: 1,
          publishers: [
            new Hl7ResultPublisher({
              host: '127.0.0.1',
              port: secure.port,
              responseTimeoutMs: 2000,
              settings: s.hl7,
              connections: 1,
              tls: ca ? { ca } : {},
            }),
          ],
        });
      // Not trusted (system CAs only): retried, nothing reaches the RIS.
      const untrusted = await seedOrder(db.dataSource, { source });
      await playStatus(db.dataSource, new OutboxOrderEvents(s), untrusted, 'CANCELLED');
      await drain(tlsWorker(), untrusted.id).catch(() => undefined);
      expect((await outbox(untrusted.id))[0]).toMatchObject({ status: 'dead' });
      expect(secure.received).toHaveLength(0);
      // Trusted: delivered over TLS.
      const order = await seedOrder(db.dataSource, { source });
      await playStatus(db.dataSource, new OutboxOrderEvents(s), order, 'CANCELLED');
      await drain(tlsWorker(cert), order.id);
      expect((await outbox(order.id))[0]).toMatchObject({ status: 'delivered', attempts: 1 });
      expect(secure.received).toHaveLength(1);
    } finally {
      await secure.close();
    }
  }, 30_000);

  it('RIS answering AE then AA: retried with backoff, delivered on the second attempt, both answers audited', async () => {
    const flaky = await startAckingRis((n) => (n === 1 ? 'AE' : 'AA'));
    try {
      const s = settings({ destinations: [DESTINATIONS.hl7] });
      const events = new OutboxOrderEvents(s);
      const order = await seedOrder(db.dataSource, { source });
      await playStatus(db.dataSource, events, order, 'CANCELLED');
      await drain(worker(s, flaky.port), order.id);
      const [row] = await outbox(order.id);
      expect(row).toMatchObject({ kind: 'hl7-oru', status: 'delivered', attempts: 2 });
      expect(flaky.received).toHaveLength(2);
      // The resend keeps its MSH-10, so the RIS can tell it is the same message.
      expect(parseHl7(flaky.received[0]!).controlId).toBe(parseHl7(flaky.received[1]!).controlId);
      const audit: Array<{ severity: string; detail: { ackCode: string } }> =
        await db.dataSource.query(
          `SELECT severity, detail FROM audit_events WHERE order_id = $1 AND kind = 'outbound.attempt' ORDER BY id`,
          [order.id],
        );
      expect(audit.map((a) => [a.severity, a.detail.ackCode])).toEqual([
        ['warning', 'AE'],
        ['info', 'AA'],
      ]);
    } finally {
      await flaky.close();
    }
  }, 30_000);

  it('RIS dropping the connection: retried until the attempts run out, then a dead letter; a replay delivers it', async () => {
    const dropping = await startDroppingRis();
    const s = settings({ destinations: [DESTINATIONS.hl7] });
    const events = new OutboxOrderEvents(s);
    const order = await seedOrder(db.dataSource, { source });
    await playStatus(db.dataSource, events, order, 'EXPIRED');
    await drain(worker(s, dropping.port), order.id);
    await dropping.close();
    const [row] = await outbox(order.id);
    expect(row).toMatchObject({ status: 'dead', attempts: 4 });
    expect(row!.last_error).toMatch(/gave up after 4 attempts/);
    expect(dropping.received.length).toBe(4);
    // Replay as the audit API does it: pending, attempts reset, due now.
    await db.dataSource.query(
      `UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = now() WHERE id = $1`,
      [row!.id],
    );
    await drain(worker(s), order.id);
    expect((await outbox(order.id))[0]).toMatchObject({ status: 'delivered', attempts: 1 });
  }, 30_000);

  it('RIS answering AR: a dead letter at once', async () => {
    const refusing = await startAckingRis(() => 'AR');
    try {
      const s = settings({ destinations: [DESTINATIONS.hl7] });
      const order = await seedOrder(db.dataSource, { source });
      await playStatus(db.dataSource, new OutboxOrderEvents(s), order, 'CANCELLED');
      await drain(worker(s, refusing.port), order.id);
      expect((await outbox(order.id))[0]).toMatchObject({ status: 'dead', attempts: 1 });
      const [{ x }] = await db.dataSource.query(
        `SELECT last_exchange AS x FROM outbox WHERE order_id = $1`,
        [order.id],
      );
      expect(x.answer.text).toMatch(/\rMSA\|AR\|/); // the RIS's ACK bytes
      expect(x.outcome).toBe('dead');
    } finally {
      await refusing.close();
    }
  }, 30_000);

  it('two replicas draining one outbox: each row sent once, and in order per order', async () => {
    const s = settings({ destinations: [DESTINATIONS.hl7], ormStatusMessages: true });
    const events = new OutboxOrderEvents(s);
    const orders = [];
    for (let i = 0; i < 12; i++) orders.push(await seedOrder(db.dataSource, { source }));
    const before = ris.received.length;
    // Three intermediate statuses and the result per order, written before any worker runs.
    for (const order of orders) {
      for (const status of ['QUEUED', 'ANALYSIS_RUNNING', 'IN_REVIEW', 'DELIVERED'] as const) {
        await playStatus(
          db.dataSource,
          events,
          order,
          status,
          status === 'DELIVERED' ? { documents: RESULT_DOCS } : {},
        );
      }
    }
    await drainAll(
      [worker(s), worker(s)],
      orders.map((o) => o.id),
    );
    const rows = (await db.dataSource.query(
      `SELECT order_id, id::text, status, attempts FROM outbox WHERE order_id = ANY($1::uuid[]) ORDER BY outbox.id`,
      [orders.map((o) => o.id)],
    )) as Array<{ order_id: string; id: string; status: string; attempts: number }>;
    expect(rows).toHaveLength(12 * 4); // three ORM status messages and the ORU
    expect(rows.every((r) => r.status === 'delivered' && r.attempts === 1)).toBe(true);
    const sent = ris.received.slice(before).map((m) => parseHl7(m));
    expect(sent).toHaveLength(rows.length);
    // Per order, the RIS saw the messages in the order they were written (MSH-10 = IAA<outbox id>).
    for (const order of orders) {
      const ids = rows.filter((r) => r.order_id === order.id).map((r) => `IAA${r.id}`);
      const placer = sent.filter((m) => ids.includes(m.controlId)).map((m) => m.controlId);
      expect(placer).toEqual(ids);
    }
  }, 60_000);

  it('a row whose worker died mid-delivery is taken again once its lease lapses', async () => {
    const s = settings({ destinations: [DESTINATIONS.hl7] });
    const order = await seedOrder(db.dataSource, { source });
    await playStatus(db.dataSource, new OutboxOrderEvents(s), order, 'CANCELLED');
    // As a claim leaves it: attempt counted, leased for a while, and then nobody answers.
    await db.dataSource.query(
      `UPDATE outbox SET attempts = 1, next_attempt_at = now() + interval '300 milliseconds' WHERE order_id = $1`,
      [order.id],
    );
    const w = worker(s);
    const drained = drain(w, order.id);
    await new Promise((r) => setTimeout(r, 100));
    expect((await outbox(order.id))[0]).toMatchObject({ status: 'pending', attempts: 1 });
    await drained;
    expect((await outbox(order.id))[0]).toMatchObject({ status: 'delivered', attempts: 2 });
  }, 30_000);
});

/** dciodvfy (dicom3tools) names the IOD it checked and prints each error on a line starting "Error". */
function dciodvfy(file: string): { iod: string; errors: string[] } {
  const out = execFileSync('sh', ['-c', 'dciodvfy "$1" 2>&1 || true', 'sh', file], {
    encoding: 'utf8',
  });
  return { iod: out, errors: out.split('\n').filter((l) => /^Error/.test(l)) };
}
