import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import type { DiagnosticReport, Task } from '@medplum/fhirtypes';
import { MllpClient } from '../../src/hl7';
import { parseHl7 } from '../../src/hl7/hl7-message';
import { OrderPollerService } from '../../src/orders/order-poller.service';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import {
  newOrderSpec,
  placeWithStudy,
  orderState,
  SANDBOX_CLIENT,
  waitFor,
  writeSiteConfig,
  type Hl7OrderSpec,
} from '../e2e/e2e-support';
import {
  startAckingRis,
  startValidatingEhr,
  type TestEhr,
  type TestRis,
} from '../outbound/outbound-peers';

jest.setTimeout(240_000);

/**
 * What the upstream refuses, through the running adapter: a QC bypass the upstream forbids
 * (sandbox outcome `qc_bypass_refused`, 403 `qc_bypass_restricted`) and a study refused at
 * upload with a long `invalid_study` list (sandbox outcome `invalid_study`). Studies pushed
 * over STOW-RS, orders over MLLP, the sandbox on a manual clock, results delivered to a
 * validating FHIR EHR and an MLLP RIS on loopback.
 */
describe('upstream refusals (adapter, sandbox upstream, EHR and RIS peers)', () => {
  let sandbox: RunningSandbox;
  let adapter: TestAdapter;
  let ehr: TestEhr;
  let ris: TestRis;
  let mllp: MllpClient;
  let db: PgClient;
  let poller: OrderPollerService;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orders-refusals-'));
    ehr = await startValidatingEhr();
    ris = await startAckingRis();
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', clock: 'manual', dataDir: dir });
    adapter = await startTestAdapter({
      IMAGING_BASE_URL: sandbox.baseUrl,
      ...SANDBOX_CLIENT,
      IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true',
      FHIR_SERVER_URL: ehr.baseUrl,
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: String(ris.port),
      OUTBOUND_POLL_MS: '50',
      STUDY_QUIET_PERIOD_SECONDS: '1',
      CONFIG_FILE: writeSiteConfig(dir),
      POLL_INTERVAL_SECONDS: '3600',
    });
    mllp = new MllpClient({ host: '127.0.0.1', port: adapter.mllpPort, responseTimeoutMs: 10_000 });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
    poller = adapter.app.get(OrderPollerService);
  });
  afterAll(async () => {
    await mllp?.close();
    await db?.end();
    await adapter?.close();
    await sandbox?.close();
    await ris?.close();
    await ehr?.close();
  });

  async function place(spec: Hl7OrderSpec): Promise<string> {
    return placeWithStudy({ adapter, mllp, db }, spec);
  }

  const outbox = async (id: string) =>
    (await db.query(`SELECT kind, status FROM outbox WHERE order_id = $1 ORDER BY id`, [id]))
      .rows as Array<{ kind: string; status: string }>;

  const drained = (id: string) =>
    waitFor(`outbox of ${id} drained`, async () => {
      const rows = await outbox(id);
      return rows.length > 0 && rows.every((r) => r.status === 'delivered');
    });

  const orusOf = (placer: string) =>
    ris.received
      .map((m) => parseHl7(m))
      .filter((m) => m.messageType.code === 'ORU' && m.get('ORC-2') === placer);

  const auditTimeline = async (id: string) => {
    const res = await fetch(`${adapter.httpUrl}/api/audit/orders/${id}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
    });
    expect(res.status).toBe(200);
    return JSON.stringify(await res.json());
  };

  it('a QC bypass the upstream refuses (403, manual review restrictions): the clinician hears why, the analyst sees it, and nothing becomes a result', async () => {
    const spec = newOrderSpec('Bitte KI-Auswertung. sandbox-outcome: qc_bypass_refused');
    const id = await place(spec);
    await waitFor('uploaded', async () => (await orderState(db, id)) === 'processing', 90_000);
    for (let i = 0; i < 20 && (await orderState(db, id)) !== 'qc-hold'; i++) {
      await sandbox.advance(5_000);
      await poller.runNow();
    }
    expect(await orderState(db, id)).toBe('qc-hold');
    await drained(id);

    // an order over HL7 carries no sender token: admin acts on it through the API
    const res = await fetch(`${adapter.httpUrl}/api/orders/${id}/qc-bypass`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.admin}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({ reason: 'artefacts acceptable, please analyse' }),
    });
    expect(res.status).toBe(409);
    expect(res.headers.get('content-type')).toMatch(/application\/problem\+json/);
    const problem = (await res.json()) as Record<string, unknown>;
    expect(JSON.stringify(problem)).toContain('qc_bypass_restricted');

    // The order is still held by the QC rejection; no bypass is recorded as ours.
    const { rows } = await db.query(`SELECT state, qc_bypass FROM orders WHERE id = $1`, [id]);
    expect(rows[0]).toEqual({ state: 'qc-hold', qc_bypass: null });
    // The analyst sees why on the order's timeline: status, upstream code, message.
    const refused = await db.query(
      `SELECT severity, summary, detail FROM audit_events WHERE order_id = $1 AND kind = 'upstream.refused'`,
      [id],
    );
    expect(refused.rows).toHaveLength(1);
    expect(refused.rows[0].detail).toMatchObject({
      action: 'qc-bypass',
      refusal: {
        status: 403,
        code: 'forbidden',
        upstreamCode: 'qc_bypass_restricted',
        message: expect.stringMatching(/manual review restrictions/),
      },
    });
    expect(refused.rows[0].summary).toMatch(/refused by the upstream: 403 qc_bypass_restricted/);
    const timeline = await auditTimeline(id);
    expect(timeline).toContain('qc_bypass_restricted');
    expect(timeline).not.toContain('MUSTERMANN');

    // Still on hold everywhere: Task on-hold, no DiagnosticReport, no result ORU.
    const [task] = await ehr.search<Task>('Task', `identifier=urn:imaging-ai-adapter:order|${id}`);
    expect(task!.status).toBe('on-hold');
    expect(
      await ehr.search<DiagnosticReport>(
        'DiagnosticReport',
        `identifier=urn:imaging-ai-adapter:diagnostic-report|${id}`,
      ),
    ).toHaveLength(0);
    expect(orusOf(spec.placer).filter((m) => ['F', 'C'].includes(m.get('OBR-25') ?? ''))).toEqual(
      [],
    );

    // Once the bypass window closes the rejection is final: failed, a cancelled report.
    await sandbox.advance(8 * 24 * 3_600_000);
    await poller.runNow();
    expect(await orderState(db, id)).toBe('failed');
    await waitFor('final publications', async () => {
      const rows = await outbox(id);
      return (
        rows.some((r) => r.kind === 'hl7-oru') &&
        rows.some((r) => r.kind === 'fhir-diagnostic-report') &&
        rows.every((r) => r.status === 'delivered')
      );
    });
    const [finalTask] = await ehr.search<Task>(
      'Task',
      `identifier=urn:imaging-ai-adapter:order|${id}`,
    );
    expect(finalTask!.status).toBe('failed');
    const [dr] = await ehr.search<DiagnosticReport>(
      'DiagnosticReport',
      `identifier=urn:imaging-ai-adapter:diagnostic-report|${id}`,
    );
    expect(dr!.status).toBe('cancelled');
    expect(dr!.result).toBeUndefined();
    const orus = orusOf(spec.placer);
    expect(orus.length).toBeGreaterThan(0);
    expect(orus.every((m) => m.get('OBR-25') !== 'F' && m.get('OBR-25') !== 'C')).toBe(true);
    expect(orus.at(-1)!.get('OBR-25')).toBe('X');
  });

  it('a study refused with a long invalid_study list: every file and reason on the timeline, masked, the order failed with an alert', async () => {
    const spec = {
      ...newOrderSpec('Bitte KI-Auswertung. sandbox-outcome: invalid_study'),
      slices: 40,
    };
    const id = await place(spec);
    await waitFor(
      'the upload refused',
      async () => (await orderState(db, id)) === 'failed',
      90_000,
    );
    const { rows } = await db.query(`SELECT alert FROM orders WHERE id = $1`, [id]);
    expect(rows[0].alert).toBe('upload-refused');
    const refused = await db.query(
      `SELECT summary, detail FROM audit_events WHERE order_id = $1 AND kind = 'upstream.refused'`,
      [id],
    );
    expect(refused.rows).toHaveLength(1);
    const refusal = refused.rows[0].detail.refusal as {
      status: number;
      upstreamCode: string;
      files: Array<{ file: string; reason: string }>;
      filesTotal: number;
    };
    expect(refusal).toMatchObject({ status: 400, upstreamCode: 'invalid_study', filesTotal: 40 });
    // The whole list (far more than the 4 KB and 20 entries an error body used to keep).
    expect(refusal.files).toHaveLength(40);
    expect(JSON.stringify(refusal.files).length).toBeGreaterThan(4096);
    for (const f of refusal.files) {
      // Our package's entry paths are UIDs: shown as they are.
      expect(f.file).toMatch(/^DICOM\/[0-9.]+\/[0-9.]+\.dcm$/);
      expect(f.reason).toMatch(/incomplete uncompressed pixel data/);
    }
    expect(refused.rows[0].summary).toMatch(
      /^the upload was refused: 400 invalid_study \(40 file\(s\) refused\): study validation failed: DICOM\//,
    );
    const timeline = await auditTimeline(id);
    expect(timeline).toContain(refusal.files[39]!.file);
    expect(timeline).not.toContain('MUSTERMANN');

    // The clinic reads what happened and that no result comes, never the upstream's refusal
    // (its HTTP status, error code, file list, message): ORC-16 and the text OBX of the ORU,
    // the Task's statusReason, the DiagnosticReport's conclusion.
    await waitFor('the no-result answers', async () => {
      const rows = await outbox(id);
      return (
        ['hl7-oru', 'fhir-task', 'fhir-diagnostic-report'].every((k) =>
          rows.some((r) => r.kind === k),
        ) && rows.every((r) => r.status === 'delivered')
      );
    });
    const [task] = await ehr.search<Task>('Task', `identifier=urn:imaging-ai-adapter:order|${id}`);
    const [dr] = await ehr.search<DiagnosticReport>(
      'DiagnosticReport',
      `identifier=urn:imaging-ai-adapter:diagnostic-report|${id}`,
    );
    const oru = orusOf(spec.placer).at(-1)!;
    const clinical = [
      oru.get('ORC-16.2') ?? '',
      ...oru
        .segmentsById('OBX')
        .filter((s) => s.value(2) === 'TX')
        .map((s) => s.value(5) ?? ''),
      task!.statusReason?.text ?? '',
      dr!.conclusion ?? '',
    ];
    for (const text of clinical) {
      expect(text).toMatch(/the analysis service did not accept the images; no result will come/i);
      expect(text).not.toMatch(
        /invalid_study|\b400\b|DICOM\/|validation|pixel data|refused:|https?:/,
      );
    }
  });
});
