import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DiagnosticReport } from '@medplum/fhirtypes';
import type { Client as PgClient } from 'pg';
import type { MllpClient } from '../../src/hl7';
import { parseHl7, type Hl7Message } from '../../src/hl7/hl7-message';
import { OrderPollerService } from '../../src/orders/order-poller.service';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import type { TestAdapter } from '../helpers/adapter';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import {
  newOrderSpec,
  orderDiagnostics,
  orderState,
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

  /** An order placed with its study, uploaded: its id, the upstream's id and its placer number. */
  async function processing(outcome = 'delivered') {
    const spec = newOrderSpec(`Bitte KI-Auswertung. sandbox-outcome: ${outcome}`);
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
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

  const isResults = (req: SeenRequest, upstreamId: string, type: string) =>
    req.path === '/results' &&
    req.query.get('order_id') === upstreamId &&
    req.query.get('report_type') === type;

  it('a results report naming another order and another study is not published as this patient’s result', async () => {
    // Before: its findings and impression went out as this patient's final DiagnosticReport,
    // ORU (OBR-25 F) and SR.
    const { id, spec, upstreamId } = await processing();
    rewrites.push((req, answer) => {
      if (!isResults(req, upstreamId, 'JSON') || answer.status !== 200) return undefined;
      const report = JSON.parse(answer.body.toString()) as Record<string, unknown>;
      return jsonAnswer(answer, {
        ...report,
        order_id: '7d0c1e52-9b7a-4c1e-8f3a-2b6d5e4c3a21',
        study_uid: '1.2.826.0.1.3680043.8.498.99999999999999999999',
        impression: 'Right hippocampus volume below the 5th percentile (another patient).',
      });
    });
    expect(await followToEnd(id)).toBe('delivered');
    const fetched = await waitFor('the documents fetched', async () =>
      (await timeline(id)).match(/order\.documents-fetched\/(\w+): (.*)/),
    );
    expect(fetched[1]).toBe('error');
    expect(fetched[2]).toBe(
      '0 document(s) stored for DELIVERED; not available: results JSON: refused: names another order (its order_id is not the one asked for); results PDF: refused with the results JSON report; no result is published from these reports',
    );
    const rows = await published(id, ['fhir-task']);
    expect(rows.map((r) => r.kind)).toEqual(['fhir-task', 'fhir-task']);
    expect(await reportOf(id)).toBeUndefined();
    expect(orusOf(spec.placer)).toEqual([]);
  });

  it('a failure report about another study: the clinic still hears that no result is coming, without it', async () => {
    // Before (known limit): no report stored, so only the Task went out; the RIS never heard
    // that the order had failed.
    const { id, spec, upstreamId } = await processing('failed');
    rewrites.push((req, answer) => {
      if (req.path !== '/failure-report' || req.query.get('order_id') !== upstreamId)
        return undefined;
      if (req.query.get('report_type') !== 'JSON' || answer.status !== 200) return undefined;
      const report = JSON.parse(answer.body.toString()) as Record<string, unknown>;
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

  it('/reports naming two outcomes of one order (results DELIVERED, failure FAILED): neither is taken, GET /status decides', async () => {
    // Before: the last report listed won: a delivered order ended `failed` without a call and
    // the clinic was told "No result: the analysis failed".
    const { id, upstreamId } = await processing();
    rewrites.push((req, answer) => {
      if (req.path !== '/reports' || req.method !== 'GET') return undefined;
      const body = JSON.parse(answer.body.toString()) as {
        reports: Array<Record<string, unknown>>;
      };
      if (!body.reports.some((r) => r.order_id === upstreamId)) return undefined;
      body.reports.push({
        report_id: 'c0ffee00-0000-4000-8000-00000000f001',
        order_id: upstreamId,
        status: 'FAILED',
        kind: 'failure',
        report_types: ['PDF', 'JSON'],
      });
      return jsonAnswer(answer, body);
    });
    const asked = () =>
      upstream.seen.filter((r) => r.path === '/status' && r.query.get('order_id') === upstreamId)
        .length;
    expect(await followToEnd(id)).toBe('delivered');
    expect(asked()).toBe(1);
    expect(await timeline(id)).toMatch(
      /upstream\.inconsistent\/warning: GET \/reports named two outcomes of the order, DELIVERED and FAILED: its status is asked with GET \/status instead/,
    );
    await published(id, ['fhir-diagnostic-report', 'hl7-oru']);
    expect((await reportOf(id))?.status).toBe('final');
  });

  it('/list-orders listing one order twice (ANALYSIS_RUNNING and DELIVERED): GET /status decides', async () => {
    const { id, upstreamId } = await processing();
    rewrites.push((req, answer) => {
      if (req.path !== '/list-orders') return undefined;
      const body = JSON.parse(answer.body.toString()) as { orders: Array<Record<string, unknown>> };
      const mine = body.orders.find((o) => o.order_id === upstreamId);
      if (!mine) return undefined;
      body.orders.push({ ...mine, status: 'DELIVERED' });
      return jsonAnswer(answer, body);
    });
    await sandbox.advance(5_000);
    await poller.runNow();
    // Before: the last entry won and the order was delivered while the upstream still ran it.
    expect(await orderState(db, id)).toBe('processing');
    expect(await timeline(id)).toMatch(
      /GET \/list-orders listed the order twice, as \w+ and DELIVERED/,
    );
    rewrites.length = 0;
    expect(await followToEnd(id)).toBe('delivered');
  });

  it('a GET /status answer about another order is not applied; the other orders are still followed', async () => {
    // Before: the DELIVERED of another order ended this one (whose analysis had failed) as
    // delivered; an answer refused as invalid would have stopped the whole cycle.
    const { id, upstreamId } = await processing('failed');
    const other = await processing();
    rewrites.push((req, answer) => {
      if (req.path === '/list-orders') {
        const body = JSON.parse(answer.body.toString()) as {
          orders: Array<Record<string, unknown>>;
        };
        return jsonAnswer(answer, { orders: body.orders.filter((o) => o.order_id !== upstreamId) });
      }
      if (req.path === '/reports' && req.method === 'GET') {
        const body = JSON.parse(answer.body.toString()) as {
          reports: Array<Record<string, unknown>>;
        };
        return jsonAnswer(answer, {
          reports: body.reports.filter((o) => o.order_id !== upstreamId),
        });
      }
      if (req.path === '/status' && req.query.get('order_id') === upstreamId)
        return jsonAnswer(answer, {
          order_id: '7d0c1e52-9b7a-4c1e-8f3a-2b6d5e4c3a21',
          study_uid: '1.2.826.0.1.3680043.8.498.99999999999999999999',
          status: 'DELIVERED',
        });
      return undefined;
    });
    const stats = await poller.runNow();
    expect(stats).toBeDefined();
    expect(await orderState(db, id)).toBe('processing');
    expect(await timeline(id)).toMatch(
      /upstream\.inconsistent\/warning: GET \/status: the answer is about another order \(order_id 7d0c1e52-9b7a-4c1e-8f3a-2b6d5e4c3a21\), not the one asked for: the order is left as it was/,
    );
    expect(await followToEnd(other.id)).toBe('delivered');
    rewrites.length = 0;
    expect(await followToEnd(id)).toBe('failed');
  });
});
