import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DiagnosticReport, Task } from '@medplum/fhirtypes';
import type { Client as PgClient } from 'pg';
import type { MllpClient } from '../../src/hl7';
import { parseHl7, type Hl7Message } from '../../src/hl7/hl7-message';
import { OrderPollerService } from '../../src/orders/order-poller.service';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { createMrBrainSeries } from '../helpers/dicom-factory';
import { ackSummary, hl7Fixture } from '../helpers/hl7-fixtures';
import { multipartRelated } from '../studies/study-test-support';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import {
  type Hl7OrderSpec,
  newOrderSpec,
  orderByPlacer,
  orderDiagnostics,
  orderState,
  ormMessage,
  placeWithStudy,
  SANDBOX_CLIENT,
  waitFor,
  writeSiteConfig,
} from '../e2e/e2e-support';
import { startScriptedUpstream, type SeenRequest } from '../imaging-client/scripted-upstream';
import {
  startAckingRis,
  startValidatingEhr,
  type TestEhr,
  type TestRis,
} from '../outbound/outbound-peers';
import { dciodvfyErrors } from '../helpers/dicom-validators';

jest.setTimeout(240_000);

/**
 * What the upstream says about an order's outcome, and what we then publish. A running adapter
 * follows the sandbox through a scripted service in front of it that, for one order at a time,
 * changes an answer the way a broken or hostile Imaging Analysis Service could: a report naming
 * another order or study, a "PDF" that is an HTML page, measurements no report can hold, two
 * reports that disagree on the outcome, a status answer about another order. What reaches the
 * EHR (validating FHIR engine), the RIS (ORU over MLLP) and the PACS (Orthanc, then dciodvfy)
 * must say what the status table says, and nothing the upstream did not say of this order.
 */

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}
/** A change to one answer of the sandbox: return the answer to send instead, or undefined. */
type Rewrite = (req: SeenRequest, answer: Answer) => Answer | undefined;

function jsonAnswer(answer: Answer, body: unknown): Answer {
  return {
    ...answer,
    headers: { 'content-type': 'application/json' },
    body: Buffer.from(JSON.stringify(body)),
  };
}

describe('hostile upstream: outcomes and what we publish', () => {
  let sandbox: RunningSandbox;
  let upstream: Awaited<ReturnType<typeof startScriptedUpstream>>;
  let orthanc: RunningOrthanc;
  let ehr: TestEhr;
  let ris: TestRis;
  let harness: MllpHarness | undefined;
  let adapter: TestAdapter;
  let mllp: MllpClient;
  let db: PgClient;
  let poller: OrderPollerService;
  let dir: string;
  const rewrites: Rewrite[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'upstream-results-'));
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', clock: 'manual', dataDir: dir });
    // The sandbox behind a scripted service: every call forwarded, its answer then rewritten.
    upstream = await startScriptedUpstream(async (req, res) => {
      const url = new URL(`${sandbox.baseUrl}${req.path}`);
      url.search = req.query.toString();
      const headers: Record<string, string> = {};
      for (const h of ['authorization', 'content-type']) {
        const v = req.headers[h];
        if (typeof v === 'string') headers[h] = v;
      }
      const forwarded = await fetch(url, {
        method: req.method,
        headers,
        ...(req.body.length > 0 ? { body: req.body } : {}),
      });
      let answer: Answer = {
        status: forwarded.status,
        headers: Object.fromEntries(
          [...forwarded.headers].filter(([k]) =>
            /^(content-type|x-qc-round|retry-after)$/i.test(k),
          ),
        ),
        body: Buffer.from(await forwarded.arrayBuffer()),
      };
      for (const rewrite of rewrites) answer = rewrite(req, answer) ?? answer;
      res.writeHead(answer.status, answer.headers);
      res.end(answer.body);
    });
    orthanc = await startOrthanc();
    ehr = await startValidatingEhr();
    ris = await startAckingRis();
    harness = await startMllpHarness({
      JOBS_ENABLED: 'true',
      IMAGING_BASE_URL: upstream.baseUrl,
      ...SANDBOX_CLIENT,
      IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true',
      FHIR_SERVER_URL: ehr.baseUrl,
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: String(ris.port),
      DICOMWEB_URL: orthanc.dicomWebUrl,
      OUTBOUND_POLL_MS: '50',
      STUDY_QUIET_PERIOD_SECONDS: '1',
      CONFIG_FILE: writeSiteConfig(dir),
      POLL_INTERVAL_SECONDS: '3600',
    });
    ({ adapter, mllp, db } = harness);
    poller = adapter.app.get(OrderPollerService);
  });

  afterAll(async () => {
    await harness?.close();
    await upstream?.close();
    await sandbox?.close();
    await ris?.close();
    await ehr?.close();
    await orthanc?.stop();
  });

  afterEach(() => {
    rewrites.length = 0;
  });

  /**
   * An order placed with its study, uploaded: its id, the upstream's id and its placer number.
   * `patientName`: the study's Patient Name (PN) instead of the order's.
   */
  async function processing(outcome = 'delivered', patientName?: string) {
    const spec = newOrderSpec(`Bitte KI-Auswertung. sandbox-outcome: ${outcome}`);
    const id = patientName
      ? await placeWithNamedStudy(spec, patientName)
      : await placeWithStudy({ adapter, mllp, db }, spec);
    await waitFor(
      'the order uploaded',
      async () => (await orderState(db, id)) === 'processing',
      90_000,
      200,
      () => orderDiagnostics(db, id),
    );
    const { rows } = await db.query(`SELECT upstream_order_id FROM orders WHERE id = $1`, [id]);
    return { id, spec, upstreamId: rows[0].upstream_order_id as string };
  }

  /** placeWithStudy, the study's patient named `patientName` (its identifiers the order's). */
  async function placeWithNamedStudy(spec: Hl7OrderSpec, patientName: string): Promise<string> {
    const instances = createMrBrainSeries({
      patient: { patientId: spec.patientId, patientName, birthDate: '19640812', sex: 'F' },
      study: { studyInstanceUid: spec.studyUid, accessionNumber: spec.accession },
      series: { slices: 4, rows: 32, columns: 32 },
      seed: 7,
    });
    const { body, contentType } = multipartRelated(instances.map((i) => ({ data: i.bytes })));
    const stored = await fetch(`${adapter.httpUrl}/dicomweb/studies`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, 'content-type': contentType },
      body,
    });
    expect(stored.status).toBe(200);
    expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    return (await waitFor('the order', () => orderByPlacer(db, spec.placer))).id as string;
  }

  /** Moves the sandbox on and polls until the order leaves `processing`. */
  async function followToEnd(id: string): Promise<string> {
    for (let i = 0; i < 40; i++) {
      const state = await orderState(db, id);
      if (state !== 'processing' && state !== 'qc-hold') return state;
      await sandbox.advance(5_000);
      await poller.runNow();
    }
    return orderState(db, id);
  }

  /** Waits until no outbox row of the order is pending (and at least `kinds` were written). */
  async function published(id: string, kinds: string[]) {
    return waitFor(
      `publications of ${id}`,
      async () => {
        const { rows } = await db.query<{ kind: string; status: string }>(
          `SELECT kind, status FROM outbox WHERE order_id = $1 ORDER BY id`,
          [id],
        );
        const have = new Set(rows.map((r) => r.kind));
        return kinds.every((k) => have.has(k)) && rows.every((r) => r.status !== 'pending') && rows;
      },
      60_000,
      200,
      () => orderDiagnostics(db, id),
    );
  }

  async function timeline(id: string): Promise<string> {
    const { rows } = await db.query(
      `SELECT kind, severity, summary FROM audit_events WHERE order_id = $1 ORDER BY id`,
      [id],
    );
    return rows.map((r) => `${r.kind}/${r.severity}: ${r.summary}`).join('\n');
  }

  function orusOf(placer: string): Hl7Message[] {
    return ris.received
      .map((m) => parseHl7(m))
      .filter((m) => m.messageType.code === 'ORU' && m.get('ORC-2') === placer);
  }

  async function reportOf(id: string): Promise<DiagnosticReport | undefined> {
    const [dr] = await ehr.search<DiagnosticReport>(
      'DiagnosticReport',
      `identifier=urn:imaging-ai-adapter:diagnostic-report|${id}`,
    );
    return dr;
  }

  /** The upstream's JSON report of `path` for one order, edited on its way to the adapter. */
  function editJsonReport<R = Record<string, unknown>>(
    path: '/results' | '/failure-report',
    upstreamId: string,
    edit: (report: R, answer: Answer) => Answer,
  ): void {
    rewrites.push((req, answer) => {
      if (req.path !== path || req.query.get('order_id') !== upstreamId) return undefined;
      if (req.query.get('report_type') !== 'JSON' || answer.status !== 200) return undefined;
      return edit(JSON.parse(answer.body.toString()) as R, answer);
    });
  }

  const isResults = (req: SeenRequest, upstreamId: string, type: string) =>
    req.path === '/results' &&
    req.query.get('order_id') === upstreamId &&
    req.query.get('report_type') === type;

  /** A delivered result carrying the QC-bypass caution in its DiagnosticReport and ORU text. */
  async function expectQcCaution(id: string, placer: string): Promise<string> {
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    const caution = 'QC failure was bypassed on user request: interpret with caution.';
    expect((await reportOf(id))?.conclusion).toContain(caution);
    const [oru] = orusOf(placer);
    const report = oru!.segmentsById('OBX').find((o) => o.value(3) === 'REPORT')!;
    const lines = Array.from({ length: report.repetitionCount(5) }, (_, i) =>
      report.value(5, i + 1),
    );
    expect(lines).toContain(caution);
    return caution;
  }

  /** DELIVERED whose results JSON was refused for `reason` (and the PDF with it). */
  async function expectResultsRefused(id: string, placer: string, reason: string) {
    const fetched = await waitFor('the documents fetched', async () =>
      (await timeline(id)).match(/order\.documents-fetched\/(\w+): (.*)/),
    );
    expect(fetched[1]).toBe('error');
    expect(fetched[2]).toBe(
      `0 document(s) stored for DELIVERED; not available: results JSON: refused: ${reason}; results PDF: refused with the results JSON report; no result is published from these reports`,
    );
    await expectNoResultInstead(id, placer, 'results JSON');
  }

  /**
   * DELIVERED whose results were refused: the clinic is told no result is coming (Task failed,
   * DiagnosticReport cancelled, ORU OBR-25 X), not left with the Task `completed` of DELIVERED
   * naming a report that never comes; nothing of the refused report is in what is sent.
   */
  async function expectNoResultInstead(id: string, placer: string, refused: string) {
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru']);
    expect(rows.map((r) => r.kind)).toEqual([
      'fhir-task',
      'fhir-task',
      'fhir-task',
      'fhir-diagnostic-report',
      'hl7-oru',
    ]);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    const [task] = await ehr.search<Task>('Task', `identifier=urn:imaging-ai-adapter:order|${id}`);
    expect(task?.status).toBe('failed');
    const dr = await reportOf(id);
    expect(dr?.status).toBe('cancelled');
    expect(JSON.stringify(dr)).not.toContain('another patient');
    const orus = orusOf(placer);
    expect(orus.map((m) => [m.get('ORC-1'), m.get('ORC-5'), m.get('OBR-25')])).toEqual([
      ['OC', 'CA', 'X'],
    ]);
    // The clinic reads the sentence of CLINICAL_END_REASONS in every field it reads (ORC-16, the
    // text OBX, the Task's statusReason, the DiagnosticReport's conclusion); which report was
    // refused, and why, is the analyst's (timeline, last_error). Before, the clinic read
    // "the results JSON report is not this order's results".
    const clinical = [
      ...orus.flatMap((m) => [
        m.get('ORC-16.2') ?? '',
        ...m
          .segmentsById('OBX')
          .filter((s) => s.value(2) === 'TX')
          .map((s) => s.value(5) ?? ''),
      ]),
      task?.statusReason?.text ?? '',
      dr?.conclusion ?? '',
    ];
    for (const text of clinical) {
      // the sentence alone: capitalised where it stands as one (conclusion, OBX)
      expect(text.toLowerCase()).toContain(
        'the results the analysis service returned belonged to another order and were not used; no result will come. order it again if still needed',
      );
      expect(text).not.toMatch(/JSON|PDF|report is not|refused/);
    }
    expect(await timeline(id)).toMatch(
      new RegExp(
        `order\\.alert/error: results-refused: .*the ${refused} report is not this order's results`,
      ),
    );
    const { rows: lastError } = await db.query(`SELECT last_error FROM orders WHERE id = $1`, [id]);
    expect(lastError[0].last_error).toContain(`the ${refused} report is not this order's results`);
    const { rows: order } = await db.query(`SELECT state, alert FROM orders WHERE id = $1`, [id]);
    expect(order[0]).toEqual({ state: 'delivered', alert: 'results-refused' });
  }

  it('a results report naming another order and another study is not published as this patient’s result', async () => {
    // Before: its findings and impression went out as this patient's final DiagnosticReport,
    // ORU (OBR-25 F) and SR.
    const { id, spec, upstreamId } = await processing();
    editJsonReport('/results', upstreamId, (report, answer) => {
      return jsonAnswer(answer, {
        ...report,
        order_id: '7d0c1e52-9b7a-4c1e-8f3a-2b6d5e4c3a21',
        study_uid: '1.2.826.0.1.3680043.8.498.99999999999999999999',
        impression: 'Right hippocampus volume below the 5th percentile (another patient).',
      });
    });
    expect(await followToEnd(id)).toBe('delivered');
    await expectResultsRefused(
      id,
      spec.placer,
      'names another order (its order_id is not the one asked for)',
    );
  });

  it('a results report naming this order and study but another patient and accession is not published as this patient’s result', async () => {
    // The sandbox's JSON report, like the vendor's samples, repeats the order's patient and
    // accession (patient_id, accession_number: the metadata we sent). An upstream that mixed up
    // two orders' reports kept our order_id and study_uid but carried another patient's ID and
    // accession. Before, only order_id and study_uid were compared and its findings went out as
    // this patient's final DiagnosticReport, ORU (OBR-25 F) and SR.
    const { id, spec, upstreamId } = await processing();
    editJsonReport('/results', upstreamId, (report, answer) => {
      expect(report.patient_id).toBe(spec.patientId);
      expect(report.accession_number).toBe(spec.accession);
      return jsonAnswer(answer, {
        ...report,
        patient_id: 'PAT-OTHER-4711',
        accession_number: 'ACC-OTHER-0815',
        impression: 'Right hippocampus volume below the 5th percentile (another patient).',
      });
    });
    expect(await followToEnd(id)).toBe('delivered');
    await expectResultsRefused(
      id,
      spec.placer,
      "names another patient (its patient_id is not the order's)",
    );
  });

  it('a results report naming the record number an ADT^A40 merged away while the analysis ran is this patient’s result, published under the surviving record', async () => {
    // The registry merges the order's record (MRG-1) into the surviving one (PID-3) while the
    // upstream analyses the study (IHE PAM ITI-30, HL7 v2.5.1 §3.3.40; fixture adt-a40-v251-merge).
    // The order moves to the surviving record and PATCH /add-metadata follows, but the report
    // was written from the metadata of the create: it names the record number the order had
    // when it was placed. Before, that number was no longer one of the order's identifiers, the
    // report was refused as another patient's and the result was lost.
    const { id, spec, upstreamId } = await processing();
    const surviving = `${spec.patientId}S`;
    const a40 = hl7Fixture('adt-a40-v251-merge')
      .toString('latin1')
      .replace('MPI-20240320-000112', `A40-${spec.placer}`)
      .replace('PAT-4711^^^HOSPA^MR', `${surviving}^^^E2EHOSP^MR`)
      .replace('PAT-9902^^^HOSPA^MR', `${spec.patientId}^^^E2EHOSP^MR`)
      .replace('SCHMIDT-BERGER^ANNA^MARIA', 'MUSTERMANN^ERIKA')
      .replace('19560214|F', '19640812|F');
    expect(ackSummary(await mllp.send(Buffer.from(a40, 'latin1')))).toMatchObject({
      code: 'AA',
      errors: [],
    });
    await waitFor('the order moved to the surviving record', async () => {
      const { rows } = await db.query(`SELECT patient_id FROM orders WHERE id = $1`, [id]);
      return rows[0].patient_id === surviving;
    });
    editJsonReport('/results', upstreamId, (report, answer) =>
      jsonAnswer(answer, { ...report, patient_id: spec.patientId }),
    );
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect((await reportOf(id))?.status).toBe('final');
    const orus = orusOf(spec.placer);
    expect(orus.map((m) => m.get('OBR-25'))).toEqual(['F']);
    expect(orus[0]!.getAll('PID-3.1')).toEqual([surviving]);
    expect(await timeline(id)).not.toMatch(/another patient/);
  });

  it('an upstream refusal of the merge’s metadata that repeats the retired record number does not write it into the timeline', async () => {
    // The PATCH /add-metadata after the A40 refused with a body naming the patient_id the order
    // was created under (the upstream knows it from the create). The timeline masks the
    // patient's known values; before, the retired number was no longer one of them and was
    // written out as the upstream said it.
    const { id, spec } = await processing();
    rewrites.push((req, answer) =>
      req.path === '/add-metadata'
        ? jsonAnswer(
            { ...answer, status: 400 },
            {
              error: `patient_id ${spec.patientId}S does not match ${spec.patientId} of the study`,
            },
          )
        : undefined,
    );
    const a40 = hl7Fixture('adt-a40-v251-merge')
      .toString('latin1')
      .replace('MPI-20240320-000112', `A40M-${spec.placer}`)
      .replace('PAT-4711^^^HOSPA^MR', `${spec.patientId}S^^^E2EHOSP^MR`)
      .replace('PAT-9902^^^HOSPA^MR', `${spec.patientId}^^^E2EHOSP^MR`);
    expect(ackSummary(await mllp.send(Buffer.from(a40, 'latin1'))).code).toBe('AA');
    const refused = await waitFor(
      'the refused metadata on the timeline',
      async () => (await timeline(id)).match(/changed metadata not accepted upstream: .*/)?.[0],
    );
    expect(refused).toContain('does not match');
    expect(refused).not.toContain(spec.patientId);
  });

  it('after an ADT^A40, a results report naming another patient than the merged and surviving records is still refused', async () => {
    const { id, spec, upstreamId } = await processing();
    const a40 = hl7Fixture('adt-a40-v251-merge')
      .toString('latin1')
      .replace('MPI-20240320-000112', `A40-${spec.placer}`)
      .replace('PAT-4711^^^HOSPA^MR', `${spec.patientId}S^^^E2EHOSP^MR`)
      .replace('PAT-9902^^^HOSPA^MR', `${spec.patientId}^^^E2EHOSP^MR`);
    expect(ackSummary(await mllp.send(Buffer.from(a40, 'latin1'))).code).toBe('AA');
    await waitFor('the order moved to the surviving record', async () => {
      const { rows } = await db.query(`SELECT patient_id FROM orders WHERE id = $1`, [id]);
      return rows[0].patient_id === `${spec.patientId}S`;
    });
    editJsonReport('/results', upstreamId, (report, answer) =>
      jsonAnswer(answer, { ...report, patient_id: 'PAT-9902' }),
    );
    expect(await followToEnd(id)).toBe('delivered');
    await expectResultsRefused(
      id,
      spec.placer,
      "names another patient (its patient_id is not the order's)",
    );
  });

  it('a results report naming only another accession of this patient is not published as this order’s result', async () => {
    const { id, spec, upstreamId } = await processing();
    editJsonReport('/results', upstreamId, (report, answer) =>
      jsonAnswer(answer, { ...report, accession_number: `${spec.accession}9` }),
    );
    expect(await followToEnd(id)).toBe('delivered');
    await expectResultsRefused(
      id,
      spec.placer,
      "names another accession (its accession_number is not the order's)",
    );
  });

  it('a failure report answered as the results of a DELIVERED order is not published as a result', async () => {
    // The upstream's /results answered with this order's failure report (its `report_kind`
    // says so, the shape of GET /failure-report: reason, failed_step). Before, it went out as
    // the final result: DiagnosticReport `final` with the conclusion "See the attached
    // report.", ORU OBR-25 F / OBX-11 F, and an SR, for an analysis that had failed.
    const { id, spec, upstreamId } = await processing();
    editJsonReport('/results', upstreamId, (report, answer) =>
      jsonAnswer(answer, {
        report_kind: 'failure',
        order_id: report.order_id,
        study_uid: report.study_uid,
        status: 'FAILED',
        failed_step: 'ANALYSIS_RUNNING',
        reason: 'Segmentation failed: no T1-weighted series found',
        disclaimer: report.disclaimer,
      }),
    );
    expect(await followToEnd(id)).toBe('delivered');
    await expectResultsRefused(
      id,
      spec.placer,
      'is a failure report (its report_kind), not the results asked for',
    );
  });

  it('a results report naming this order in upper case and this study with its DICOM padding is this order’s', async () => {
    // A UUID is the same in either case (RFC 9562 §4), and a UID copied from a DICOM header
    // keeps the NUL that pads it to an even length (PS3.5 §9.1). Before, both were compared as
    // raw text and the report was refused as another order's and another study's: the Task
    // said completed, and the DiagnosticReport, the ORU and the SR never came.
    const { id, spec, upstreamId } = await processing();
    editJsonReport('/results', upstreamId, (report, answer) =>
      jsonAnswer(answer, {
        ...report,
        order_id: upstreamId.toUpperCase(),
        study_uid: `${String(report.study_uid)}\u0000`,
      }),
    );
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect(await timeline(id)).toMatch(
      /order\.documents-fetched\/info: 2 document\(s\) stored for DELIVERED$/m,
    );
    expect((await reportOf(id))?.status).toBe('final');
    expect(orusOf(spec.placer).map((m) => m.get('OBR-25'))).toEqual(['F']);
  });

  it('an upstream that names our order in upper case in its lists and status answers: the order is still followed to its result', async () => {
    // A UUID is the same in either case (RFC 9562 §4); a service that keeps its ids in a
    // uniqueidentifier column answers them upper case on every read after the create's lower
    // case. Before, the order was never found on the active list, and GET /status was refused
    // as "about another order": it stayed processing, flagged every cycle, until the stuck sweep.
    const { id, spec, upstreamId } = await processing();
    let reportsListed = '';
    rewrites.push((req, answer) => {
      if (!['/list-orders', '/status', '/reports'].includes(req.path) || answer.status !== 200)
        return undefined;
      const text = answer.body.toString('utf8').split(upstreamId).join(upstreamId.toUpperCase());
      if (req.path === '/reports' && req.method === 'GET') reportsListed = text;
      return { ...answer, body: Buffer.from(text) };
    });
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect((await reportOf(id))?.status).toBe('final');
    expect(orusOf(spec.placer).map((m) => m.get('OBR-25'))).toEqual(['F']);
    expect(await timeline(id)).not.toMatch(/about another order|upstream\.inconsistent/);
    // Its stored report is acknowledged (POST /reports), so GET /reports stops listing it.
    await poller.runNow();
    await poller.runNow();
    expect(reportsListed).not.toBe('');
    expect(reportsListed).not.toContain(upstreamId.toUpperCase());
  });

  it('results that expired upstream before they were fetched: the EHR and the RIS hear that no result is coming', async () => {
    // The sandbox's `expired` path (DELIVERED, then EXPIRED 5 s later) met by a fetch that comes
    // late: GET /results answers as the sandbox does for an expired order (409
    // report_not_available), and GET /status then says EXPIRED. Before: the order stayed
    // `delivered`, its Task `completed` with an output naming a DiagnosticReport that never
    // came, and the RIS never heard of it again.
    const { id, spec, upstreamId } = await processing();
    let expired = false;
    rewrites.push((req, answer) => {
      if (req.query.get('order_id') !== upstreamId) return undefined;
      if (req.path === '/results') {
        expired = true;
        return jsonAnswer(
          { ...answer, status: 409 },
          {
            error: 'report_not_available',
            message: 'order expired; its results can no longer be retrieved',
          },
        );
      }
      if (req.path === '/status' && expired && answer.status === 200) {
        return jsonAnswer(answer, { ...JSON.parse(answer.body.toString()), status: 'EXPIRED' });
      }
      return undefined;
    });
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru']);
    expect(rows.map((r) => `${r.kind}/${r.status}`)).toEqual([
      'fhir-task/delivered', // ANALYSIS_RUNNING
      'fhir-task/delivered', // DELIVERED
      'fhir-task/delivered', // EXPIRED
      'fhir-diagnostic-report/delivered',
      'hl7-oru/delivered',
    ]);
    const [task] = await ehr.search<Task>('Task', `identifier=urn:imaging-ai-adapter:order|${id}`);
    expect(task).toMatchObject({
      status: 'failed',
      statusReason: { text: 'the order expired upstream' },
      businessStatus: { coding: [{ code: 'EXPIRED' }] },
    });
    expect(await reportOf(id)).toMatchObject({ status: 'cancelled' });
    expect((await reportOf(id))!.result).toBeUndefined();
    const [oru] = orusOf(spec.placer);
    expect([oru!.get('ORC-1'), oru!.get('ORC-5'), oru!.get('OBR-25')]).toEqual(['OC', 'CA', 'X']);
    expect(oru!.segmentsById('OBX').map((o) => o.value(11))).toEqual(
      expect.not.arrayContaining(['F']),
    );
    const events = await timeline(id);
    expect(events).toMatch(
      /order\.documents-fetched\/warning: 0 document\(s\) stored for DELIVERED; not available: results JSON: conflict on results .*; the upstream order has EXPIRED: no result is coming/,
    );
    expect(events).toContain(
      'order.alert/error: results-expired: the upstream order EXPIRED before the results of DELIVERED were fetched; published as EXPIRED (no result)',
    );
    const { rows: order } = await db.query(`SELECT upstream_status FROM orders WHERE id = $1`, [
      id,
    ]);
    expect(order[0].upstream_status).toBe('EXPIRED');
  });

  it('a failure report about another study: the clinic still hears that no result is coming, without it', async () => {
    // Before (known limit): no report stored, so only the Task went out; the RIS never heard
    // that the order had failed.
    const { id, spec, upstreamId } = await processing('failed');
    editJsonReport('/failure-report', upstreamId, (report, answer) => {
      return jsonAnswer(answer, {
        ...report,
        study_uid: '1.2.826.0.1.3680043.8.498.99999999999999999999',
        reason: 'Segmentation failed for ANOTHER PATIENT',
      });
    });
    expect(await followToEnd(id)).toBe('failed');
    await published(id, ['fhir-diagnostic-report', 'hl7-oru']);
    expect(await timeline(id)).toMatch(
      /order\.documents-fetched\/error: 0 document\(s\) stored for FAILED; not available: failure JSON: refused: names another study \(its study_uid is not the order's study\); failure PDF: refused with the failure JSON report/,
    );
    const dr = await reportOf(id);
    expect(dr).toMatchObject({
      status: 'cancelled',
      conclusion: 'No result: the analysis failed.',
    });
    expect(dr?.presentedForm).toBeUndefined();
    const [oru] = orusOf(spec.placer);
    expect([oru?.get('ORC-1'), oru?.get('ORC-5'), oru?.get('OBR-25')]).toEqual(['OC', 'CA', 'X']);
    expect(ris.received.join('\n')).not.toContain('ANOTHER PATIENT');
  });

  it('a results "PDF" that is an HTML page is not published as a PDF; the results are, without it', async () => {
    // Before: the HTML page went to the PACS as an encapsulated PDF, to the EHR as the
    // DiagnosticReport's application/pdf presentedForm and to the RIS as an ED PDF.
    const { id, spec, upstreamId } = await processing();
    rewrites.push((req) =>
      isResults(req, upstreamId, 'PDF')
        ? {
            status: 200,
            headers: { 'content-type': 'application/pdf' },
            body: Buffer.from(
              '<!DOCTYPE html><html><head><title>503</title></head><body>Service temporarily unavailable</body></html>',
            ),
          }
        : undefined,
    );
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect(await timeline(id)).toMatch(
      /order\.documents-fetched\/warning: 1 document\(s\) stored for DELIVERED; not available: results PDF: refused: not a PDF \(no %PDF- header in its first 1024 bytes\)/,
    );
    const dr = await reportOf(id);
    expect(dr?.status).toBe('final');
    expect(dr?.presentedForm).toBeUndefined();
    const [oru] = orusOf(spec.placer);
    expect(oru?.get('OBR-25')).toBe('F');
    expect(
      oru?.segments.filter((seg) => seg.id === 'OBX').map((seg) => seg.value(2)),
    ).not.toContain('ED');
    const series = (await (
      await fetch(`${orthanc.dicomWebUrl}/studies/${spec.studyUid}/series`)
    ).json()) as Array<Record<string, { Value?: string[] }>>;
    expect(series.map((x) => x['00080060']?.Value?.[0])).toEqual(['SR']);
  });

  it('results with a PDF but no usable JSON report: the ORU points to the report, never "No result." as a final text', async () => {
    // A product that answers its JSON report with 404 (report_type not offered) while its PDF
    // comes: the results are the PDF's. Before, the ORU's text OBX said "No result." with
    // OBX-11 F beside that PDF, while the DiagnosticReport said "See the attached report."
    const { id, spec, upstreamId } = await processing();
    rewrites.push((req, answer) =>
      isResults(req, upstreamId, 'JSON')
        ? jsonAnswer(
            { ...answer, status: 404 },
            { error: 'not_found', message: 'report type JSON is not offered for this product' },
          )
        : undefined,
    );
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru']);
    expect(rows.filter((r) => r.kind === 'hl7-oru')).toEqual([
      { kind: 'hl7-oru', status: 'delivered' },
    ]);
    const dr = await reportOf(id);
    expect(dr).toMatchObject({ status: 'final', conclusion: 'See the attached report.' });
    const [oru] = orusOf(spec.placer);
    expect(oru?.get('OBR-25')).toBe('F');
    const obx = oru!.segmentsById('OBX');
    expect(obx.map((o) => o.value(2))).toContain('ED');
    const text = obx.find((o) => o.value(3) === 'REPORT');
    expect(text?.value(5)).toBe('See the attached report.');
    expect(text?.value(11)).toBe('F');
  });

  it('a results report with nothing to publish (no findings, no impression): the ORU and the SR point to the PDF as the DiagnosticReport does', async () => {
    // Before: the DiagnosticReport said "See the attached report.", but the ORU's text OBX was
    // empty with OBX-11 F, and the SR a COMPLETE, FINAL measurement report with no
    // measurement and no text: a final result that read as "nothing found".
    const { id, spec, upstreamId } = await processing();
    editJsonReport('/results', upstreamId, (report, answer) =>
      jsonAnswer(answer, {
        report_kind: 'results',
        order_id: report.order_id,
        study_uid: report.study_uid,
        findings: [],
      }),
    );
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect(await reportOf(id)).toMatchObject({
      status: 'final',
      conclusion: 'See the attached report.',
    });
    const [oru] = orusOf(spec.placer);
    const text = oru!.segmentsById('OBX').find((o) => o.value(3) === 'REPORT');
    expect(text?.value(5)).toBe('See the attached report.');
    expect(text?.value(11)).toBe('F');
    const found = (await (
      await fetch(`${orthanc.url}/tools/find`, {
        method: 'POST',
        body: JSON.stringify({
          Level: 'Instance',
          Query: { StudyInstanceUID: spec.studyUid, Modality: 'SR' },
        }),
      })
    ).json()) as string[];
    const file = join(dir, 'empty-results-sr.dcm');
    writeFileSync(
      file,
      Buffer.from(await (await fetch(`${orthanc.url}/instances/${found[0]}/file`)).arrayBuffer()),
    );
    expect(dciodvfyErrors(file)).toEqual([]);
    const tree = execFileSync('dsrdump', [file], { encoding: 'utf8' });
    expect(tree).toMatch(/"Impression"\)="See the attached report\."/);
  });

  it('measurements no report can hold are left out; the rest are the same number in FHIR, HL7 NM and DICOM DS', async () => {
    // Before: a negative volume, a share of 250 % and a percentile of -3 were published as
    // final measurements; HL7 NM carried `1e+308` and `1e-7` (NM has no exponent); the SR's DS
    // held `1234567890123456` for 123456789012345680 (cut to 16 characters: a hundredth).
    const { id, spec, upstreamId } = await processing();
    editJsonReport('/results', upstreamId, (report, answer) => {
      return jsonAnswer(answer, {
        ...report,
        findings: [
          {
            structure: 'Whole brain',
            volume_ml: 1258.2000000000003,
            icv_percent: 78.18,
            percentile: 23,
            flag: 'normal',
          },
          {
            structure: 'Left hippocampus',
            volume_ml: -4.61,
            icv_percent: 0.29,
            percentile: 3,
            flag: 'low',
          },
          {
            structure: 'Lateral ventricles',
            volume_ml: 1e308,
            icv_percent: 250,
            percentile: 123456789012345680,
            flag: 'high',
          },
          {
            structure: 'Right hippocampus',
            volume_ml: 4.38,
            icv_percent: 1e-7,
            percentile: -3,
            flag: 'normal',
          },
        ],
      });
    });
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, [
      'fhir-diagnostic-report',
      'hl7-oru',
      'dicom-sr',
      'dicom-pdf',
    ]);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect(await timeline(id)).toMatch(
      /order\.documents-fetched\/warning: 2 document\(s\) stored for DELIVERED; left out of the published results: results JSON: Left hippocampus volume_ml -4\.61 \(below 0\); Lateral ventricles volume_ml 1e\+308 \(too large to be a measurement\); Lateral ventricles icv_percent 250 \(above 100\); Lateral ventricles percentile 123456789012345680 \(too large to be a measurement\); Right hippocampus percentile -3 \(below 0\)/,
    );
    const published_ = ['1258.2', '78.18', '23', '0.29', '3', '4.38', '0.0000001'];
    // HL7 NM (v2.5.1 2A.2.49): digits, an optional sign and decimal point.
    const [oru] = orusOf(spec.placer);
    const nm = oru!.segments.filter((seg) => seg.id === 'OBX' && seg.value(2) === 'NM');
    expect(nm.map((seg) => seg.value(5))).toEqual(published_);
    // FHIR: the EHR validated and stored it; the same numbers.
    const dr = await reportOf(id);
    expect(ehr.rejected).toBe(0);
    const quantities = (dr?.contained ?? [])
      .filter((c) => c.resourceType === 'Observation')
      .map((o) => (o as { valueQuantity?: { value?: number } }).valueQuantity?.value);
    expect(quantities).toEqual(published_.map(Number));
    // DICOM: dciodvfy finds no error; NumericValue (DS) holds the same numbers.
    const found = (await (
      await fetch(`${orthanc.url}/tools/find`, {
        method: 'POST',
        body: JSON.stringify({
          Level: 'Instance',
          Query: { StudyInstanceUID: spec.studyUid, Modality: 'SR' },
        }),
      })
    ).json()) as string[];
    expect(found).toHaveLength(1);
    const file = join(dir, 'values-sr.dcm');
    writeFileSync(
      file,
      Buffer.from(await (await fetch(`${orthanc.url}/instances/${found[0]}/file`)).arrayBuffer()),
    );
    expect(dciodvfyErrors(file)).toEqual([]);
    const dump = execFileSync('dcmdump', ['+P', '0040,a30a', file], { encoding: 'utf8' });
    expect([...dump.matchAll(/DS \[([^\]]*)\]/g)].map((m) => m[1])).toEqual(published_);
  });

  it('measurements written as strings are named as left out, never dropped without a word', async () => {
    // Before: `"volume_ml": "3.12"` (a number written as a string, as some exports write decimals)
    // and `"icv_percent": "NaN"` vanished: no measurement, nothing on the timeline (info, no
    // values left out), and the report text read "Left hippocampus: " with nothing after it.
    const { id, spec, upstreamId } = await processing();
    editJsonReport('/results', upstreamId, (report, answer) =>
      jsonAnswer(answer, {
        ...report,
        findings: [
          { structure: 'Whole brain', volume_ml: 1258.2, percentile: 23, flag: 'normal' },
          { structure: 'Left hippocampus', volume_ml: '3.12', icv_percent: 'NaN', flag: 'low' },
          { structure: 'Right hippocampus', volume_ml: 3.48, percentile: null },
        ],
      }),
    );
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect(await timeline(id)).toMatch(
      /order\.documents-fetched\/warning: 2 document\(s\) stored for DELIVERED; left out of the published results: results JSON: Left hippocampus volume_ml "3\.12" \(not a number\); Left hippocampus icv_percent "NaN" \(not a number\)$/m,
    );
    const [oru] = orusOf(spec.placer);
    const report = oru!.segments.find((seg) => seg.id === 'OBX' && seg.value(3) === 'REPORT')!;
    const lines = Array.from({ length: report.repetitionCount(5) }, (_, i) =>
      report.value(5, i + 1),
    );
    expect(lines.slice(0, 3)).toEqual([
      'Whole brain: 1258.2 mL, P23',
      'Left hippocampus: no measurement published (low)',
      'Right hippocampus: 3.48 mL',
    ]);
  });

  it('qc_bypassed written as a string: the result still carries the QC caution everywhere', async () => {
    // Before: only the JSON value true was read; `"qc_bypassed": "true"` (or 1) from an
    // upstream whose bypass was decided outside our API (its portal, an agent) published a
    // result computed on a study that failed QC without "interpret with caution" in the
    // DiagnosticReport, the ORU or the SR.
    const { id, spec, upstreamId } = await processing();
    editJsonReport('/results', upstreamId, (report, answer) =>
      jsonAnswer(answer, { ...report, qc_bypassed: 'true', caveat: null }),
    );
    expect(await followToEnd(id)).toBe('delivered');
    const caution = await expectQcCaution(id, spec.placer);
    const found = (await (
      await fetch(`${orthanc.url}/tools/find`, {
        method: 'POST',
        body: JSON.stringify({
          Level: 'Instance',
          Query: { StudyInstanceUID: spec.studyUid, Modality: 'SR' },
        }),
      })
    ).json()) as string[];
    const file = join(dir, 'bypassed-sr.dcm');
    writeFileSync(
      file,
      Buffer.from(await (await fetch(`${orthanc.url}/instances/${found[0]}/file`)).arrayBuffer()),
    );
    expect(execFileSync('dsrdump', ['+Pl', file], { encoding: 'utf8' })).toContain(
      `"Comment")="${caution}"`,
    );
  });

  it('a QC bypass decided outside the adapter (the service’s portal): the result carries the QC caution though its report does not say so', async () => {
    // DESIGN.md §4: QC_BYPASS → the final report carries a "QC bypassed" caveat. Before, the
    // caveat came only from a bypass asked through our API or a report saying qc_bypassed:
    // an order that went QC_FAILED → QC_BYPASS → DELIVERED on someone else's request was
    // published as a plain final result. (Between two polls the service went QC_FAILED →
    // QC_BYPASS → ANALYSIS_RUNNING: a status straight after QC_FAILED says it was bypassed.)
    const { id, spec, upstreamId } = await processing('qc_failed');
    editJsonReport('/results', upstreamId, (report, answer) =>
      jsonAnswer(answer, { ...report, qc_bypassed: false, caveat: null }),
    );
    expect(await followToEnd(id)).toBe('qc-hold');
    // the bypass, asked at the service itself with the organization's credentials
    const token = (await (
      await fetch(`${sandbox.baseUrl}/auth/token`, {
        method: 'POST',
        headers: {
          authorization: `Basic ${Buffer.from(`${SANDBOX_CLIENT.IMAGING_CLIENT_ID}:${SANDBOX_CLIENT.IMAGING_CLIENT_SECRET}`).toString('base64')}`,
          'content-type': 'application/x-www-form-urlencoded',
        },
        body: 'grant_type=client_credentials',
      })
    ).json()) as { access_token: string };
    const asked = await fetch(`${sandbox.baseUrl}/qc-bypass?order_id=${upstreamId}`, {
      method: 'PATCH',
      headers: {
        authorization: `Bearer ${token.access_token}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({ reason: 'decided in the vendor portal' }),
    });
    expect(asked.status).toBe(200);
    expect(await followToEnd(id)).toBe('delivered');
    await expectQcCaution(id, spec.placer);
    expect(await timeline(id)).toMatch(/QC bypass .*outside this adapter/);
  });

  it('a failure reason of 3 MB with control characters: the EHR still hears of the failure, every value bounded and valid', async () => {
    // Before: the reason went whole into the DiagnosticReport's conclusion, which our own R4
    // validation refused (a string over 1 MiB): a dead letter, the EHR never heard the order
    // failed; the ORU carried a 3 MB OBX.
    const { id, spec, upstreamId } = await processing('failed');
    editJsonReport('/failure-report', upstreamId, (report, answer) => {
      return jsonAnswer(answer, {
        ...report,
        reason: `Segmentation failed\u0007\u001c\r\n<img src=x onerror=alert(1)> ${'x'.repeat(3_000_000)}`,
      });
    });
    expect(await followToEnd(id)).toBe('failed');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect(ehr.rejected).toBe(0);
    const dr = await reportOf(id);
    expect(dr?.status).toBe('cancelled');
    expect(dr?.conclusion).toMatch(
      /^No result: the analysis failed\. Segmentation failed\uFFFD\uFFFD\r\n<img/,
    );
    expect(dr?.conclusion).toMatch(/x … \(shortened; the report has the whole text\)$/);
    expect(dr!.conclusion!.length).toBeLessThan(1_100);
    const [oru] = orusOf(spec.placer);
    expect([oru?.get('ORC-5'), oru?.get('OBR-25')]).toEqual(['CA', 'X']);
    const obx = oru!.segments.filter((seg) => seg.id === 'OBX' && seg.value(2) !== 'ED');
    expect(Math.max(...obx.map((seg) => String(seg.value(5)).length))).toBeLessThan(1_200);
  });

  it('a failure reason in Japanese with an emoji where ORC-16 is cut: whole characters, said to be shortened', async () => {
    // ORC-16 (CE, text ≤ 199) and the QC report's OBX were cut at a UTF-16 unit count: the
    // emoji at the cut lost its second half and the RIS read U+FFFD (in 8859/1, `?`).
    const { id, spec, upstreamId } = await processing('failed');
    const reason = `${'脳'.repeat(168)}🧠 セグメンテーションに失敗しました`;
    editJsonReport('/failure-report', upstreamId, (report, answer) =>
      jsonAnswer(answer, { ...report, reason }),
    );
    expect(await followToEnd(id)).toBe('failed');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru']);
    // before: the lone surrogate made the attempt unrecordable (jsonb), the row was due again at
    // once, and the ORU went out hundreds of times a second
    expect(rows.find((r) => r.kind === 'hl7-oru')).toEqual({
      kind: 'hl7-oru',
      status: 'delivered',
    });
    expect(orusOf(spec.placer)).toHaveLength(1);
    const [oru] = orusOf(spec.placer);
    const orc16 = oru!.get('ORC-16.2')!;
    expect(orc16).not.toMatch(/[\uFFFD\uD800-\uDFFF]/);
    expect(orc16).toMatch(
      /^the analysis failed upstream: 脳+ … \(shortened; the report has the whole text\)$/,
    );
    expect(orc16.length).toBeLessThanOrEqual(199);
  });

  it('an impression of 5 MB and a structure name of 100,000 characters: published, bounded, valid everywhere', async () => {
    const { id, spec, upstreamId } = await processing();
    editJsonReport<{ findings: Array<Record<string, unknown>> }>(
      '/results',
      upstreamId,
      (report, answer) => {
        report.findings[0] = {
          ...report.findings[0],
          structure: `Hippocampus ${'H'.repeat(100_000)}`,
        };
        return jsonAnswer(answer, { ...report, impression: `Atrophy. ${'i'.repeat(5_000_000)}` });
      },
    );
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect(ehr.rejected).toBe(0);
    const dr = await reportOf(id);
    expect(dr?.status).toBe('final');
    expect(dr!.conclusion!.length).toBeLessThanOrEqual(10_000);
    const [oru] = orusOf(spec.placer);
    expect(oru!.text.length).toBeLessThan(200_000);
    const found = (await (
      await fetch(`${orthanc.url}/tools/find`, {
        method: 'POST',
        body: JSON.stringify({
          Level: 'Instance',
          Query: { StudyInstanceUID: spec.studyUid, Modality: 'SR' },
        }),
      })
    ).json()) as string[];
    const file = join(dir, 'texts-sr.dcm');
    writeFileSync(
      file,
      Buffer.from(await (await fetch(`${orthanc.url}/instances/${found[0]}/file`)).arrayBuffer()),
    );
    expect(dciodvfyErrors(file)).toEqual([]);
  });

  it('a patient name longer in UTF-8 than the SR’s PN takes (a Russian name with its patronymic): cut between characters, and the cut recorded with the attempt as the ORU’s are', async () => {
    // 43 characters, valid in the modality's study (PS3.5 counts PN in characters), but 84
    // bytes of UTF-8: the SR and the PDF hold the first 64 bytes (dicom-vr.ts: dciodvfy and
    // PACS with byte-sized columns count bytes). Before, the name was cut without a word; the
    // ORU records each name part it writes shorter (quirk value-cut-to-type), the SR did not.
    const name = 'Константинопольская^Александра^Владимировна';
    const { id, spec } = await processing('delivered', name);
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['dicom-sr', 'dicom-pdf']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    const found = (await (
      await fetch(`${orthanc.url}/tools/find`, {
        method: 'POST',
        body: JSON.stringify({
          Level: 'Instance',
          Query: { StudyInstanceUID: spec.studyUid, Modality: 'SR' },
          Expand: true,
        }),
      })
    ).json()) as Array<{ ID: string }>;
    expect(found).toHaveLength(1);
    const file = join(dir, 'long-name-sr.dcm');
    writeFileSync(
      file,
      Buffer.from(
        await (await fetch(`${orthanc.url}/instances/${found[0]!.ID}/file`)).arrayBuffer(),
      ),
    );
    expect(dciodvfyErrors(file)).toEqual([]);
    const written = execFileSync('dcmdump', ['+P', '0010,0010', '+U8', file], { encoding: 'utf8' });
    expect(written).toContain('[Константинопольская^Александра^Вл]');
    const { rows: attempts } = await db.query<{ kind: string; quirks: unknown }>(
      `SELECT detail->>'documentKind' AS kind, detail->'quirks' AS quirks FROM audit_events
        WHERE order_id = $1 AND kind = 'outbound.attempt'
          AND detail->>'documentKind' IN ('dicom-sr', 'dicom-pdf') ORDER BY id`,
      [id],
    );
    const cut = {
      code: 'value-cut-to-type',
      detail:
        'PatientName (0010,0010): 43 characters, 84 bytes in ISO_IR 192, written as its first 33 characters (PN, 64 bytes as written); the source study keeps the whole name',
    };
    expect(attempts).toEqual([
      { kind: 'dicom-sr', quirks: [cut] },
      { kind: 'dicom-pdf', quirks: [cut] },
    ]);
    // what the attempt records names no part of the name
    expect(JSON.stringify(attempts)).not.toMatch(/[\u0400-\u04ff]/);
  });

  it('structure names over lines or near 200 characters: OBX-3.2 is one line of at most 199 characters', async () => {
    // OBX-3.2 (CWE.2 / CE.2 text) is an ST of at most 199 characters (v2.5.1 2A.2.74, CWE).
    // Before: a structure written over two lines went out as `Left\X0D\\X0A\hippocampus volume`
    // (a RIS that does not decode hexadecimal data shows it), and a 190-character name as a
    // 224-character OBX-3.2 ("… volume, % of intracranial volume"), which a RIS holding CWE.2
    // to its length cuts or refuses.
    const { id, spec, upstreamId } = await processing();
    const long = `Hippocampus ${'H'.repeat(178)}`;
    editJsonReport<{ findings: Array<Record<string, unknown>> }>(
      '/results',
      upstreamId,
      (report, answer) =>
        jsonAnswer(answer, {
          ...report,
          findings: [
            { structure: 'Left\r\nhippocampus', volume_ml: 3.12, percentile: 4, flag: 'low' },
            { structure: long, volume_ml: 3.48, icv_percent: 0.25, flag: 'normal' },
          ],
        }),
    );
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    const [oru] = orusOf(spec.placer);
    const obx = oru!.segments.filter((seg) => seg.id === 'OBX');
    const texts = obx.map((seg) => seg.value(3, 1, 2) ?? '');
    expect(oru!.text).not.toMatch(/\\X0[DA]\\/);
    for (const t of texts) {
      expect(t).not.toMatch(/[\r\n]/);
      expect(t.length).toBeLessThanOrEqual(199);
    }
    expect(texts).toContain('Left hippocampus volume');
    expect(texts).toContain('Left hippocampus evaluation');
    expect(
      texts.find((t) => t.startsWith('Hippocampus HHH') && t.includes('shortened')),
    ).toBeDefined();
  });

  it('an impression under 200 characters that escaping makes longer (`L & R`, `age & sex`): the report text (TX), never an ST over 199 as written', async () => {
    // ST is for strings under 200 characters (v2.5.1 2A.2.74), counted as the message writes
    // them, as ORC-16 and OBX-3.2 are (hl7EncodedLength): each `&` is written `\T\`. This
    // impression has 199 characters and 207 as written. Before, it went out as an ST of 207.
    const impression =
      'Hippocampal volumes L & R below P5 for age & sex; mild global atrophy (whole brain P12, ventricles P91). Pattern compatible with early neurodegeneration & correlate clinically & with neuropsychology.';
    expect(impression).toHaveLength(199);
    const { id, spec, upstreamId } = await processing();
    editJsonReport('/results', upstreamId, (report, answer) =>
      jsonAnswer(answer, { ...report, impression }),
    );
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    const [oru] = orusOf(spec.placer);
    const obx = oru!.segmentsById('OBX');
    for (const st of obx.filter((seg) => seg.value(2) === 'ST'))
      expect(st.rawField(5).length).toBeLessThanOrEqual(199);
    const written = obx.find((seg) => seg.value(3) === 'IMPRESSION')!;
    expect(written.value(2)).toBe('TX');
    expect(written.value(5)).toBe(impression);
  });

  it('a results report written by Python’s json module, NaN and Infinity bare: the other measurements are published, those named as left out', async () => {
    // json.dumps writes a float('nan') or float('inf') as the bare tokens NaN and Infinity
    // (allow_nan=True is its default), which RFC 8259 has no place for: JSON.parse refused the
    // whole report ("refused: not JSON"), and a DELIVERED result went out as "See the attached
    // report." with not one measurement in the DiagnosticReport, the ORU or the SR. Now each such
    // value is one that is not a number (left out and named, as "NaN" written as a string is).
    const { id, spec, upstreamId } = await processing();
    rewrites.push((req, answer) => {
      if (!isResults(req, upstreamId, 'JSON') || answer.status !== 200) return undefined;
      const report = JSON.parse(answer.body.toString()) as Record<string, unknown>;
      const findings = [
        { structure: 'Whole brain', volume_ml: 1258.2, percentile: 23, flag: 'normal' },
        { structure: 'Left hippocampus', volume_ml: 3.12, icv_percent: '@NaN', flag: 'low' },
        { structure: 'Lateral ventricles', volume_ml: 28.24, percentile: '@Infinity' },
        { structure: 'Right hippocampus', volume_ml: '@-Infinity', percentile: 41 },
      ];
      // as Python writes it: json.dumps(report, indent=2)
      const text = JSON.stringify({ ...report, findings }, null, 2).replace(/"@([^"]+)"/g, '$1');
      expect(text).toContain('"icv_percent": NaN,');
      return { ...answer, body: Buffer.from(text) };
    });
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect(await timeline(id)).toMatch(
      /order\.documents-fetched\/warning: 2 document\(s\) stored for DELIVERED; left out of the published results: results JSON: Left hippocampus icv_percent NaN \(not a number\); Lateral ventricles percentile Infinity \(not a number\); Right hippocampus volume_ml -Infinity \(not a number\)$/m,
    );
    const [oru] = orusOf(spec.placer);
    const nm = oru!.segmentsById('OBX').filter((seg) => seg.value(2) === 'NM');
    expect(nm.map((seg) => seg.value(5))).toEqual(['1258.2', '23', '3.12', '28.24', '41']);
    const dr = await reportOf(id);
    expect(dr?.status).toBe('final');
    expect(dr?.contained?.filter((c) => c.resourceType === 'Observation')).toHaveLength(5);
  });

  it('a finding whose flag is nested 20,000 levels deep: the result is published, the flag named as left out', async () => {
    // Before: naming the unread flag wrote it out again as JSON, which overflowed the stack
    // (RangeError) in the fetch job's check of the report; the job failed at every retry and the
    // DELIVERED result never reached the EHR, the RIS or the PACS (40 KB of report).
    const { id, spec, upstreamId } = await processing();
    editJsonReport<{ findings: Array<Record<string, unknown>> }>(
      '/results',
      upstreamId,
      (report, answer) => ({
        ...answer,
        headers: { 'content-type': 'application/json' },
        body: Buffer.from(
          JSON.stringify({ ...report, findings: report.findings.slice(1) }).replace(
            '"findings":[',
            `"findings":[{"structure":"Left hippocampus","volume_ml":3.12,"flag":${'['.repeat(20_000)}${']'.repeat(20_000)}},`,
          ),
        ),
      }),
    );
    expect(await followToEnd(id)).toBe('delivered');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru', 'dicom-sr']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect(await timeline(id)).toMatch(
      /order\.documents-fetched\/warning: 2 document\(s\) stored for DELIVERED; left out of the published results: results JSON: Left hippocampus flag "an array" \(not low, normal or high\)/,
    );
    expect((await reportOf(id))?.status).toBe('final');
    const [oru] = orusOf(spec.placer);
    const nm = oru!.segments.filter((seg) => seg.id === 'OBX' && seg.value(2) === 'NM');
    expect(nm[0]?.value(5)).toBe('3.12');
    expect(nm[0]?.value(8)).toBeUndefined();
  });

  it('a QC report of 20 MB: the final QC rejection reaches the EHR with its size and hash, not its bytes', async () => {
    // Before: the QC report went inside the cancelled DiagnosticReport whatever its size (the
    // PDF has OUTBOUND_PDF_EMBED_MAX_BYTES, the QC report had nothing): 22 MB of per-slice
    // checks made a 30 MB DiagnosticReport, which the validating EHR refused (400; a 30 MB PDF
    // made the report undeliverable), and the EHR never heard that QC had failed.
    const { id, spec } = await processing('qc_failed');
    const checks = Array.from({ length: 100_000 }, (_, i) => ({
      slice: i + 1,
      check: 'motion',
      verdict: 'failed',
      note: `Motion artefact of ${(i % 7) + 1} mm in slice ${i + 1}: ${'x'.repeat(120)}`,
    }));
    const qc = Buffer.from(JSON.stringify({ verdict: 'failed', checks }));
    expect(qc.length).toBeGreaterThan(20_000_000);
    rewrites.push((req, answer) =>
      req.path === '/qc-report' && answer.status === 200 ? { ...answer, body: qc } : undefined,
    );
    expect(await followToEnd(id)).toBe('qc-hold');
    await sandbox.advance(8 * 24 * 3_600_000);
    await poller.runNow();
    expect(await orderState(db, id)).toBe('failed');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    const dr = await reportOf(id);
    expect(dr?.status).toBe('cancelled');
    const form = dr!.presentedForm!.find((f) => f.contentType === 'application/json')!;
    expect(form.data).toBeUndefined();
    // the report as stored and published: the upstream's within its round ({round, report})
    const { rows: stored } = await db.query<{ body: Buffer }>(
      `SELECT body FROM order_documents WHERE order_id = $1 AND kind = 'qc'`,
      [id],
    );
    const sent = Buffer.from(JSON.stringify(JSON.parse(stored[0]!.body.toString())));
    expect(sent.length).toBeGreaterThan(qc.length);
    expect(form.size).toBe(sent.length);
    expect(form.hash).toBe(createHash('sha1').update(sent).digest('base64'));
    expect(form.title).toBe(`Quality control report (${sent.length} bytes, not embedded)`);
    expect(JSON.stringify(dr).length).toBeLessThan(1024 * 1024);
    const [oru] = orusOf(spec.placer);
    expect([oru?.get('ORC-1'), oru?.get('OBR-25')]).toEqual(['OC', 'X']);
  });

  it('a QC report nested 20,000 levels deep: refused by name; the final QC rejection still reaches the EHR and the RIS', async () => {
    // Before: writing the report out again threw RangeError (stack overflow) in the fetch job,
    // which was retried with backoff again and again; the QC report was never stored, and the
    // final rejection never reached the RIS (ORU X) or the EHR (DiagnosticReport cancelled).
    const { id, spec } = await processing('qc_failed');
    rewrites.push((req, answer) =>
      req.path === '/qc-report' && answer.status === 200
        ? {
            ...answer,
            body: Buffer.from(
              `{"verdict":"failed","checks":${'['.repeat(20_000)}${']'.repeat(20_000)}}`,
            ),
          }
        : undefined,
    );
    expect(await followToEnd(id)).toBe('qc-hold');
    // The bypass window closes: the order leaves the active list, QC_FAILED is final.
    await sandbox.advance(8 * 24 * 3_600_000);
    await poller.runNow();
    expect(await orderState(db, id)).toBe('failed');
    const rows = await published(id, ['fhir-diagnostic-report', 'hl7-oru']);
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    expect(await timeline(id)).toMatch(
      /order\.documents-fetched\/warning: 0 document\(s\) stored for QC_FAILED; not available: qc results: invalid_response on qc-report: QC report nested deeper than 64 levels/,
    );
    expect(await reportOf(id)).toMatchObject({
      status: 'cancelled',
      conclusion: 'Not analysable: the study failed quality control.',
    });
    const [oru] = orusOf(spec.placer);
    expect([oru?.get('ORC-1'), oru?.get('ORC-5'), oru?.get('OBR-25')]).toEqual(['OC', 'CA', 'X']);
  });
});
