import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
import { parseHl7 } from '../../src/hl7/hl7-message';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { ackSummary } from '../helpers/hl7-fixtures';
import {
  newOrderSpec,
  orderByPlacer,
  orderDiagnostics,
  orderState,
  ormMessage,
  placeWithStudy,
  SANDBOX_CLIENT,
  studyFor,
  waitFor,
  writeSiteConfig,
} from '../e2e/e2e-support';
import { multipartRelated } from '../studies/study-test-support';
import { startFaultyProxy, type ProxyAction } from '../imaging-client/faulty-proxy';
import type { DiagnosticReport, Task } from '@medplum/fhirtypes';
import {
  startAckingRis,
  startValidatingEhr,
  type TestEhr,
  type TestRis,
} from '../outbound/outbound-peers';

jest.setTimeout(240_000);

/**
 * How an order ends when its upstream steps go wrong, through the running adapter: orders over
 * MLLP from a RIS-shaped ORM^O01, the sandbox upstream behind a real HTTP proxy that can hold
 * or rewrite an answer, the result ORUs received by an acking RIS on loopback.
 */
describe('order ends (adapter, sandbox upstream behind a proxy, RIS peer)', () => {
  let sandbox: RunningSandbox;
  let proxy: Awaited<ReturnType<typeof startFaultyProxy>>;
  let adapter: TestAdapter;
  let ris: TestRis;
  let ehr: TestEhr;
  let mllp: MllpClient;
  let db: PgClient;
  /** What the proxy does with a request (default: pass it on). */
  let decide: (method: string, path: string) => ProxyAction = () => 'pass';

  /** The alert webhook's receiver: every JSON body POSTed to it. */
  const alertsPosted: Array<Record<string, unknown>> = [];
  let hook: Server;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orders-ends-'));
    hook = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        alertsPosted.push(JSON.parse(body) as Record<string, unknown>);
        res.end();
      });
    });
    await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
    ris = await startAckingRis();
    ehr = await startValidatingEhr();
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', clock: 'manual', dataDir: dir });
    proxy = await startFaultyProxy(sandbox.baseUrl, (m, p) => decide(m, p));
    adapter = await startTestAdapter({
      IMAGING_BASE_URL: proxy.baseUrl,
      ...SANDBOX_CLIENT,
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: String(ris.port),
      FHIR_SERVER_URL: ehr.baseUrl,
      OUTBOUND_POLL_MS: '50',
      CONFIG_FILE: writeSiteConfig(dir),
      POLL_INTERVAL_SECONDS: '3600',
      // Each run of a job makes one call: the job queue's attempts are what is counted here.
      IMAGING_RETRY_MAX_ATTEMPTS: '1',
      IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true',
      STUDY_QUIET_PERIOD_SECONDS: '1',
      ALERT_WEBHOOK_URL: `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hooks/imaging`,
    });
    mllp = new MllpClient({ host: '127.0.0.1', port: adapter.mllpPort, responseTimeoutMs: 10_000 });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterEach(() => {
    decide = () => 'pass';
  });
  afterAll(async () => {
    await mllp?.close();
    await db?.end();
    await adapter?.close();
    await proxy?.close();
    await sandbox?.close();
    await ris?.close();
    await ehr?.close();
    hook?.closeAllConnections();
    hook?.close();
  });

  const orusOf = (placer: string) =>
    ris.received
      .map((m) => parseHl7(m))
      .filter((m) => m.messageType.code === 'ORU' && m.get('ORC-2') === placer);

  /**
   * The clinician's side of a no-result end: the ORUs' text names no upstream error (status
   * codes, the upstream's words), only what happened in words a clinic reads.
   */
  const expectClinicalWording = (placer: string, says: RegExp) => {
    // Only the fields a clinician reads (ORC-16 reason, OBX-5 of the text OBX): ids and UIDs are
    // random and may hold the digits 503.
    const text = orusOf(placer)
      .flatMap((m) => [
        m.get('ORC-16.2') ?? '',
        ...m
          .segmentsById('OBX')
          .filter((s) => s.value(2) === 'TX')
          .map((s) => s.value(5) ?? ''),
      ])
      .join('\n');
    expect(text).toMatch(says);
    expect(text).not.toMatch(/\b503\b|maintenance|service_unavailable|attempts? failed \(last/);
  };

  /**
   * What a clinician reads of an order's no-result end, one entry per field: ORC-16 text and the
   * text OBX of each ORU, the Task's statusReason and the DiagnosticReport's conclusion in the
   * EHR. Waits until the EHR has both resources with a reason.
   */
  const clinicFields = async (id: string, placer: string) => {
    const [task, dr] = await waitFor('the Task and DiagnosticReport in the EHR', async () => {
      const [t] = await ehr.search<Task>('Task', `identifier=urn:imaging-ai-adapter:order|${id}`);
      const [d] = await ehr.search<DiagnosticReport>(
        'DiagnosticReport',
        `identifier=urn:imaging-ai-adapter:diagnostic-report|${id}`,
      );
      return t?.statusReason?.text && d?.conclusion ? ([t, d] as const) : undefined;
    });
    return [
      ...orusOf(placer).flatMap((m) => [
        m.get('ORC-16.2') ?? '',
        ...m
          .segmentsById('OBX')
          .filter((s) => s.value(2) === 'TX')
          .map((s) => s.value(5) ?? ''),
      ]),
      task.statusReason!.text!,
      dr.conclusion!,
    ];
  };

  const timeline = async (id: string) =>
    (
      await db.query(
        `SELECT kind, severity, summary, detail FROM audit_events WHERE order_id = $1 ORDER BY id`,
        [id],
      )
    ).rows as Array<{
      kind: string;
      severity: string;
      summary: string;
      detail: Record<string, unknown>;
    }>;

  it('a cancel (ORC-1 CA) that races an upstream refusal of the create ends cancelled (ORC-1 CR), the refusal on the timeline', async () => {
    const spec = newOrderSpec();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    // The create is held until the cancel is stored, then answered as a refusal.
    decide = (method, path) =>
      method === 'POST' && path === '/new-order'
        ? {
            until: gate,
            status: 400,
            rewrite: () =>
              JSON.stringify({
                error: 'invalid_metadata',
                message: 'invalid metadata: study_date must be a date',
              }),
          }
        : 'pass';
    const id = await ordered(spec);
    await waitFor('the create under way', async () =>
      proxy.hits.some((h) => h.method === 'POST' && h.path === '/new-order'),
    );
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await waitFor('the cancel stored', async () => {
      const { rows } = await db.query(`SELECT cancel_requested_at FROM orders WHERE id = $1`, [id]);
      return rows[0]?.cancel_requested_at !== null;
    });
    release();
    await waitFor(
      'the order ended',
      async () => ['cancelled', 'failed'].includes(await orderState(db, id)),
      30_000,
      100,
      () => orderDiagnostics(db, id),
    );
    expect(await orderState(db, id)).toBe('cancelled');
    // The clinician's answer: canceled as requested, no result.
    await waitFor('the ORU', async () => orusOf(spec.placer).length > 0);
    const oru = orusOf(spec.placer).at(-1)!;
    expect(oru.get('ORC-1')).toBe('CR');
    expect(oru.get('OBR-25')).toBe('X');
    // The analyst's: both facts, the cancel asked for and the upstream's refusal.
    const events = await timeline(id);
    const ended = events.find(
      (e) => e.kind === 'order.transition' && (e.detail as { to?: string }).to === 'cancelled',
    );
    expect(ended).toBeDefined();
    expect(JSON.stringify(events)).toContain('invalid_metadata');
    expect(
      events.some((e) => e.kind === 'error' && /refused/.test(e.summary) && e.severity !== 'info'),
    ).toBe(true);
  });

  /** The place job of an order: attempts used, whether it runs now, its last error. */
  const placeJob = async (id: string) =>
    (
      await db.query(
        `SELECT attempts, max_attempts, locked_by, last_error FROM graphile_worker._private_jobs WHERE key = $1`,
        [`place:${id}`],
      )
    ).rows[0] as
      | { attempts: number; max_attempts: number; locked_by: string | null; last_error: string }
      | undefined;

  /** Until the order's place job has failed once and is waiting for its next try. */
  const firstCreateFailed = (id: string, timeoutMs = 15_000) =>
    waitFor(
      'a first failed create',
      async () => {
        const job = await placeJob(id);
        return job && job.attempts >= 1 && job.locked_by === null && job.last_error;
      },
      timeoutMs,
      100,
      () => orderDiagnostics(db, id),
    );

  /** An NW over MLLP, answered AA: its order's id. */
  const ordered = async (spec: ReturnType<typeof newOrderSpec>): Promise<string> => {
    expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    return ((await waitFor('the order', () => orderByPlacer(db, spec.placer))) as { id: string })
      .id;
  };

  /** A clinician's QC bypass for order `id`, asked through our REST API (admin: an HL7 order). */
  const askBypass = (id: string, reason: string) =>
    fetch(`${adapter.httpUrl}/api/orders/${id}/qc-bypass`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.admin}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({ reason }),
    });

  /** The minute tick's sweep, now (what the cron does every minute). */
  const sweep = async () => {
    const res = await fetch(`${adapter.httpUrl}/api/orders/poll-cycle`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
    });
    expect(res.status).toBeLessThan(300);
  };

  /** What the proxy answers for an upstream endpoint under maintenance. */
  const unavailable = (headers?: Record<string, string>): ProxyAction => ({
    reply: 503,
    body: JSON.stringify({ error: 'service_unavailable', message: 'maintenance' }),
    ...(headers ? { headers } : {}),
  });

  /** Moves the sandbox clock by `stepMs` and sweeps, until the order is in `state` (`tries` rounds at most). */
  const advanceUntil = async (id: string, state: string, stepMs: number, tries: number) => {
    for (let i = 0; i < tries && (await orderState(db, id)) !== state; i++) {
      await sandbox.advance(stepMs);
      await sweep();
    }
  };

  /** Waits until the job under `key` has run and failed once, and is waiting to retry. */
  const failedOnce = (what: string, key: string) =>
    waitFor(what, async () => {
      const j = await jobOf(key);
      return j && j.attempts >= 1 && j.locked_by === null && j.last_error;
    });

  it('an order whose place job used every attempt (upstream down for days) fails with an alert and a no-result answer; one still retrying stays received', async () => {
    // The upstream's create is down (503 from its load balancer), for every order.
    decide = (method, path) =>
      method === 'POST' && path === '/new-order' ? unavailable() : 'pass';
    const given = newOrderSpec();
    const retrying = newOrderSpec();
    const ids: string[] = [];
    for (const spec of [given, retrying]) {
      expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
      ids.push(
        ((await waitFor('the order', () => orderByPlacer(db, spec.placer))) as { id: string }).id,
      );
    }
    const [id, other] = ids as [string, string];
    for (const o of ids) {
      await firstCreateFailed(o, 30_000);
    }
    // 24 attempts over about three days are skipped: the next run is the last one for the
    // first order, not for the second.
    await exhaust(`place:${id}`, id);
    await sweep();
    await waitFor(
      'the order ended',
      async () => (await orderState(db, id)) !== 'received',
      10_000,
      100,
      () => orderDiagnostics(db, id),
    );
    const { rows } = await db.query(`SELECT state, alert, last_error FROM orders WHERE id = $1`, [
      id,
    ]);
    expect(rows[0]).toMatchObject({ state: 'failed', alert: 'not-placed' });
    expect(rows[0].last_error).toMatch(/not placed upstream.*25 attempts.*503/);
    // The analyst: an alert on the timeline saying why.
    const events = await timeline(id);
    expect(
      events.some(
        (e) => e.kind === 'order.alert' && e.severity === 'error' && /not-placed/.test(e.summary),
      ),
    ).toBe(true);
    // The clinician: a no-result answer, never a result.
    await waitFor('the ORU', async () => orusOf(given.placer).length > 0);
    const orus = orusOf(given.placer);
    expect(orus.every((m) => m.get('OBR-25') === 'X')).toBe(true);
    expectClinicalWording(given.placer, /could not be placed with the analysis service/);
    // Still retrying (and so, like an order held back by the budget, still to be placed): left alone.
    expect(await orderState(db, other)).toBe('received');
    expect((await placeJob(other))!.attempts).toBeLessThan(25);
    await sweep();
    expect(await orderState(db, other)).toBe('received');
  });

  it('a create the upstream refuses (400 invalid_metadata) fails with alert upstream-refused: the clinic reads a clinical sentence, the analyst (timeline, last_error, alert webhook) the refusal', async () => {
    decide = (method, path) =>
      method === 'POST' && path === '/new-order'
        ? {
            reply: 400,
            body: JSON.stringify({
              error: 'invalid_metadata',
              message: 'invalid metadata: study_date must be a date',
            }),
          }
        : 'pass';
    const spec = newOrderSpec();
    const id = await ordered(spec);
    await waitFor(
      'the order failed',
      async () => (await orderState(db, id)) === 'failed',
      30_000,
      100,
      () => orderDiagnostics(db, id),
    );
    const { rows } = await db.query(`SELECT alert, last_error FROM orders WHERE id = $1`, [id]);
    expect(rows[0].alert).toBe('upstream-refused');
    expect(rows[0].last_error).toMatch(/invalid_metadata/);
    expect(JSON.stringify(await timeline(id))).toContain('invalid_metadata');
    await waitFor('the alert posted', async () =>
      alertsPosted.some((b) => b['orderId'] === id && b['alert'] === 'upstream-refused'),
    );
    const posted = alertsPosted.find(
      (b) => b['orderId'] === id && b['alert'] === 'upstream-refused',
    )!;
    expect(String(posted['reason'])).toMatch(/invalid_metadata/);
    await waitFor('the ORU', async () => orusOf(spec.placer).length > 0);
    expectClinicalWording(
      spec.placer,
      /the analysis service did not accept the order; no result will come/,
    );
    const text = JSON.stringify(
      orusOf(spec.placer).map((m) => [m.get('ORC-16.2'), m.get('OBX-5')]),
    );
    expect(text).not.toMatch(/invalid_metadata|study_date|\b400\b|client_error|new-order/);
  });

  it.each([
    ['1800 (seconds, half an hour)', '1800', 1_800],
    ['an HTTP-date in year 9999', 'Fri, 31 Dec 9999 23:59:59 GMT', 3_600],
    ['1e12 (not delta-seconds)', '1e12', 0],
    ['-1 (negative)', '-1', 0],
    ['20 digits of seconds', '99999999999999999999', 0],
  ])(
    'a create answered 503 with Retry-After %s: the call does not wait, the job comes back no sooner than asked (at most 1 h)',
    async (_what, retryAfter, expectedS) => {
      decide = (method, path) =>
        method === 'POST' && path === '/new-order'
          ? unavailable({ 'retry-after': retryAfter })
          : 'pass';
      const spec = newOrderSpec();
      const started = Date.now();
      const id = await ordered(spec);
      await firstCreateFailed(id);
      // No stall: the failed run ended within seconds.
      expect(Date.now() - started).toBeLessThan(10_000);
      const { rows } = await db.query(
        `SELECT extract(epoch FROM run_at - now())::float AS s, attempts FROM graphile_worker._private_jobs WHERE key = $1`,
        [`place:${id}`],
      );
      expect(rows[0].attempts).toBe(1);
      // graphile-worker's own back-off after the first attempt (e^1 s) comes on top.
      if (expectedS > 0) {
        expect(rows[0].s).toBeGreaterThan(expectedS - 10);
        expect(rows[0].s).toBeLessThan(expectedS + 10);
      } else {
        expect(rows[0].s).toBeLessThan(10);
      }
      expect(await orderState(db, id)).toBe('received');
    },
  );

  it('a cancel while the create is retried after a lost answer: the upstream order that create made is cancelled too, not left behind', async () => {
    // The first create reaches the upstream, which creates the order; its answer is lost.
    let creates = 0;
    decide = (method, path) =>
      method === 'POST' && path === '/new-order' && ++creates === 1 ? 'drop-after' : 'pass';
    const spec = newOrderSpec();
    const before = new Set(sandbox.state.orders.keys());
    const id = await ordered(spec);
    await firstCreateFailed(id);
    const created = [...sandbox.state.orders.values()]
      .filter((o) => !before.has(o.orderId) && o.apiMetadata['correlation_id'] === id)
      .map((o) => o.orderId);
    expect(created).toHaveLength(1);
    const upstreamId = created[0]!;
    // Held until the cancel is stored, then the retry runs.
    await db.query(
      `UPDATE graphile_worker._private_jobs SET run_at = now() + interval '1 hour' WHERE key = $1`,
      [`place:${id}`],
    );
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await waitFor('the cancel stored', async () => {
      const { rows } = await db.query(`SELECT cancel_requested_at FROM orders WHERE id = $1`, [id]);
      return rows[0]?.cancel_requested_at !== null;
    });
    await db.query(`UPDATE graphile_worker._private_jobs SET run_at = now() WHERE key = $1`, [
      `place:${id}`,
    ]);
    await waitFor(
      'the order ended',
      async () => (await orderState(db, id)) === 'cancelled',
      15_000,
      100,
      () => orderDiagnostics(db, id),
    );
    // The upstream order the lost create made does not linger (PENDING, waiting for a study).
    await waitFor(
      'the upstream order cancelled',
      async () => sandbox.state.orders.get(upstreamId)?.status === 'CANCELLED',
      10_000,
      100,
      async () => `upstream ${upstreamId}: ${sandbox.state.orders.get(upstreamId)?.status}`,
    );
    await waitFor('the ORU', async () => orusOf(spec.placer).length > 0);
    expect(orusOf(spec.placer).at(-1)!.get('ORC-1')).toBe('CR');
  });

  it('a cancel while the create waits out the upstream (next try in 30 min): answered within seconds, not when the create is tried again', async () => {
    decide = (method, path) =>
      method === 'POST' && path === '/new-order' ? unavailable({ 'retry-after': '1800' }) : 'pass';
    const spec = newOrderSpec();
    const id = await ordered(spec);
    await firstCreateFailed(id);
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    const asked = Date.now();
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await waitFor(
      'the order cancelled',
      async () => (await orderState(db, id)) === 'cancelled',
      15_000,
      100,
      () => orderDiagnostics(db, id),
    );
    await waitFor('the ORU', async () => orusOf(spec.placer).length > 0);
    expect(orusOf(spec.placer).at(-1)!.get('ORC-1')).toBe('CR');
    expect(Date.now() - asked).toBeLessThan(15_000);
  });

  it('a new order and its cancel in one message (ORC NW, then ORC CA): ORR OK and CR, and the order ends cancelled with a CR result, none left upstream', async () => {
    // The RIS writes the order and, in the same ORM^O01, its cancel (an order entered and
    // withdrawn before the interface sent it). Before: AE 204 "unknown order" for the CA, and
    // the whole message refused, the NW with it.
    const spec = newOrderSpec();
    const nw = ormMessage({ ...spec, controlId: `NWCA-${spec.placer}` }).toString('latin1');
    const ca = ormMessage({ ...spec, orderControl: 'CA' as const }).toString('latin1');
    const message = nw + ca.slice(ca.indexOf('ORC|'), ca.indexOf('ZDS|'));
    const orr = parseHl7(await mllp.send(Buffer.from(message, 'latin1')));
    expect(orr.get('MSA-1')).toBe('AA');
    expect(orr.segmentsById('ORC').map((o) => o.value(1))).toEqual(['OK', 'CR']);
    const { id } = (await waitFor('the order', () => orderByPlacer(db, spec.placer))) as {
      id: string;
    };
    await waitFor(
      'the order cancelled',
      async () => (await orderState(db, id)) === 'cancelled',
      15_000,
      100,
      () => orderDiagnostics(db, id),
    );
    await waitFor('the ORU', async () => orusOf(spec.placer).length > 0);
    expect(orusOf(spec.placer).at(-1)!.get('ORC-1')).toBe('CR');
    const { rows } = await db.query(`SELECT upstream_order_id FROM orders WHERE id = $1`, [id]);
    const upstream = rows[0].upstream_order_id as string | null;
    if (upstream) expect(sandbox.state.orders.get(upstream)?.status).toBe('CANCELLED');
  });

  it('a cancel while a create is under way that then succeeds: the order ends cancelled and the upstream order is cancelled, none left behind', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    decide = (method, path) =>
      method === 'POST' && path === '/new-order' ? { until: gate } : 'pass';
    const spec = newOrderSpec();
    const before = new Set(sandbox.state.orders.keys());
    const id = await ordered(spec);
    await waitFor('the create under way', async () =>
      proxy.hits.some((h) => h.method === 'POST' && h.path === '/new-order' && h.status === null),
    );
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await waitFor('the cancel stored', async () => {
      const { rows } = await db.query(`SELECT cancel_requested_at FROM orders WHERE id = $1`, [id]);
      return rows[0]?.cancel_requested_at !== null;
    });
    // Let the cancel's job run before the create answers.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    release();
    await waitFor(
      'the order cancelled',
      async () => (await orderState(db, id)) === 'cancelled',
      15_000,
      100,
      () => orderDiagnostics(db, id),
    );
    const created = await waitFor('the upstream order created', async () => {
      const made = [...sandbox.state.orders.values()]
        .filter((o) => !before.has(o.orderId) && o.apiMetadata['correlation_id'] === id)
        .map((o) => o.orderId);
      return made.length > 0 && made;
    });
    expect(created).toHaveLength(1);
    await waitFor(
      'no upstream order left behind',
      async () => created.every((k) => sandbox.state.orders.get(k)?.status === 'CANCELLED'),
      10_000,
      100,
      async () => created.map((k) => `${k}: ${sandbox.state.orders.get(k)?.status}`).join(', '),
    );
    await waitFor('the ORU', async () => orusOf(spec.placer).length > 0);
    const orus = orusOf(spec.placer);
    expect(orus.at(-1)!.get('ORC-1')).toBe('CR');
    expect(orus.every((m) => m.get('OBR-25') === 'X')).toBe(true);
  });

  it('a delivered order whose results cannot be fetched for every attempt of its job: an alert says so (the result is not silently missing)', async () => {
    decide = (method, path) => (method === 'GET' && path === '/results' ? unavailable() : 'pass');
    const spec = newOrderSpec('Bitte KI-Auswertung. sandbox-outcome: delivered');
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
    await waitFor(
      'uploaded',
      async () => (await orderState(db, id)) === 'processing',
      90_000,
      200,
      () => orderDiagnostics(db, id),
    );
    await advanceUntil(id, 'delivered', 5_000, 20);
    expect(await orderState(db, id)).toBe('delivered');
    await exhaust(`documents:${id}:DELIVERED`, id);
    await sweep();
    const { rows } = await db.query(`SELECT state, alert, last_error FROM orders WHERE id = $1`, [
      id,
    ]);
    expect(rows[0]).toMatchObject({ state: 'delivered', alert: 'documents-not-fetched' });
    expect(rows[0].last_error).toMatch(/DELIVERED.*25 attempts.*503/);
    const alerts = (await timeline(id)).filter((e) => e.kind === 'order.alert');
    expect(alerts).toHaveLength(1);
    expect(alerts[0]!.severity).toBe('error');
    // Once: the next sweep does not raise it again.
    await sweep();
    expect((await timeline(id)).filter((e) => e.kind === 'order.alert')).toHaveLength(1);
    // A person is told, like of any other order alert (ALERT_WEBHOOK_URL).
    await waitFor('the alert POSTed', async () =>
      alertsPosted.some((b) => b['orderId'] === id && b['alert'] === 'documents-not-fetched'),
    );
    // No result was published from nothing, and the clinic is told none is coming (the
    // ENDED_LOCALLY_FAILED row, as for an order that could not be processed), once: before,
    // the RIS never heard of the order again and the EHR's Task stayed `completed`.
    const noResult = await waitFor('the no-result ORU', async () => {
      const orus = orusOf(spec.placer);
      return orus.length > 0 && orus;
    });
    expect(noResult.map((m) => [m.get('ORC-1'), m.get('ORC-5'), m.get('OBR-25')])).toEqual([
      ['OC', 'CA', 'X'],
    ]);
    // The clinic reads the sentence of CLINICAL_END_REASONS, in every field it reads; the
    // attempts and the upstream's error stay with the analyst (last_error, timeline, webhook).
    // Before, ORC-16, the OBX, the Task and the DiagnosticReport said "(all 25 attempts failed)".
    const fields = await clinicFields(id, spec.placer);
    expect(fields.length).toBeGreaterThanOrEqual(3);
    for (const text of fields) {
      // the sentence alone: capitalised where it stands as one (conclusion, OBX)
      expect(text.toLowerCase()).toContain(
        'the analysis was done, but its results could not be retrieved; no result will come. order it again if still needed',
      );
      expect(text).not.toMatch(
        /attempts?|\b503\b|maintenance|service_unavailable|\/results|https?:/,
      );
    }
    const posted = alertsPosted.find(
      (b) => b['orderId'] === id && b['alert'] === 'documents-not-fetched',
    )!;
    expect(String(posted['reason'])).toMatch(/DELIVERED.*25 attempts.*503/);
    expect(alerts[0]!.summary).toMatch(/25 attempts/);
    await sweep();
    expect(orusOf(spec.placer)).toHaveLength(1);
  });

  /** The job under a key: attempts used, whether it runs now, its last error. */
  const jobOf = async (key: string) =>
    (
      await db.query(
        `SELECT attempts, max_attempts, locked_by, last_error FROM graphile_worker._private_jobs WHERE key = $1`,
        [key],
      )
    ).rows[0] as
      | { attempts: number; max_attempts: number; locked_by: string | null; last_error: string }
      | undefined;

  /**
   * The job under `key` lost (its row deleted) while no worker runs it: a run under way would
   * enqueue its next try itself (an acquire still waiting for its study), and the job would not
   * be lost at all.
   */
  const loseIdleJob = async (key: string) => {
    await waitFor(`${key} deleted while idle`, async () => {
      const { rowCount } = await db.query(
        `DELETE FROM graphile_worker._private_jobs WHERE key = $1 AND locked_by IS NULL`,
        [key],
      );
      return rowCount === 1;
    });
  };

  /** The job under `key` fails once, then its remaining attempts are skipped to the last one. */
  const exhaust = async (key: string, id: string) => {
    await waitFor(
      `a first failed ${key}`,
      async () => {
        const j = await jobOf(key);
        return j && j.attempts >= 1 && j.locked_by === null && j.last_error;
      },
      30_000,
      100,
      () => orderDiagnostics(db, id),
    );
    await db.query(
      `UPDATE graphile_worker._private_jobs SET attempts = max_attempts - 1, run_at = now() WHERE key = $1`,
      [key],
    );
    await waitFor(
      `the last attempt of ${key} failed`,
      async () => {
        const j = await jobOf(key);
        return j && j.attempts >= j.max_attempts && j.locked_by === null;
      },
      30_000,
      100,
      () => orderDiagnostics(db, id),
    );
  };

  /** An order uploaded (the sandbox follows its outcome on the manual clock). */
  const processing = async (note: string) => {
    const spec = newOrderSpec(note);
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
    await waitFor(
      'uploaded',
      async () => (await orderState(db, id)) === 'processing',
      90_000,
      200,
      () => orderDiagnostics(db, id),
    );
    return { spec, id };
  };

  it('an order left received without its place job (the job row lost) is found by the sweep and placed once, the lost create found by its correlation id', async () => {
    // The first create reaches the upstream, which creates the order; its answer is lost.
    let creates = 0;
    decide = (method, path) =>
      method === 'POST' && path === '/new-order' && ++creates === 1 ? 'drop-after' : 'pass';
    const spec = newOrderSpec();
    const id = await ordered(spec);
    await firstCreateFailed(id);
    // The job row goes (deleted by hand, a restore, a queue reset): nothing would run it again.
    await db.query(`DELETE FROM graphile_worker._private_jobs WHERE key = $1`, [`place:${id}`]);
    // Younger than the bound: left alone (its job may be on its way through the job outbox).
    await sweep();
    expect(await orderState(db, id)).toBe('received');
    expect(await placeJob(id)).toBeUndefined();
    await db.query(`UPDATE orders SET created_at = now() - interval '20 minutes' WHERE id = $1`, [
      id,
    ]);
    await sweep();
    await waitFor(
      'placed',
      async () => (await orderState(db, id)) === 'placed',
      30_000,
      100,
      () => orderDiagnostics(db, id),
    );
    // One upstream order: the re-enqueued job found the lost create's order.
    const made = [...sandbox.state.orders.values()].filter(
      (o) => o.apiMetadata['correlation_id'] === id,
    );
    expect(made).toHaveLength(1);
    const { rows } = await db.query(`SELECT upstream_order_id FROM orders WHERE id = $1`, [id]);
    expect(rows[0].upstream_order_id).toBe(made[0]!.orderId);
    expect(
      (await timeline(id)).some(
        (e) => e.kind === 'error' && /place-upstream job was missing/.test(e.summary),
      ),
    ).toBe(true);
    // A later sweep does nothing more for it.
    await sweep();
    expect(
      (await timeline(id)).filter(
        (e) => e.kind === 'error' && /place-upstream job was missing/.test(e.summary),
      ),
    ).toHaveLength(1);
  });

  it('documents-not-fetched is cleared when a later fetch of the same documents succeeds (the job run again once the upstream is back)', async () => {
    let down = true;
    decide = (method, path) =>
      down && method === 'GET' && path === '/results' ? unavailable() : 'pass';
    const { spec, id } = await processing('Bitte KI-Auswertung. sandbox-outcome: delivered');
    await advanceUntil(id, 'delivered', 5_000, 20);
    expect(await orderState(db, id)).toBe('delivered');
    const key = `documents:${id}:DELIVERED`;
    await exhaust(key, id);
    await sweep();
    const alerted = await db.query(`SELECT alert FROM orders WHERE id = $1`, [id]);
    expect(alerted.rows[0].alert).toBe('documents-not-fetched');
    // The upstream is back; an operator runs the job again (graphile-worker's own function).
    down = false;
    await db.query(
      `SELECT graphile_worker.reschedule_jobs(ARRAY[id], run_at => now(), attempts => 0)
         FROM graphile_worker._private_jobs WHERE key = $1`,
      [key],
    );
    await waitFor(
      'the results stored',
      async () => {
        const { rows } = await db.query(
          `SELECT count(*)::int AS n FROM order_documents WHERE order_id = $1 AND kind = 'results'`,
          [id],
        );
        return rows[0].n === 2;
      },
      30_000,
      100,
      () => orderDiagnostics(db, id),
    );
    const { rows } = await db.query(`SELECT state, alert, last_error FROM orders WHERE id = $1`, [
      id,
    ]);
    expect(rows[0]).toEqual({ state: 'delivered', alert: null, last_error: null });
    expect(
      (await timeline(id)).some(
        (e) => e.kind === 'order.alert-cleared' && /documents-not-fetched/.test(e.summary),
      ),
    ).toBe(true);
    // The result now goes out (after the no-result answer the sweep sent).
    await waitFor('the result ORU', async () =>
      orusOf(spec.placer).some((m) => m.get('OBR-25') === 'F'),
    );
    // A later sweep raises nothing again.
    await sweep();
    expect((await db.query(`SELECT alert FROM orders WHERE id = $1`, [id])).rows[0].alert).toBe(
      null,
    );
  });

  it('an upstream status that moves backwards (a stale QC_FAILED after QC_BYPASS, a stale QUEUED during analysis) is observed on the timeline, not applied; the bypass after QC_FAILED and the way on to DELIVERED are', async () => {
    const { id } = await processing('Bitte KI-Auswertung. sandbox-outcome: qc_failed');
    await advanceUntil(id, 'qc-hold', 1_000, 20);
    expect(await orderState(db, id)).toBe('qc-hold');
    await waitFor('the QC report stored', async () => {
      const { rows } = await db.query(
        `SELECT 1 FROM order_documents WHERE order_id = $1 AND kind = 'qc'`,
        [id],
      );
      return rows.length > 0;
    });
    const bypass = await askBypass(id, 'motion limited to two slices; volumetry still meaningful');
    expect(bypass.status).toBe(200);
    const upstream = async () =>
      (
        await db.query(
          `SELECT state, upstream_status, upstream_order_id FROM orders WHERE id = $1`,
          [id],
        )
      ).rows[0] as { state: string; upstream_status: string; upstream_order_id: string };
    // The verdict (2 s): QC_BYPASS, a move forward from QC_FAILED.
    await sandbox.advance(2_000);
    await sweep();
    expect(await upstream()).toMatchObject({ state: 'processing', upstream_status: 'QC_BYPASS' });
    const { upstream_order_id: upstreamId } = await upstream();
    /** GET /list-orders answers with this order listed as `status` (a stale listing). */
    const listedAs = (status: string) => {
      decide = (method, path) =>
        method === 'GET' && path === '/list-orders'
          ? {
              rewrite: (body) => {
                const page = JSON.parse(body.toString()) as {
                  orders: Array<{ order_id: string; status: string }>;
                };
                page.orders = page.orders.map((o) =>
                  o.order_id === upstreamId ? { ...o, status } : o,
                );
                return JSON.stringify(page);
              },
            }
          : 'pass';
    };
    const published = async () =>
      (
        await db.query(
          `SELECT payload->>'rowKey' AS row FROM outbox WHERE order_id = $1 ORDER BY id`,
          [id],
        )
      ).rows.map((r: { row: string }) => r.row);
    const before = await published();
    listedAs('QC_FAILED');
    await sweep();
    await sweep();
    expect(await upstream()).toMatchObject({ state: 'processing', upstream_status: 'QC_BYPASS' });
    expect(await published()).toEqual(before);
    const stale = async () =>
      (await timeline(id)).filter((e) => e.kind === 'upstream.stale-status');
    expect(await stale()).toHaveLength(1);
    expect((await stale())[0]!.detail).toMatchObject({
      upstreamStatus: 'QC_FAILED',
      appliedUpstreamStatus: 'QC_BYPASS',
    });
    // Analysis under way (1 s to PREPROCESSING, 2 s to ANALYSIS_RUNNING), then a stale QUEUED.
    decide = () => 'pass';
    await sandbox.advance(3_000);
    await sweep();
    expect(await upstream()).toMatchObject({ upstream_status: 'ANALYSIS_RUNNING' });
    listedAs('QUEUED');
    await sweep();
    expect(await upstream()).toMatchObject({
      state: 'processing',
      upstream_status: 'ANALYSIS_RUNNING',
    });
    expect(await stale()).toHaveLength(2);
    // On to DELIVERED, applied as ever.
    decide = () => 'pass';
    await advanceUntil(id, 'delivered', 2_000, 10);
    expect(await upstream()).toMatchObject({ state: 'delivered', upstream_status: 'DELIVERED' });
  });

  it('a final QC_FAILED after QC_BYPASS (off the active list: the bypass withdrawn or refused upstream) is an end, applied: the order fails as not analysable, no stale-status observation', async () => {
    // The backwards guard holds earlier stages back; an end is never "stale". Before f0278f2
    // this QC_FAILED was observed and not applied, and the order sat in processing until the
    // upstream-stuck deadline, the clinician told nothing.
    const { id } = await processing('Bitte KI-Auswertung. sandbox-outcome: qc_failed');
    await advanceUntil(id, 'qc-hold', 1_000, 20);
    const bypass = await askBypass(id, 'motion limited to two slices');
    expect(bypass.status).toBe(200);
    await sandbox.advance(2_000);
    await sweep();
    const row = async () =>
      (
        await db.query(
          `SELECT state, upstream_status, upstream_order_id FROM orders WHERE id = $1`,
          [id],
        )
      ).rows[0] as { state: string; upstream_status: string; upstream_order_id: string };
    expect(await row()).toMatchObject({ state: 'processing', upstream_status: 'QC_BYPASS' });
    const { upstream_order_id: upstreamId } = await row();
    // The upstream drops the order from its active list and GET /status says QC_FAILED.
    decide = (method, path) => {
      if (method === 'GET' && path === '/list-orders') {
        return {
          rewrite: (body) => {
            const page = JSON.parse(body.toString()) as { orders: Array<{ order_id: string }> };
            page.orders = page.orders.filter((o) => o.order_id !== upstreamId);
            return JSON.stringify(page);
          },
        };
      }
      if (method === 'GET' && path === '/status') {
        return {
          rewrite: (body) =>
            JSON.stringify({ ...(JSON.parse(body.toString()) as object), status: 'QC_FAILED' }),
        };
      }
      return 'pass';
    };
    await sweep();
    await sweep();
    expect(await row()).toMatchObject({ state: 'failed', upstream_status: 'QC_FAILED' });
    const kinds = (await timeline(id)).map((e) => e.kind);
    expect(kinds).not.toContain('upstream.stale-status');
    // Published as the final QC rejection once the QC report is fetched (row QC_FAILED_FINAL).
    await waitFor('the final QC rejection published', async () => {
      const { rows } = await db.query(
        `SELECT 1 FROM outbox WHERE order_id = $1 AND payload->>'rowKey' = 'QC_FAILED_FINAL'`,
        [id],
      );
      return rows.length > 0;
    });
    decide = () => 'pass';
  });

  it('an order released from manual review back to analysis (IN_REVIEW then ANALYSIS_RUNNING) is applied, not observed as a stale status; back in review and on to DELIVERED as ever', async () => {
    const { id } = await processing('Bitte KI-Auswertung. sandbox-outcome: in_review');
    const upstream = async () =>
      (
        await db.query(
          `SELECT state, upstream_status, upstream_order_id FROM orders WHERE id = $1`,
          [id],
        )
      ).rows[0] as { state: string; upstream_status: string; upstream_order_id: string };
    for (let i = 0; i < 20 && (await upstream()).upstream_status !== 'IN_REVIEW'; i++) {
      await sandbox.advance(1_000);
      await sweep();
    }
    expect(await upstream()).toMatchObject({ state: 'processing', upstream_status: 'IN_REVIEW' });
    const { upstream_order_id: upstreamId } = await upstream();
    // The reviewer sends the order back to analysis: the listing says ANALYSIS_RUNNING.
    decide = (method, path) =>
      method === 'GET' && path === '/list-orders'
        ? {
            rewrite: (body) => {
              const page = JSON.parse(body.toString()) as {
                orders: Array<{ order_id: string; status: string }>;
              };
              page.orders = page.orders.map((o) =>
                o.order_id === upstreamId ? { ...o, status: 'ANALYSIS_RUNNING' } : o,
              );
              return JSON.stringify(page);
            },
          }
        : 'pass';
    await sweep();
    expect(await upstream()).toMatchObject({
      state: 'processing',
      upstream_status: 'ANALYSIS_RUNNING',
    });
    const events = await timeline(id);
    expect(events.filter((e) => e.kind === 'upstream.stale-status')).toHaveLength(0);
    expect(
      events.some(
        (e) =>
          e.kind === 'order.transition' &&
          (e.detail as { upstreamStatus?: string; previousUpstreamStatus?: string })
            .upstreamStatus === 'ANALYSIS_RUNNING' &&
          (e.detail as { previousUpstreamStatus?: string }).previousUpstreamStatus === 'IN_REVIEW',
      ),
    ).toBe(true);
    // In review again (the listing as it is), then on to DELIVERED.
    decide = () => 'pass';
    await sweep();
    expect(await upstream()).toMatchObject({ upstream_status: 'IN_REVIEW' });
    await advanceUntil(id, 'delivered', 5_000, 10);
    expect(await upstream()).toMatchObject({ state: 'delivered', upstream_status: 'DELIVERED' });
  });

  it('a QC report of a bypassable QC_FAILED fetched only after the bypass was granted is not published as the final QC rejection; the order goes on to its result', async () => {
    let qcDown = true;
    decide = (method, path) =>
      qcDown && method === 'GET' && path === '/qc-report' ? unavailable() : 'pass';
    const { spec, id } = await processing('Bitte KI-Auswertung. sandbox-outcome: qc_failed');
    await advanceUntil(id, 'qc-hold', 1_000, 20);
    expect(await orderState(db, id)).toBe('qc-hold');
    const key = `documents:${id}:QC_FAILED_BYPASSABLE`;
    await failedOnce('a first failed QC report fetch', key);
    const bypass = await askBypass(id, 'motion limited to two slices; volumetry still meaningful');
    expect(bypass.status).toBe(200);
    await sandbox.advance(2_000);
    await sweep();
    expect(await orderState(db, id)).toBe('processing');
    // The upstream's QC report comes back; the job's retry stores it.
    qcDown = false;
    await db.query(`UPDATE graphile_worker._private_jobs SET run_at = now() WHERE key = $1`, [key]);
    await waitFor('the QC report stored', async () => {
      const { rows } = await db.query(
        `SELECT 1 FROM order_documents WHERE order_id = $1 AND kind = 'qc'`,
        [id],
      );
      return rows.length > 0;
    });
    await advanceUntil(id, 'delivered', 2_000, 10);
    expect(await orderState(db, id)).toBe('delivered');
    await waitFor('the result ORU', async () =>
      orusOf(spec.placer).some((m) => m.get('OBR-25') === 'F'),
    );
    // Never told "not analysable" (QC_FAILED final: Task failed, ORU OC/CA with OBR-25 X).
    const { rows } = await db.query(
      `SELECT payload->>'rowKey' AS row FROM outbox WHERE order_id = $1 ORDER BY id`,
      [id],
    );
    expect(rows.map((r: { row: string }) => r.row)).not.toContain('QC_FAILED_FINAL');
    expect(orusOf(spec.placer).map((m) => m.get('OBR-25'))).not.toContain('X');
  });

  it('a QC report job of a bypassable QC_FAILED that runs only after the results were stored leaves their mark (documents_fetched_for DELIVERED): the sweep enqueues no documents job, warns of none', async () => {
    let qcDown = true;
    decide = (method, path) =>
      qcDown && method === 'GET' && path === '/qc-report' ? unavailable() : 'pass';
    const { id } = await processing('Bitte KI-Auswertung. sandbox-outcome: qc_failed');
    await advanceUntil(id, 'qc-hold', 1_000, 20);
    const qcKey = `documents:${id}:QC_FAILED_BYPASSABLE`;
    await failedOnce('a first failed QC report fetch', qcKey);
    expect(
      (await askBypass(id, 'motion limited to two slices; volumetry still meaningful')).status,
    ).toBe(200);
    await sandbox.advance(2_000);
    await sweep();
    // The QC report job waits out its back-off while the order goes on to DELIVERED and its
    // results are stored and marked.
    await advanceUntil(id, 'delivered', 2_000, 10);
    const mark = async () =>
      (await db.query(`SELECT documents_fetched_for FROM orders WHERE id = $1`, [id])).rows[0]
        .documents_fetched_for as string | null;
    await waitFor('the results marked fetched', async () => (await mark()) === 'DELIVERED');
    // Now the late QC job runs and stores its report.
    qcDown = false;
    await db.query(`UPDATE graphile_worker._private_jobs SET run_at = now() WHERE key = $1`, [
      qcKey,
    ]);
    await waitFor('the late QC job done', async () => (await jobOf(qcKey)) === undefined);
    const { rows: qc } = await db.query(
      `SELECT upstream_status FROM order_documents WHERE order_id = $1 AND kind = 'qc'`,
      [id],
    );
    expect(qc).toEqual([{ upstream_status: 'QC_FAILED_BYPASSABLE' }]);
    // Before: the late job set the mark back to QC_FAILED_BYPASSABLE, and the sweep took the
    // results for never fetched: a "job was missing" warning and a documents job again.
    expect(await mark()).toBe('DELIVERED');
    await db.query(
      `UPDATE orders SET upstream_status_at = now() - interval '20 minutes' WHERE id = $1`,
      [id],
    );
    await sweep();
    expect(await jobOf(`documents:${id}:DELIVERED`)).toBeUndefined();
    expect(
      (await timeline(id)).filter((e) => e.kind === 'error' && /job was missing/.test(e.summary)),
    ).toHaveLength(0);
  });

  it('an order placed (waiting for its study) without its acquire job (the row lost) gets it again from the sweep, not a study-deadline failure a day later', async () => {
    const spec = newOrderSpec();
    const id = await ordered(spec);
    await waitFor('placed', async () => (await orderState(db, id)) === 'placed');
    await waitFor('its acquire job', async () => (await jobOf(`acquire:${id}`)) !== undefined);
    await loseIdleJob(`acquire:${id}`);
    await db.query(`UPDATE orders SET created_at = now() - interval '20 minutes' WHERE id = $1`, [
      id,
    ]);
    await sweep();
    await waitFor(
      'the acquire job again',
      async () => (await jobOf(`acquire:${id}`)) !== undefined,
    );
    expect(await orderState(db, id)).toBe('placed');
    expect(
      (await timeline(id)).filter((e) => e.kind === 'error' && /job was missing/.test(e.summary)),
    ).toHaveLength(1);
    // It acquires as ever: the study pushed now is found, packaged and uploaded.
    const { body, contentType } = multipartRelated(studyFor(spec).map((x) => ({ data: x.bytes })));
    const res = await fetch(`${adapter.httpUrl}/dicomweb/studies`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, 'content-type': contentType },
      body,
    });
    expect(res.status).toBe(200);
    await waitFor(
      'uploaded',
      async () => (await orderState(db, id)) === 'processing',
      60_000,
      200,
      () => orderDiagnostics(db, id),
    );
  });

  it('two sweeps at once (the minute tick and POST /api/orders/poll-cycle, or a tick overrunning the next) enqueue a lost job once', async () => {
    // Before: each sweep read "no job" before either had enqueued one, and both enqueued it:
    // two warnings, and a second job under the key once a worker had taken the first (the
    // running one's key cleared), the step run twice.
    const spec = newOrderSpec();
    const id = await ordered(spec);
    await waitFor('placed', async () => (await orderState(db, id)) === 'placed');
    await waitFor('its acquire job', async () => (await jobOf(`acquire:${id}`)) !== undefined);
    await loseIdleJob(`acquire:${id}`);
    await db.query(`UPDATE orders SET created_at = now() - interval '20 minutes' WHERE id = $1`, [
      id,
    ]);
    await Promise.all([sweep(), sweep(), sweep(), sweep()]);
    await waitFor(
      'the acquire job again',
      async () => (await jobOf(`acquire:${id}`)) !== undefined,
    );
    expect(
      (await timeline(id)).filter((e) => e.kind === 'error' && /job was missing/.test(e.summary)),
    ).toHaveLength(1);
  });

  it('an upload waiting out its back-off after a 5xx is not run again by every sweep (its lease released is not a lapsed lease)', async () => {
    decide = (method, path) =>
      method === 'GET' && path === '/upload/single-put' ? unavailable() : 'pass';
    const spec = newOrderSpec();
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
    const key = `upload:${id}`;
    await waitFor(
      'a first failed upload',
      async () => {
        const j = await jobOf(key);
        return j && j.attempts >= 1 && j.locked_by === null && j.last_error;
      },
      60_000,
      100,
      () => orderDiagnostics(db, id),
    );
    // Its next try is an hour away (graphile-worker's back-off after a few attempts).
    await db.query(
      `UPDATE graphile_worker._private_jobs SET run_at = now() + interval '1 hour' WHERE key = $1`,
      [key],
    );
    const attempts = (await jobOf(key))!.attempts;
    const calls = () =>
      proxy.hits.filter((h) => h.method === 'GET' && h.path === '/upload/single-put').length;
    const before = calls();
    for (let i = 0; i < 3; i++) await sweep();
    await new Promise((r) => setTimeout(r, 3_000));
    expect(calls()).toBe(before);
    const job = (await jobOf(key))!;
    expect(job.attempts).toBe(attempts);
    expect(await orderState(db, id)).toBe('uploading');
    // The upstream back, the try when due uploads it.
    decide = () => 'pass';
    await db.query(`UPDATE graphile_worker._private_jobs SET run_at = now() WHERE key = $1`, [key]);
    await waitFor(
      'uploaded',
      async () => (await orderState(db, id)) === 'processing',
      30_000,
      200,
      () => orderDiagnostics(db, id),
    );
  });

  it('an upload job that used every attempt (the upstream refused the study for days) ends the order failed with alert not-uploaded and a no-result answer, the upstream order cancelled; the sweep never runs it again', async () => {
    decide = (method, path) =>
      method === 'GET' && path === '/upload/single-put' ? unavailable() : 'pass';
    const spec = newOrderSpec();
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
    const key = `upload:${id}`;
    await exhaust(key, id);
    const calls = () =>
      proxy.hits.filter((h) => h.method === 'GET' && h.path === '/upload/single-put').length;
    const before = calls();
    await sweep();
    await waitFor(
      'the order ended',
      async () => (await orderState(db, id)) !== 'uploading',
      10_000,
      100,
      () => orderDiagnostics(db, id),
    );
    const { rows } = await db.query(
      `SELECT state, alert, last_error, upstream_order_id FROM orders WHERE id = $1`,
      [id],
    );
    expect(rows[0]).toMatchObject({ state: 'failed', alert: 'not-uploaded' });
    expect(rows[0].last_error).toMatch(/not uploaded.*25 attempts.*503/);
    // The analyst: an alert on the timeline and at the webhook, once.
    const alerts = async () =>
      (await timeline(id)).filter(
        (e) => e.kind === 'order.alert' && e.severity === 'error' && /not-uploaded/.test(e.summary),
      );
    expect(await alerts()).toHaveLength(1);
    await waitFor('the alert POSTed', async () =>
      alertsPosted.some((b) => b['orderId'] === id && b['alert'] === 'not-uploaded'),
    );
    // The clinician: a no-result answer, never a result.
    await waitFor('the no-result ORU', async () => orusOf(spec.placer).length > 0);
    expect(orusOf(spec.placer).every((m) => m.get('OBR-25') === 'X')).toBe(true);
    expectClinicalWording(spec.placer, /study could not be sent to the analysis service/);
    // The upstream order, waiting for a study that will not come, is cancelled.
    await waitFor(
      'the upstream order cancelled',
      async () => sandbox.state.orders.get(rows[0].upstream_order_id)?.status === 'CANCELLED',
    );
    // Never uploaded again: later sweeps neither re-enqueue the job nor alert again.
    for (let i = 0; i < 3; i++) await sweep();
    await new Promise((r) => setTimeout(r, 2_000));
    expect(calls()).toBe(before);
    const job = (await jobOf(key))!;
    expect(job.attempts).toBe(job.max_attempts);
    expect(await alerts()).toHaveLength(1);
    expect(await orderState(db, id)).toBe('failed');
  });

  it('a QC bypass asked for an order whose orderer cancelled it (cancel not yet taken upstream) is refused 409 cancel_requested, not sent upstream', async () => {
    decide = (method, path) =>
      method === 'PATCH' && path === '/cancel-order' ? unavailable() : 'pass';
    const { spec, id } = await processing('Bitte KI-Auswertung. sandbox-outcome: qc_failed');
    await advanceUntil(id, 'qc-hold', 1_000, 20);
    expect(await orderState(db, id)).toBe('qc-hold');
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await failedOnce('a first failed cancel', `cancel:${id}`);
    const bypassCalls = () =>
      proxy.hits.filter((h) => h.method === 'PATCH' && h.path === '/qc-bypass').length;
    const callsBefore = bypassCalls();
    const res = await askBypass(id, 'volumetry still meaningful');
    expect(res.status).toBe(409);
    expect(((await res.json()) as { code?: string }).code).toBe('cancel_requested');
    expect(bypassCalls()).toBe(callsBefore);
    const { rows } = await db.query(`SELECT qc_bypass FROM orders WHERE id = $1`, [id]);
    expect(rows[0].qc_bypass).toBeNull();
  });

  it('a delivered order whose documents job row was lost (results never fetched) gets the job again from the sweep, and its result is published', async () => {
    let down = true;
    decide = (method, path) =>
      down && method === 'GET' && path === '/results' ? unavailable() : 'pass';
    const { spec, id } = await processing('Bitte KI-Auswertung. sandbox-outcome: delivered');
    await advanceUntil(id, 'delivered', 5_000, 20);
    expect(await orderState(db, id)).toBe('delivered');
    const key = `documents:${id}:DELIVERED`;
    await failedOnce('a first failed fetch', key);
    await db.query(`DELETE FROM graphile_worker._private_jobs WHERE key = $1`, [key]);
    down = false;
    // Younger than the bound: left alone.
    await sweep();
    expect(await jobOf(key)).toBeUndefined();
    await db.query(
      `UPDATE orders SET upstream_status_at = now() - interval '20 minutes' WHERE id = $1`,
      [id],
    );
    await sweep();
    await waitFor(
      'the result ORU',
      async () => orusOf(spec.placer).some((m) => m.get('OBR-25') === 'F'),
      30_000,
      200,
      () => orderDiagnostics(db, id),
    );
    expect(
      (await timeline(id)).filter(
        (e) => e.kind === 'error' && /fetch-documents job was missing/.test(e.summary),
      ),
    ).toHaveLength(1);
    await sweep();
    expect(
      (await timeline(id)).filter(
        (e) => e.kind === 'error' && /fetch-documents job was missing/.test(e.summary),
      ),
    ).toHaveLength(1);
  });

  it('a cancel whose upstream job used every attempt (upstream down) ends the order cancelled here with alert upstream-cancel-unconfirmed; a result the upstream delivers later: the order stays cancelled, no result is published, the report is kept and alert result-after-cancel raised', async () => {
    decide = (method, path) =>
      method === 'PATCH' && path === '/cancel-order' ? unavailable() : 'pass';
    const { spec, id } = await processing('Bitte KI-Auswertung. sandbox-outcome: delivered');
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await exhaust(`cancel:${id}`, id);
    // The cancel job will not run again: the orderer, told the cancel was accepted, hears it
    // now (Task cancelled, ORU CR), not when the upstream ends the order or 72 h later.
    await sweep();
    const ended = await db.query(`SELECT state, alert, last_error FROM orders WHERE id = $1`, [id]);
    expect(ended.rows[0]).toMatchObject({
      state: 'cancelled',
      alert: 'upstream-cancel-unconfirmed',
    });
    expect(ended.rows[0].last_error).toMatch(/cancel.*25 attempts.*503.*may still process/);
    await waitFor('the cancel ORU', async () =>
      orusOf(spec.placer).some((m) => m.get('ORC-1') === 'CR'),
    );
    expectClinicalWording(spec.placer, /cancelled as the orderer asked/);
    expect(
      (await timeline(id)).filter(
        (e) => e.kind === 'order.alert' && /upstream-cancel-unconfirmed/.test(e.summary),
      ),
    ).toHaveLength(1);
    await waitFor('the unconfirmed alert POSTed', async () =>
      alertsPosted.some((b) => b['orderId'] === id && b['alert'] === 'upstream-cancel-unconfirmed'),
    );
    // Once: a later sweep does not end or alert it again.
    await sweep();
    expect(
      (await timeline(id)).filter(
        (e) => e.kind === 'order.alert' && /upstream-cancel-unconfirmed/.test(e.summary),
      ),
    ).toHaveLength(1);
    // The upstream, never reached, goes on and delivers.
    for (let i = 0; i < 20; i++) {
      const { rows: now } = await db.query(`SELECT upstream_status FROM orders WHERE id = $1`, [
        id,
      ]);
      if (now[0].upstream_status === 'DELIVERED') break;
      await sandbox.advance(5_000);
      await sweep();
    }
    const { rows } = await db.query(
      `SELECT state, alert, upstream_status FROM orders WHERE id = $1`,
      [id],
    );
    expect(rows[0]).toMatchObject({
      state: 'cancelled',
      alert: 'result-after-cancel',
      upstream_status: 'DELIVERED',
    });
    // The report is kept for the analyst.
    await waitFor('the results stored', async () => {
      const { rows: docs } = await db.query(
        `SELECT kind FROM order_documents WHERE order_id = $1`,
        [id],
      );
      return docs.some((d: { kind: string }) => d.kind === 'results');
    });
    const events = await timeline(id);
    expect(
      events.some(
        (e) =>
          e.kind === 'order.alert' &&
          e.severity === 'error' &&
          /result-after-cancel/.test(e.summary),
      ),
    ).toBe(true);
    await waitFor('the alert POSTed', async () =>
      alertsPosted.some((b) => b['orderId'] === id && b['alert'] === 'result-after-cancel'),
    );
    // The clinician hears "cancelled as requested", never a result: no result publication is
    // written, whatever the destination.
    await waitFor('the cancel ORU', async () =>
      orusOf(spec.placer).some((m) => m.get('ORC-1') === 'CR'),
    );
    const { rows: outbox } = await db.query(
      `SELECT kind, payload FROM outbox WHERE order_id = $1 ORDER BY id`,
      [id],
    );
    const kinds = outbox.map((o: { kind: string }) => o.kind);
    expect(kinds).not.toContain('dicom-sr');
    expect(kinds).not.toContain('dicom-pdf');
    expect(orusOf(spec.placer).map((m) => m.get('OBR-25'))).not.toContain('F');
    expect(outbox.map((o: { payload: { rowKey: string } }) => o.payload.rowKey)).not.toContain(
      'DELIVERED',
    );
    // The clinician was told "cancelled" once, not again when the result came.
    expect(orusOf(spec.placer).filter((m) => m.get('ORC-1') === 'CR')).toHaveLength(1);
  });

  it('an order cancelled here with alert upstream-cancel-unconfirmed is followed for UPSTREAM_STUCK_HOURS without an upstream change, then no longer: alert upstream-cancel-unfollowed for the analyst (timeline, webhook), no later status applied', async () => {
    decide = (method, path) =>
      method === 'PATCH' && path === '/cancel-order' ? unavailable() : 'pass';
    const { spec, id } = await processing('Bitte KI-Auswertung. sandbox-outcome: delivered');
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await exhaust(`cancel:${id}`, id);
    await sweep();
    const state = async () =>
      (
        await db.query(
          `SELECT state, alert, upstream_status, last_error FROM orders WHERE id = $1`,
          [id],
        )
      ).rows[0] as { state: string; alert: string; upstream_status: string; last_error: string };
    expect(await state()).toMatchObject({
      state: 'cancelled',
      alert: 'upstream-cancel-unconfirmed',
    });
    // Within the bound a sweep leaves it followed.
    await sweep();
    expect((await state()).alert).toBe('upstream-cancel-unconfirmed');
    // 73 h without a change upstream or here (UPSTREAM_STUCK_HOURS is 72).
    await db.query(
      `UPDATE orders SET upstream_status_at = now() - interval '73 hours',
                         updated_at = now() - interval '73 hours' WHERE id = $1`,
      [id],
    );
    await sweep();
    const unfollowed = await state();
    expect(unfollowed).toMatchObject({ state: 'cancelled', alert: 'upstream-cancel-unfollowed' });
    expect(unfollowed.last_error).toMatch(/no longer followed.*72 h/);
    const alerts = async () =>
      (await timeline(id)).filter(
        (e) =>
          e.kind === 'order.alert' &&
          e.severity === 'error' &&
          /upstream-cancel-unfollowed/.test(e.summary),
      );
    expect(await alerts()).toHaveLength(1);
    await waitFor('the alert POSTed', async () =>
      alertsPosted.some((b) => b['orderId'] === id && b['alert'] === 'upstream-cancel-unfollowed'),
    );
    // No longer polled: the upstream delivers, nothing of it is applied or fetched.
    const status = unfollowed.upstream_status;
    for (let i = 0; i < 20; i++) {
      await sandbox.advance(5_000);
      await sweep();
    }
    expect(await state()).toMatchObject({
      state: 'cancelled',
      alert: 'upstream-cancel-unfollowed',
      upstream_status: status,
    });
    expect(await alerts()).toHaveLength(1);
    const { rows: docs } = await db.query(`SELECT 1 FROM order_documents WHERE order_id = $1`, [
      id,
    ]);
    expect(docs).toHaveLength(0);
  });

  /** The multipart progress of upstream order `upstreamId` (imaging_upload_progress). */
  const uploadProgress = async (upstreamId: string) =>
    (
      await db.query(`SELECT upload_id FROM imaging_upload_progress WHERE order_id = $1`, [
        upstreamId,
      ])
    ).rows as Array<{ upload_id: string }>;

  /**
   * An order whose multipart upload is open upstream (its parts sent, the complete answered
   * 503) ended cancelled here: its orderer's cancel never reached the upstream (503) for every
   * attempt of the cancel job. `also` answers other calls first (undefined: as usual).
   */
  /**
   * A new order whose study (48 slices of 256 x 256 x 16 bit, about 6 MiB: above the 5 MB
   * single PUT) is uploading in parts, its first attempt failed as `decide` has it: the
   * multipart upload open upstream, its progress recorded.
   */
  const multipartUploadUnderWay = async () => {
    const spec = { ...newOrderSpec(), slices: 48, rows: 256 };
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
    await failedOnce('a first failed upload', `upload:${id}`);
    const { rows: placed } = await db.query(
      `SELECT state, upstream_order_id, package_path FROM orders WHERE id = $1`,
      [id],
    );
    expect(placed[0].state).toBe('uploading');
    const upstreamId = placed[0].upstream_order_id as string;
    const [open] = await uploadProgress(upstreamId);
    expect(open).toBeDefined();
    return { spec, id, upstreamId, open: open!, packagePath: placed[0].package_path as string };
  };

  const uploadingThenCancelledHere = async (
    also: (method: string, path: string) => ProxyAction | undefined = () => undefined,
  ) => {
    decide = (method, path) =>
      also(method, path) ??
      ((method === 'POST' && path === '/upload/multipart/complete') ||
      (method === 'PATCH' && path === '/cancel-order')
        ? unavailable()
        : 'pass');
    const { spec, id, upstreamId, open } = await multipartUploadUnderWay();
    expect(sandbox.state.uploads.get(open!.upload_id)?.state).toBe('open');
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await exhaust(`cancel:${id}`, id);
    await sweep();
    const { rows } = await db.query(`SELECT state, alert FROM orders WHERE id = $1`, [id]);
    expect(rows[0]).toMatchObject({ state: 'cancelled', alert: 'upstream-cancel-unconfirmed' });
    return { id, spec, upstreamId, uploadId: open!.upload_id };
  };

  it('a cancel out of attempts while a multipart upload is under way (uploading): the multipart upload is aborted upstream and its progress dropped, and the order never uploads again', async () => {
    // The study's parts go up but the complete is answered 503 (the upload job retries,
    // the order stays uploading); the cancel never reaches the upstream either.
    const { id, upstreamId, uploadId } = await uploadingThenCancelledHere();
    // The multipart upload, never to be completed, is aborted (contract: "or abort if the
    // upload cannot be finished") and its progress dropped.
    await waitFor(
      'the multipart upload aborted',
      async () => sandbox.state.uploads.get(uploadId)?.state === 'aborted',
      10_000,
      100,
      () => orderDiagnostics(db, id),
    );
    expect(await uploadProgress(upstreamId)).toHaveLength(0);
    // Never uploaded again: the upload job, run now, claims nothing; no complete follows.
    const completes = () =>
      proxy.hits.filter((h) => h.method === 'POST' && h.path === '/upload/multipart/complete')
        .length;
    const before = completes();
    await db.query(`UPDATE graphile_worker._private_jobs SET run_at = now() WHERE key = $1`, [
      `upload:${id}`,
    ]);
    for (let i = 0; i < 3; i++) await sweep();
    await new Promise((r) => setTimeout(r, 2_000));
    expect(completes()).toBe(before);
    expect(await orderState(db, id)).toBe('cancelled');
  });

  /** The outbox row that aborts the order's abandoned multipart upload upstream. */
  const abortRow = async (id: string) =>
    (
      await db.query(
        `SELECT id, destination, status, attempts, last_error FROM outbox WHERE order_id = $1 AND kind = 'multipart-abort'`,
        [id],
      )
    ).rows[0] as
      | { id: string; destination: string; status: string; attempts: number; last_error: string }
      | undefined;
  const abortCalls = () =>
    proxy.hits.filter((h) => h.method === 'POST' && h.path === '/upload/multipart/abort').length;
  const abortPath = (method: string, path: string) =>
    method === 'POST' && path === '/upload/multipart/abort';
  /** The order's abort row once an attempt failed and it waits to be tried again. */
  const abortWaitingToRetry = (id: string, what = 'the abort answered 503, to be tried again') =>
    waitFor(
      what,
      async () => {
        const r = await abortRow(id);
        return r && r.status === 'pending' && r.attempts >= 1 && r.last_error ? r : undefined;
      },
      20_000,
      100,
      () => orderDiagnostics(db, id),
    );
  /** Skips the outbox's backoff for the row: it is tried again now. */
  const retryNow = (outboxId: string) =>
    db.query(`UPDATE outbox SET next_attempt_at = now() WHERE id = $1`, [outboxId]);
  const abortDelivered = (id: string) =>
    waitFor('the abort row delivered', async () => (await abortRow(id))?.status === 'delivered');

  it('the abort of an abandoned multipart upload answered 503 is retried through the outbox until the upstream takes it (before: tried once, the upload left open upstream for good)', async () => {
    let abortDown = true;
    const { id, upstreamId, uploadId } = await uploadingThenCancelledHere((m, p) =>
      abortPath(m, p) && abortDown ? unavailable() : undefined,
    );
    const failed = await abortWaitingToRetry(id);
    expect(failed.destination).toBe('imaging-upstream');
    expect(sandbox.state.uploads.get(uploadId)?.state).toBe('open');
    // The progress is dropped with the end: the row carries the upload's id.
    expect(await uploadProgress(upstreamId)).toHaveLength(0);
    const events = await timeline(id);
    expect(
      events.some(
        (e) =>
          e.kind === 'outbound.attempt' &&
          e.severity === 'warning' &&
          /multipart-abort to imaging-upstream, attempt 1: .*server_error_exhausted/.test(
            e.summary,
          ),
      ),
    ).toBe(true);
    // The upstream is back; the backoff's wait is skipped.
    abortDown = false;
    await retryNow(failed.id);
    await waitFor(
      'the multipart upload aborted',
      async () => sandbox.state.uploads.get(uploadId)?.state === 'aborted',
      20_000,
      100,
      () => orderDiagnostics(db, id),
    );
    await abortDelivered(id);
    expect((await abortRow(id))!.attempts).toBe(failed.attempts + 1);
  });

  it('an abort whose answer is lost after the upstream took it (connection dropped): retried, and the 409 "not open" of the retry is done, no dead letter', async () => {
    let drop = true;
    const { id, uploadId } = await uploadingThenCancelledHere((m, p) =>
      abortPath(m, p) && drop ? 'drop-after' : undefined,
    );
    const failed = await abortWaitingToRetry(id, 'the abort failed once, to be tried again');
    // The upstream did abort it; only its answer was lost.
    expect(sandbox.state.uploads.get(uploadId)?.state).toBe('aborted');
    drop = false;
    await retryNow(failed.id);
    await abortDelivered(id);
    const events = await timeline(id);
    expect(
      events.some(
        (e) =>
          e.kind === 'outbound.attempt' &&
          /multipart-abort .*already gone upstream.*conflict \(HTTP 409\)/.test(e.summary),
      ),
    ).toBe(true);
    expect(events.some((e) => e.kind === 'outbound.dead-letter')).toBe(false);
  });

  it('an abort answered 404 (the upload already gone upstream) is done at once, not retried; one refused for every attempt is a dead letter the analyst sees and is told of', async () => {
    const gone = await uploadingThenCancelledHere((m, p) =>
      abortPath(m, p)
        ? {
            reply: 404,
            body: JSON.stringify({ error: 'upload_not_found', message: 'no multipart upload' }),
          }
        : undefined,
    );
    await abortDelivered(gone.id);
    expect((await abortRow(gone.id))!.attempts).toBe(1);
    expect(
      (await timeline(gone.id)).some(
        (e) => e.kind === 'outbound.attempt' && /already gone/.test(e.summary),
      ),
    ).toBe(true);

    // Down for every attempt (OUTBOUND_MAX_ATTEMPTS): dead-lettered, on the order's timeline,
    // the audit page's dead letters and the alert webhook, ready for an analyst's replay.
    const down = await uploadingThenCancelledHere((m, p) =>
      abortPath(m, p) ? unavailable() : undefined,
    );
    const first = await waitFor('a first failed abort', async () => {
      const r = await abortRow(down.id);
      return r && r.status === 'pending' && r.attempts >= 1 && r.last_error ? r : undefined;
    });
    const calls = abortCalls();
    await db.query(`UPDATE outbox SET attempts = 9, next_attempt_at = now() WHERE id = $1`, [
      first.id,
    ]);
    await waitFor(
      'the abort dead-lettered',
      async () => (await abortRow(down.id))?.status === 'dead',
    );
    expect(abortCalls()).toBe(calls + 1);
    expect(sandbox.state.uploads.get(down.uploadId)?.state).toBe('open');
    expect(
      (await timeline(down.id)).some(
        (e) =>
          e.kind === 'outbound.dead-letter' &&
          e.severity === 'error' &&
          /multipart-abort to imaging-upstream dead-lettered: gave up after 10 attempts/.test(
            e.summary,
          ),
      ),
    ).toBe(true);
    await waitFor('the dead letter POSTed', async () =>
      alertsPosted.some(
        (b) =>
          b['orderId'] === down.id &&
          (b['deadLetter'] as { destination?: string } | undefined)?.destination ===
            'imaging-upstream',
      ),
    );
  });

  it('a cancel the upstream confirms while a multipart upload is open: the abort of its upload answered 503 is an outbox row, retried until the upstream answers, the progress dropped (before: one call, given up)', async () => {
    // The parts go up, the complete is answered 503 (the upload stays open, the job retries);
    // the abort is answered 503 until the upstream is back. The cancel itself goes through.
    let abortDown = true;
    decide = (method, path) =>
      (method === 'POST' && path === '/upload/multipart/complete') ||
      (abortPath(method, path) && abortDown)
        ? unavailable()
        : 'pass';
    const { spec, id, upstreamId, open } = await multipartUploadUnderWay();
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await waitFor('cancelled upstream', async () => (await orderState(db, id)) === 'cancelled');
    expect(sandbox.state.orders.get(upstreamId)?.status).toBe('CANCELLED');
    const failed = await abortWaitingToRetry(id);
    expect(failed.destination).toBe('imaging-upstream');
    expect(await uploadProgress(upstreamId)).toHaveLength(0);
    abortDown = false;
    const calls = abortCalls();
    await retryNow(failed.id);
    await abortDelivered(id);
    // The upstream answered this time (the sandbox had ended the upload with the cancel: 409).
    expect(abortCalls()).toBe(calls + 1);
    expect(sandbox.state.uploads.get(open!.upload_id)?.state).toBe('aborted');
  });

  it('an upload that starts over because the study file changed: the abort of the old multipart upload answered 503 is an outbox row, retried until the upstream takes it (before: one call, the old upload left open for good)', async () => {
    let abortDown = true;
    let completeDown = true;
    decide = (method, path) =>
      (method === 'POST' && path === '/upload/multipart/complete' && completeDown) ||
      (abortPath(method, path) && abortDown)
        ? unavailable()
        : 'pass';
    const { id, upstreamId, open: old, packagePath } = await multipartUploadUnderWay();
    // The package on disk changes (re-packaged, another replica's copy): a new mtime.
    const later = new Date(Date.now() + 60_000);
    utimesSync(packagePath, later, later);
    completeDown = false;
    await db.query(`UPDATE graphile_worker._private_jobs SET run_at = now() WHERE key = $1`, [
      `upload:${id}`,
    ]);
    await waitFor(
      'uploaded afresh',
      async () => (await orderState(db, id)) === 'processing',
      30_000,
      100,
      () => orderDiagnostics(db, id),
    );
    const failed = await abortWaitingToRetry(
      id,
      'the abort of the old upload answered 503, to be tried again',
    );
    expect(sandbox.state.uploads.get(old!.upload_id)?.state).toBe('open');
    abortDown = false;
    await retryNow(failed.id);
    await waitFor(
      'the old multipart upload aborted',
      async () => sandbox.state.uploads.get(old!.upload_id)?.state === 'aborted',
      20_000,
      100,
      () => orderDiagnostics(db, id),
    );
    await abortDelivered(id);
    // Only the old upload was aborted: the new one completed.
    const uploads = [...sandbox.state.uploads.values()].filter((u) => u.orderId === upstreamId);
    expect(uploads.map((u) => u.state).sort()).toEqual(['aborted', 'completed']);
  });

  it('a multipart upload refused for good (complete answered 400): its abort answered 503 is an outbox row, retried until the upstream takes it (before: one best-effort call, the upload left open upstream)', async () => {
    let abortDown = true;
    decide = (method, path) =>
      method === 'POST' && path === '/upload/multipart/complete'
        ? {
            reply: 400,
            body: JSON.stringify({ error: 'invalid_parts', message: 'parts do not match' }),
          }
        : abortPath(method, path) && abortDown
          ? unavailable()
          : 'pass';
    const spec = { ...newOrderSpec(), slices: 48, rows: 256 };
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
    const failed = await abortWaitingToRetry(id);
    expect(failed.destination).toBe('imaging-upstream');
    const upstreamId = (await db.query(`SELECT upstream_order_id FROM orders WHERE id = $1`, [id]))
      .rows[0].upstream_order_id as string;
    const [upload] = [...sandbox.state.uploads.values()].filter((u) => u.orderId === upstreamId);
    expect(upload).toBeDefined();
    expect(await uploadProgress(upstreamId)).toHaveLength(0);
    // The order's end also cancels it upstream, and the sandbox ends an open upload with its
    // order: the upload may be aborted already. The row is retried all the same, and the
    // retry's answer (aborted, or 409 "not open") is done.
    abortDown = false;
    const calls = abortCalls();
    await retryNow(failed.id);
    await abortDelivered(id);
    expect(abortCalls()).toBe(calls + 1);
    expect(sandbox.state.uploads.get(upload!.uploadId)?.state).toBe('aborted');
  });

  it('a cancel taken upstream while the upload runs: the upload refused by the cancelled order is not an upload refusal on the timeline (was: upstream.refused, severity error, for a cancel done as asked)', async () => {
    // The upload asks for its URL; the answer is held until the cancel has gone through.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    decide = (method, path) =>
      method === 'GET' && path === '/upload/single-put' ? { until: held } : 'pass';
    const urlAsks = () =>
      proxy.hits.filter((h) => h.method === 'GET' && h.path === '/upload/single-put').length;
    const before = urlAsks();
    const spec = newOrderSpec();
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
    await waitFor('the upload URL asked for', async () => urlAsks() > before);
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await waitFor('cancelled upstream', async () => (await orderState(db, id)) === 'cancelled');
    release();
    await waitFor(
      'the upload run ended',
      async () => (await timeline(id)).some((e) => /upload (stopped|was refused)/.test(e.summary)),
      20_000,
      100,
      () => orderDiagnostics(db, id),
    );
    const events = await timeline(id);
    expect(events.filter((e) => e.kind === 'upstream.refused')).toEqual([]);
    expect(events.filter((e) => e.severity === 'error')).toEqual([]);
    expect(
      events.some(
        (e) =>
          e.severity === 'info' &&
          /upload stopped: the order was cancelled while it ran/.test(e.summary),
      ),
    ).toBe(true);
    expect(await orderState(db, id)).toBe('cancelled');
  });

  it('a cancel taken upstream while the multipart complete is on its way: the complete refused (409, upload ended with the order) is not taken for an upload that landed (was: "study uploaded", an illegal cancelled → processing)', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    decide = (method, path) =>
      method === 'POST' && path === '/upload/multipart/complete' ? { until: held } : 'pass';
    const completes = () =>
      proxy.hits.filter((h) => h.method === 'POST' && h.path === '/upload/multipart/complete')
        .length;
    const before = completes();
    const spec = { ...newOrderSpec(), slices: 48, rows: 256 };
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
    await waitFor('the complete sent', async () => completes() > before);
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await waitFor('cancelled upstream', async () => (await orderState(db, id)) === 'cancelled');
    release();
    await waitFor(
      'the upload run ended',
      async () =>
        (await timeline(id)).some(
          (e) => /upload stopped/.test(e.summary) || e.kind === 'order.illegal-transition',
        ),
      20_000,
      100,
      () => orderDiagnostics(db, id),
    );
    const events = await timeline(id);
    expect(events.filter((e) => e.kind === 'order.illegal-transition')).toEqual([]);
    expect(events.some((e) => /study uploaded/.test(e.summary))).toBe(false);
    expect(
      events.some((e) => /upload stopped: the order was cancelled while it ran/.test(e.summary)),
    ).toBe(true);
  });

  it('an order that ends by its upstream status (EXPIRED, read after a cancel refused 409) while its multipart upload is open: the upload is aborted through the outbox and its progress dropped (was: left open upstream and in imaging_upload_progress)', async () => {
    decide = (method, path) =>
      method === 'POST' && path === '/upload/multipart/complete' ? unavailable() : 'pass';
    const { spec, id, upstreamId, open } = await multipartUploadUnderWay();
    expect(sandbox.state.uploads.get(open!.upload_id)?.state).toBe('open');
    // The upstream lets the order expire; its upload stays open there.
    sandbox.state.orders.get(upstreamId)!.status = 'EXPIRED';
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await waitFor(
      'the order ended',
      async () => ['failed', 'cancelled'].includes(await orderState(db, id)),
      20_000,
      100,
      () => orderDiagnostics(db, id),
    );
    await waitFor(
      'the multipart upload aborted',
      async () => sandbox.state.uploads.get(open!.upload_id)?.state === 'aborted',
      20_000,
      100,
      () => orderDiagnostics(db, id),
    );
    await abortDelivered(id);
    expect(await uploadProgress(upstreamId)).toHaveLength(0);
  });
});

describe('PATCH /cancel-order answers checked (adapter, sandbox upstream behind a proxy)', () => {
  let sandbox: RunningSandbox;
  let proxy: Awaited<ReturnType<typeof startFaultyProxy>>;
  let adapter: TestAdapter;
  let mllp: MllpClient;
  let db: PgClient;
  let decide: (method: string, path: string) => ProxyAction = () => 'pass';

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orders-cancel-answers-'));
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', clock: 'manual', dataDir: dir });
    proxy = await startFaultyProxy(sandbox.baseUrl, (m, p) => decide(m, p));
    adapter = await startTestAdapter({
      IMAGING_BASE_URL: proxy.baseUrl,
      ...SANDBOX_CLIENT,
      CONFIG_FILE: writeSiteConfig(dir),
      POLL_INTERVAL_SECONDS: '3600',
    });
    mllp = new MllpClient({ host: '127.0.0.1', port: adapter.mllpPort, responseTimeoutMs: 10_000 });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await mllp?.close();
    await db?.end();
    await adapter?.close();
    await proxy?.close();
    await sandbox?.close();
  });

  /** An order placed upstream (waiting for its study), then cancelled over HL7 (ORC-1 CA). */
  async function placedThenCancelled(): Promise<{ id: string; upstreamOrderId: string }> {
    const spec = newOrderSpec();
    expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    const { id } = (await waitFor('the order', () => orderByPlacer(db, spec.placer))) as {
      id: string;
    };
    await waitFor('placed', async () => (await orderState(db, id)) === 'placed');
    const { rows } = await db.query(`SELECT upstream_order_id FROM orders WHERE id = $1`, [id]);
    const cancel = { ...spec, orderControl: 'CA' as const, controlId: `CA-${spec.placer}` };
    expect(ackSummary(await mllp.send(ormMessage(cancel))).code).toBe('AA');
    await waitFor(
      'the order ended',
      async () => ['cancelled', 'failed'].includes(await orderState(db, id)),
      30_000,
      100,
      () => orderDiagnostics(db, id),
    );
    return { id, upstreamOrderId: rows[0].upstream_order_id as string };
  }

  it('a cancel answered 409 (already terminal) while the upstream lists the order as still active ends it cancelled here with alert upstream-cancel-unconfirmed (was: left placed, its cancel acknowledged, until the study deadline)', async () => {
    // The upstream refuses the cancel as if the order had ended (409 order_terminal, not
    // forwarded), yet its status answer says PENDING.
    decide = (method, path) =>
      method === 'PATCH' && path === '/cancel-order'
        ? {
            reply: 409,
            body: JSON.stringify({ error: 'order_terminal', message: 'order is already ended' }),
          }
        : 'pass';
    const { id, upstreamOrderId } = await placedThenCancelled();
    expect(sandbox.state.orders.get(upstreamOrderId)?.status).toBe('PENDING');
    const { rows } = await db.query(
      `SELECT state, upstream_status, alert FROM orders WHERE id = $1`,
      [id],
    );
    expect(rows[0]).toMatchObject({ state: 'cancelled', alert: 'upstream-cancel-unconfirmed' });
    expect(rows[0].upstream_status).not.toBe('CANCELLED');
    const events = (
      await db.query(
        `SELECT kind, severity, summary FROM audit_events WHERE order_id = $1 ORDER BY id`,
        [id],
      )
    ).rows as Array<{ kind: string; severity: string; summary: string }>;
    expect(
      events.some(
        (e) =>
          e.kind === 'upstream.inconsistent' &&
          /refused the cancel as already ended \(409\) but lists the order as PENDING/.test(
            e.summary,
          ),
      ),
    ).toBe(true);
  });

  it.each([
    [
      'another order',
      (asked: string) => ({
        order_id: asked.replace(/.$/, (c) => (c === '0' ? '1' : '0')),
        status: 'CANCELLED',
      }),
    ],
    [
      'a status that is not CANCELLED',
      (asked: string) => ({ order_id: asked, status: 'ANALYSIS_RUNNING' }),
    ],
  ])(
    'an answer naming %s does not mark the order cancelled upstream: its real status is read, the analyst alerted',
    async (_what, answer) => {
      // The upstream answers 200 but the cancel never took effect there (not forwarded).
      let asked = '';
      decide = (method, path) => {
        if (method === 'PATCH' && path === '/cancel-order') {
          const last = [...sandbox.state.orders.keys()].at(-1)!;
          asked = last;
          return { reply: 200, body: JSON.stringify(answer(last)) };
        }
        return 'pass';
      };
      const { id, upstreamOrderId } = await placedThenCancelled();
      expect(asked).toBe(upstreamOrderId);
      // Still active upstream: the order must not say CANCELLED upstream.
      expect(sandbox.state.orders.get(upstreamOrderId)?.status).not.toBe('CANCELLED');
      const { rows } = await db.query(
        `SELECT state, upstream_status, alert FROM orders WHERE id = $1`,
        [id],
      );
      expect(rows[0].upstream_status).not.toBe('CANCELLED');
      expect(rows[0]).toMatchObject({ state: 'cancelled', alert: 'upstream-cancel-unconfirmed' });
      const events = (
        await db.query(
          `SELECT kind, severity, summary FROM audit_events WHERE order_id = $1 ORDER BY id`,
          [id],
        )
      ).rows as Array<{ kind: string; severity: string; summary: string }>;
      expect(
        events.some(
          (e) => e.kind === 'order.alert' && /upstream-cancel-unconfirmed/.test(e.summary),
        ),
      ).toBe(true);
    },
  );
});
