import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
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
  upstreamStatuses,
  waitFor,
  writeSiteConfig,
  type Hl7OrderSpec,
} from './e2e-support';

jest.setTimeout(300_000);

const TERMINAL = ['delivered', 'failed', 'cancelled'];

/**
 * The whole path of real orders: HL7 ORM^O01 over MLLP and FHIR ServiceRequest over HTTP in,
 * the study pulled from a real Orthanc over DICOMweb, packaged, uploaded to the sandbox
 * upstream over HTTP, followed by the poller, documents fetched, to every end the contract
 * allows. The sandbox runs on a manual clock, so the test decides when upstream time passes
 * and when a poll cycle runs.
 */
describe('order lifecycle end to end (MLLP + FHIR in, Orthanc, sandbox upstream)', () => {
  let orthanc: RunningOrthanc;
  let sandbox: RunningSandbox;
  let adapter: TestAdapter;
  let mllp: MllpClient;
  let db: PgClient;
  let poller: OrderPollerService;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'e2e-lifecycle-'));
    orthanc = await startOrthanc();
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', clock: 'manual', dataDir: dir });
    adapter = await startTestAdapter({
      IMAGING_BASE_URL: sandbox.baseUrl,
      ...SANDBOX_CLIENT,
      IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true',
      DICOMWEB_URL: orthanc.dicomWebUrl,
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
    await orthanc?.stop();
  });

  async function storeStudy(spec: Hl7OrderSpec): Promise<void> {
    for (const instance of studyFor(spec)) await orthanc.store(instance.bytes);
  }

  /** Study in the PACS, ORM^O01 to the adapter; resolves with our order id once uploaded. */
  async function orderOverHl7(outcome: string): Promise<{ id: string; spec: Hl7OrderSpec }> {
    const spec = newOrderSpec(`Bitte KI-Auswertung. sandbox-outcome: ${outcome}`);
    await storeStudy(spec);
    const ack = ackSummary(await mllp.send(ormMessage(spec)));
    expect(ack.code).toBe('AA');
    const order = await waitFor('the order', () => orderByPlacer(db, spec.placer));
    return { id: order.id, spec };
  }

  async function orderOverFhir(outcome: string): Promise<{
    id: string;
    spec: Hl7OrderSpec;
    resourceId: string;
    resource: Record<string, unknown>;
  }> {
    const spec = newOrderSpec();
    await storeStudy(spec);
    const resource = serviceRequestFor(spec, {
      outcome,
      occurrenceDateTime: '2026-11-21T10:00:00Z',
      requesterDisplay: 'Dr. Paula Arzt',
    });
    const res = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(resource),
    });
    expect(res.status).toBe(201);
    const created = (await res.json()) as { id: string };
    const { rows } = await db.query(
      `SELECT id FROM orders WHERE id::text = $1 OR filler_order_number = $1`,
      [created.id],
    );
    expect(rows).toHaveLength(1);
    return { id: rows[0].id as string, spec, resourceId: created.id, resource };
  }

  const processing = (id: string) =>
    waitFor(
      `order ${id} uploaded`,
      async () => {
        const s = await orderState(db, id);
        if (TERMINAL.includes(s) && s !== 'cancelled') {
          const { rows } = await db.query(
            `SELECT summary FROM audit_events WHERE order_id = $1 ORDER BY id`,
            [id],
          );
          throw new Error(`order ended early (${s}): ${rows.map((r) => r.summary).join(' | ')}`);
        }
        return s === 'processing';
      },
      90_000,
    );

  /** Lets upstream time pass in steps, one poll cycle per step, until `done`. */
  async function drive(done: () => Promise<boolean>, stepMs = 5_000, maxSteps = 40) {
    for (let i = 0; i < maxSteps; i++) {
      if (await done()) return;
      await sandbox.advance(stepMs);
      await poller.runNow();
    }
    throw new Error('the orders did not reach their end');
  }

  const ends = async (ids: string[], states: string[]) =>
    (await orderStates(db, ids)).every((s) => states.includes(s));

  const docs = async (id: string) =>
    (
      await db.query(
        `SELECT kind || '/' || report_type AS d FROM order_documents WHERE order_id = $1 ORDER BY d`,
        [id],
      )
    ).rows.map((r) => r.d as string);

  const api = (path: string, init: { method?: string; body?: unknown; token?: string } = {}) =>
    fetch(`${adapter.httpUrl}${path}`, {
      method: init.method ?? 'GET',
      headers: {
        authorization: `Bearer ${init.token ?? TEST_TOKENS.sender}`,
        'content-type': 'application/json',
      },
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
    });

  // One batch of orders travels together (one poll cycle follows them all).
  let delivered: string;
  let qcBypassed: string;
  let qcFinal: string;
  let failed: string;
  let preprocessingFailed: string;
  let inReview: string;
  let cancelled: { id: string; spec: Hl7OrderSpec };

  it('places, acquires from the PACS and uploads orders from both front doors', async () => {
    const placed = await Promise.all([
      orderOverHl7('delivered'),
      orderOverHl7('qc_failed'),
      orderOverHl7('qc_failed'),
      orderOverHl7('failed'),
      orderOverHl7('preprocessing_failed'),
      orderOverFhir('in_review'),
      orderOverHl7('delivered'),
    ]);
    [delivered, qcBypassed, qcFinal, failed, preprocessingFailed, inReview] = placed.map(
      (p) => p.id,
    );
    cancelled = placed[6]!;
    // one after another: they progress together anyway, and one pg Client runs one query at a time
    for (const p of placed) await processing(p.id);
    const { rows } = await db.query(
      `SELECT count(*)::int AS n, count(DISTINCT upstream_order_id)::int AS u FROM orders WHERE id = ANY($1::uuid[])`,
      [placed.map((p) => p.id)],
    );
    expect(rows[0]).toEqual({ n: 7, u: 7 });
    // One upstream order per order, each carrying our correlation id and mapped metadata.
    const upstream = [...sandbox.state.orders.values()];
    expect(upstream).toHaveLength(7);
  });

  it('cancels an uploaded order from HL7 (ORC-1 CA): upstream cancel-order, CANCELLED', async () => {
    const ack = ackSummary(
      await mllp.send(
        ormMessage({
          ...cancelled.spec,
          orderControl: 'CA',
          controlId: `CA-${cancelled.spec.placer}`,
        }),
      ),
    );
    expect(ack.code).toBe('AA');
    await waitFor('cancelled', async () => (await orderState(db, cancelled.id)) === 'cancelled');
    const { rows } = await db.query(
      `SELECT upstream_order_id, upstream_status FROM orders WHERE id = $1`,
      [cancelled.id],
    );
    expect(rows[0].upstream_status).toBe('CANCELLED');
    const status = (await poller['deps'].client.getStatus({ orderId: rows[0].upstream_order_id }))
      .status;
    expect(status).toBe('CANCELLED');
  });

  it('cancels from FHIR (ServiceRequest.status revoked): upstream cancel-order, CANCELLED', async () => {
    const order = await orderOverFhir('delivered');
    await processing(order.id);
    const res = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${order.resourceId}`, {
      method: 'PUT',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify({ ...order.resource, id: order.resourceId, status: 'revoked' }),
    });
    expect(res.status).toBe(200);
    await waitFor('cancelled', async () => (await orderState(db, order.id)) === 'cancelled');
    const { rows } = await db.query(
      `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'order.transition' ORDER BY id DESC LIMIT 1`,
      [order.id],
    );
    expect(rows[0].detail).toMatchObject({ upstreamStatus: 'CANCELLED', to: 'cancelled' });
  });

  it('follows every order to its end: DELIVERED, QC_FAILED on hold, FAILED, PREPROCESSING_FAILED, IN_REVIEW then DELIVERED', async () => {
    await drive(
      async () =>
        (await ends([delivered, failed, preprocessingFailed, inReview], TERMINAL)) &&
        (await ends([qcBypassed, qcFinal], ['qc-hold'])),
    );
    expect(await orderState(db, delivered)).toBe('delivered');
    expect(await orderState(db, failed)).toBe('failed');
    expect(await orderState(db, preprocessingFailed)).toBe('failed');
    expect(await orderState(db, inReview)).toBe('delivered');
    expect(await upstreamStatuses(db, inReview)).toEqual(
      expect.arrayContaining(['IN_REVIEW', 'DELIVERED']),
    );
    expect((await upstreamStatuses(db, failed)).at(-1)).toBe('FAILED');
    expect((await upstreamStatuses(db, preprocessingFailed)).at(-1)).toBe('PREPROCESSING_FAILED');
    // Each change audited with the mapping row and its version.
    const { rows } = await db.query(
      `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'order.transition' AND detail->>'upstreamStatus' = 'DELIVERED'`,
      [delivered],
    );
    expect(rows[0].detail).toMatchObject({
      mappingRow: 'DELIVERED',
      mappingVersion: expect.stringMatching(/^status-mapping\//),
      from: 'processing',
      to: 'delivered',
    });
    // Documents fetched once per terminal status.
    await waitFor(
      'documents',
      async () => (await docs(delivered)).length === 2 && (await docs(failed)).length === 2,
    );
    expect(await docs(delivered)).toEqual(['results/JSON', 'results/PDF']);
    expect(await docs(failed)).toEqual(['failure/JSON', 'failure/PDF']);
    await waitFor('qc report', async () => (await docs(qcFinal)).length === 1);
    expect(await docs(qcFinal)).toEqual(['qc/results']);
    // upstream.call audit events: endpoint, status, latency, never a URL.
    const calls = await db.query(`SELECT detail FROM audit_events WHERE kind = 'upstream.call'`);
    expect(calls.rows.length).toBeGreaterThan(10);
    expect(JSON.stringify(calls.rows)).not.toMatch(/https?:\/\//);
    // Reports acknowledged (POST /reports) only once their documents are stored.
    await poller.runNow();
    const stats = await poller.runNow();
    expect(stats!.upstreamCalls).toBeLessThanOrEqual(3 + stats!.changed);
    const upstreamIdOf = async (id: string) =>
      (await db.query(`SELECT upstream_order_id FROM orders WHERE id = $1`, [id])).rows[0]
        .upstream_order_id as string;
    const reportOf = async (id: string) => {
      const upstreamId = await upstreamIdOf(id);
      return [...sandbox.state.reports.values()].filter((r) => r.orderId === upstreamId);
    };
    expect((await reportOf(delivered)).map((r) => [r.kind, r.acknowledged])).toEqual([
      ['results', true],
    ]);
    expect((await reportOf(failed)).map((r) => [r.kind, r.acknowledged])).toEqual([
      ['failure', true],
    ]);
  });

  it('a clinician bypasses a QC rejection (REST, who and why), the order goes on to DELIVERED', async () => {
    // An order over HL7 carries no sender token: admin decides for the clinician here.
    const noReason = await api(`/api/orders/${qcBypassed}/qc-bypass`, {
      method: 'POST',
      body: {},
      token: TEST_TOKENS.admin,
    });
    expect(noReason.status).toBe(400);
    const asAnalyst = await api(`/api/orders/${qcBypassed}/qc-bypass`, {
      method: 'POST',
      body: { reason: 'x' },
      token: TEST_TOKENS.analyst,
    });
    expect(asAnalyst.status).toBe(403);
    const res = await api(`/api/orders/${qcBypassed}/qc-bypass`, {
      method: 'POST',
      token: TEST_TOKENS.admin,
      body: { reason: 'motion artefact limited to two slices; volumetry still meaningful' },
    });
    expect(res.status).toBe(200);
    // Withdraw and request again while the verdict is pending.
    expect(
      (
        await api(`/api/orders/${qcBypassed}/qc-bypass`, {
          method: 'POST',
          token: TEST_TOKENS.admin,
          body: { withdraw: true },
        })
      ).status,
    ).toBe(200);
    expect(
      (
        await api(`/api/orders/${qcBypassed}/qc-bypass`, {
          method: 'POST',
          token: TEST_TOKENS.admin,
          body: { reason: 'reviewed by Dr. Arzt: accept' },
        })
      ).status,
    ).toBe(200);
    await drive(async () => (await orderState(db, qcBypassed)) === 'delivered', 1_000);
    expect(await upstreamStatuses(db, qcBypassed)).toEqual(
      expect.arrayContaining(['QC_FAILED', 'QC_BYPASS', 'DELIVERED']),
    );
    const decisions = await db.query(
      `SELECT actor, detail FROM audit_events WHERE order_id = $1 AND kind = 'decision.qc-bypass' ORDER BY id`,
      [qcBypassed],
    );
    expect(decisions.rows.map((r) => r.detail.status)).toEqual([
      'requested',
      'withdrawn',
      'requested',
    ]);
    const view = (await (
      await api(`/api/orders/${qcBypassed}`, { token: TEST_TOKENS.analyst })
    ).json()) as Record<string, unknown>;
    expect(view).toMatchObject({
      state: 'delivered',
      upstreamStatus: 'DELIVERED',
      qcBypass: { status: 'requested', reason: 'reviewed by Dr. Arzt: accept' },
    });
    expect(JSON.stringify(view)).not.toContain('MUSTERMANN');
  });

  it('EXPIRED: an order not polled before its results expired ends failed', async () => {
    const { id } = await orderOverHl7('expired');
    await processing(id);
    await sandbox.advance(120_000);
    await poller.runNow();
    expect(await orderState(db, id)).toBe('failed');
    expect((await upstreamStatuses(db, id)).at(-1)).toBe('EXPIRED');
  });

  it('QC_FAILED left final: once the bypass window closes the order ends failed', async () => {
    await sandbox.advance(8 * 24 * 3_600_000);
    await poller.runNow();
    expect(await orderState(db, qcFinal)).toBe('failed');
    const { rows } = await db.query(
      `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'order.transition' ORDER BY id DESC LIMIT 1`,
      [qcFinal],
    );
    expect(rows[0].detail).toMatchObject({ mappingRow: 'QC_FAILED_FINAL', to: 'failed' });
    // The final verdict's QC report is stored (and handed to the publishers) for that row.
    await waitFor('the final QC report', async () => {
      const r = await db.query(
        `SELECT upstream_status FROM order_documents WHERE order_id = $1 AND kind = 'qc' ORDER BY id`,
        [qcFinal],
      );
      return r.rows.length === 2 ? r.rows : undefined;
    });
  });

  it('refuses an illegal move without crashing: audited', async () => {
    const lifecycle = adapter.app.get(
      (await import('../../src/orders/order-lifecycle.service')).OrderLifecycleService,
    );
    expect(
      await lifecycle.applyUpstreamStatus(delivered, 'ANALYSIS_RUNNING', {
        qcBypassPossible: true,
      }),
    ).toBe(false);
    const { rows } = await db.query(
      `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'order.illegal-transition'`,
      [delivered],
    );
    expect(rows[0].detail).toMatchObject({ from: 'delivered', to: 'processing' });
  });
});
