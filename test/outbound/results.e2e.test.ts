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
import { ackSummary } from '../helpers/hl7-fixtures';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import {
  newOrderSpec,
  orderByPlacer,
  orderState,
  orderStates,
  ormMessage,
  SANDBOX_CLIENT,
  serviceRequestFor,
  studyFor,
  waitFor,
  writeSiteConfig,
} from '../e2e/e2e-support';
import { startAckingRis, startValidatingEhr, type TestEhr, type TestRis } from './outbound-peers';

jest.setTimeout(300_000);

/**
 * Results through the running adapter: orders in over MLLP (and FHIR), the real lifecycle
 * (Orthanc pull, sandbox upstream on a manual clock, poller, documents fetched), and the
 * outbox workers delivering to the EHR, the RIS and the PACS it is configured with.
 */
describe('results back to the clinic, end to end', () => {
  let orthanc: RunningOrthanc;
  let sandbox: RunningSandbox;
  let adapter: TestAdapter;
  let ehr: TestEhr;
  let ris: TestRis;
  let mllp: MllpClient;
  let db: PgClient;
  let poller: OrderPollerService;
  let refusing = false;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'e2e-results-'));
    orthanc = await startOrthanc();
    ehr = await startValidatingEhr();
    // The RIS refuses (AR) while `refusing` is set: the dead-letter and replay test.
    ris = await startAckingRis(() => (refusing ? 'AR' : 'AA'));
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', clock: 'manual', dataDir: dir });
    adapter = await startTestAdapter({
      IMAGING_BASE_URL: sandbox.baseUrl,
      ...SANDBOX_CLIENT,
      IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true',
      DICOMWEB_URL: orthanc.dicomWebUrl,
      FHIR_SERVER_URL: ehr.baseUrl,
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: String(ris.port),
      OUTBOUND_POLL_MS: '50',
      STUDY_QUIET_PERIOD_SECONDS: '1',
      CONFIG_FILE: writeSiteConfig(dir),
      FHIR_UNKNOWN_PROCEDURE: 'default-products:neuro-volumetry',
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
    await orthanc?.stop();
  });

  async function orderOverHl7(outcome: string) {
    const spec = newOrderSpec(`Bitte KI-Auswertung. sandbox-outcome: ${outcome}`);
    for (const instance of studyFor(spec)) await orthanc.store(instance.bytes);
    expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    const order = await waitFor('the order', () => orderByPlacer(db, spec.placer));
    return { id: order.id as string, spec };
  }

  async function outboxOf(id: string) {
    const { rows } = await db.query(
      `SELECT destination, kind, status FROM outbox WHERE order_id = $1 ORDER BY id`,
      [id],
    );
    return rows as Array<{ destination: string; kind: string; status: string }>;
  }

  it('DELIVERED and FAILED orders: every system gets what the status table says', async () => {
    const placed = [await orderOverHl7('delivered'), await orderOverHl7('failed')];
    await waitFor(
      'both orders uploaded',
      async () =>
        (
          await orderStates(
            db,
            placed.map((p) => p.id),
          )
        ).every((s) => s === 'processing'),
      90_000,
    );
    for (let i = 0; i < 40; i++) {
      const states = await orderStates(
        db,
        placed.map((p) => p.id),
      );
      if (states.every((s) => s === 'delivered' || s === 'failed')) break;
      await sandbox.advance(5_000);
      await poller.runNow();
    }
    const [delivered, failed] = placed;
    expect(await orderState(db, delivered!.id)).toBe('delivered');
    expect(await orderState(db, failed!.id)).toBe('failed');

    // Documents are fetched by a job, then the outbox drains.
    for (const p of placed) {
      await waitFor(
        `results of ${p.id} published`,
        async () => {
          const rows = await outboxOf(p.id);
          return (
            rows.some((r) => r.kind === 'hl7-oru') && rows.every((r) => r.status === 'delivered')
          );
        },
        60_000,
      );
    }

    const deliveredRows = await outboxOf(delivered!.id);
    expect(new Set(deliveredRows.map((r) => r.kind))).toEqual(
      new Set(['fhir-task', 'fhir-diagnostic-report', 'hl7-oru', 'dicom-sr', 'dicom-pdf']),
    );
    expect(new Set((await outboxOf(failed!.id)).map((r) => r.kind))).toEqual(
      new Set(['fhir-task', 'fhir-diagnostic-report', 'hl7-oru']),
    );

    const [task] = await ehr.search<Task>(
      'Task',
      `identifier=urn:imaging-ai-adapter:order|${delivered!.id}`,
    );
    expect(task).toMatchObject({ status: 'completed' });
    const [dr] = await ehr.search<DiagnosticReport>(
      'DiagnosticReport',
      `identifier=urn:imaging-ai-adapter:diagnostic-report|${delivered!.id}`,
    );
    expect(dr!.status).toBe('final');
    expect(dr!.result!.length).toBeGreaterThan(0);
    const [failedDr] = await ehr.search<DiagnosticReport>(
      'DiagnosticReport',
      `identifier=urn:imaging-ai-adapter:diagnostic-report|${failed!.id}`,
    );
    expect(failedDr).toMatchObject({ status: 'cancelled' });
    expect(failedDr!.result).toBeUndefined();

    const orus = ris.received.map((m) => parseHl7(m)).filter((m) => m.messageType.code === 'ORU');
    const byPlacer = (placer: string) => orus.find((m) => m.get('ORC-2') === placer);
    expect(byPlacer(delivered!.spec.placer)?.get('OBR-25')).toBe('F');
    expect(byPlacer(failed!.spec.placer)?.get('OBR-25')).toBe('X');
    expect(byPlacer(delivered!.spec.placer)?.get('PID-3')).toBe(delivered!.spec.patientId);

    const series = (await (
      await fetch(`${orthanc.dicomWebUrl}/studies/${delivered!.spec.studyUid}/series`)
    ).json()) as Array<Record<string, { Value?: string[] }>>;
    expect(series.map((s) => s['00080060']?.Value?.[0]).sort()).toEqual(['DOC', 'MR', 'SR']);
    const failedSeries = (await (
      await fetch(`${orthanc.dicomWebUrl}/studies/${failed!.spec.studyUid}/series`)
    ).json()) as Array<Record<string, { Value?: string[] }>>;
    expect(failedSeries.map((s) => s['00080060']?.Value?.[0])).toEqual(['MR']);

    // The audit API shows the attempts of the order (analyst role).
    const res = await fetch(`${adapter.httpUrl}/api/audit/orders/${delivered!.id}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
    });
    expect(res.status).toBe(200);
    const body = JSON.stringify(await res.json());
    expect(body).toContain('outbound.attempt');
    expect(body).toContain('pacs-dicomweb');
  });

  it('a ServiceRequest POSTed to us (no EHR holds it) is kept updated: completed with results', async () => {
    const spec = newOrderSpec();
    for (const instance of studyFor(spec)) await orthanc.store(instance.bytes);
    const sr = serviceRequestFor(spec);
    const headers = {
      authorization: `Bearer ${TEST_TOKENS.sender}`,
      'content-type': 'application/fhir+json',
    };
    const created = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers,
      body: JSON.stringify(sr),
    });
    expect(created.status).toBe(201);
    const { id: resourceId } = (await created.json()) as { id: string };
    const { rows } = await db.query(`SELECT order_id FROM fhir_resources WHERE id = $1`, [
      resourceId,
    ]);
    const orderId = rows[0].order_id as string;
    await waitFor('uploaded', async () => (await orderState(db, orderId)) === 'processing', 90_000);
    for (let i = 0; i < 40 && (await orderState(db, orderId)) !== 'delivered'; i++) {
      await sandbox.advance(5_000);
      await poller.runNow();
    }
    await waitFor(
      'published',
      async () => {
        const r = await outboxOf(orderId);
        return (
          r.some((x) => x.kind === 'fhir-diagnostic-report') &&
          r.every((x) => x.status === 'delivered')
        );
      },
      60_000,
    );
    const read = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${resourceId}`, { headers });
    expect(((await read.json()) as { status: string }).status).toBe('completed');
    const [task] = await ehr.search<Task>(
      'Task',
      `identifier=urn:imaging-ai-adapter:order|${orderId}`,
    );
    expect(task!.basedOn?.[0]?.identifier).toEqual({
      system: 'http://e2e.example/ehr/orders',
      value: spec.placer,
    });
  });

  it('a dead letter is listed by the audit API, replayed by an admin, and delivered by the workers', async () => {
    refusing = true;
    const { id } = await orderOverHl7('failed');
    await waitFor('uploaded', async () => (await orderState(db, id)) === 'processing', 90_000);
    for (let i = 0; i < 40 && (await orderState(db, id)) !== 'failed'; i++) {
      await sandbox.advance(5_000);
      await poller.runNow();
    }
    const dead = await waitFor(
      'the ORU dead-lettered',
      async () => (await outboxOf(id)).find((r) => r.kind === 'hl7-oru' && r.status === 'dead'),
      60_000,
    );
    expect(dead).toBeTruthy();
    const { rows } = await db.query(
      `SELECT id::text AS id FROM outbox WHERE order_id = $1 AND kind = 'hl7-oru'`,
      [id],
    );
    const outboxId = rows[0].id as string;
    const list = await fetch(`${adapter.httpUrl}/api/audit/dead-letters`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
    });
    expect(JSON.stringify(await list.json())).toContain(`"${outboxId}"`);
    refusing = false;
    const replay = await fetch(`${adapter.httpUrl}/api/audit/dead-letters/${outboxId}/replay`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_TOKENS.admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'RIS interface fixed' }),
    });
    expect(replay.status).toBe(200);
    await waitFor(
      'the replayed ORU delivered',
      async () => (await outboxOf(id)).find((r) => r.kind === 'hl7-oru')?.status === 'delivered',
      30_000,
    );
    const events = await db.query(
      `SELECT kind, severity FROM audit_events WHERE order_id = $1 AND kind LIKE 'outbound.%' AND detail->>'documentKind' = 'hl7-oru' ORDER BY id`,
      [id],
    );
    expect(events.rows.map((e) => `${e.kind}/${e.severity}`)).toEqual([
      'outbound.attempt/error',
      'outbound.dead-letter/error',
      'outbound.replay/info',
      'outbound.attempt/info',
    ]);
  });
});
