import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
import { OrderLifecycleService } from '../../src/orders/order-lifecycle.service';
import { OrderPollerService } from '../../src/orders/order-poller.service';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { ackSummary } from '../helpers/hl7-fixtures';
import { multipartRelated } from '../studies/study-test-support';
import {
  newOrderSpec,
  orderByPlacer,
  orderState,
  ormMessage,
  SANDBOX_CLIENT,
  studyFor,
  waitFor,
  writeSiteConfig,
  type Hl7OrderSpec,
} from '../e2e/e2e-support';

jest.setTimeout(180_000);

/**
 * The lifecycle's rules beyond the happy paths, through the running adapter: studies pushed
 * over STOW-RS, orders over MLLP, the sandbox upstream on a manual clock.
 */
describe('order lifecycle rules (adapter, sandbox upstream, real PostgreSQL)', () => {
  let sandbox: RunningSandbox;
  let adapter: TestAdapter;
  let mllp: MllpClient;
  let db: PgClient;
  let lifecycle: OrderLifecycleService;
  let poller: OrderPollerService;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orders-lifecycle-'));
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', clock: 'manual', dataDir: dir });
    adapter = await startTestAdapter({
      IMAGING_BASE_URL: sandbox.baseUrl,
      ...SANDBOX_CLIENT,
      IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true',
      STUDY_QUIET_PERIOD_SECONDS: '1',
      CONFIG_FILE: writeSiteConfig(dir),
      POLL_INTERVAL_SECONDS: '3600',
    });
    mllp = new MllpClient({ host: '127.0.0.1', port: adapter.mllpPort, responseTimeoutMs: 10_000 });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
    lifecycle = adapter.app.get(OrderLifecycleService);
    poller = adapter.app.get(OrderPollerService);
  });
  afterAll(async () => {
    await mllp?.close();
    await db?.end();
    await adapter?.close();
    await sandbox?.close();
  });

  async function push(spec: Hl7OrderSpec): Promise<void> {
    const { body, contentType } = multipartRelated(studyFor(spec).map((i) => ({ data: i.bytes })));
    const res = await fetch(`${adapter.httpUrl}/dicomweb/studies`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, 'content-type': contentType },
      body,
    });
    expect(res.status).toBe(200);
  }

  async function send(spec: Hl7OrderSpec): Promise<string> {
    expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    return (await waitFor('the order', () => orderByPlacer(db, spec.placer))).id;
  }

  /** Waits until the wall clock is between :05 and :45 of a minute, well away from the cron tick. */
  async function clearOfMinuteTick(): Promise<void> {
    const second = new Date().getSeconds();
    if (second >= 5 && second <= 45) return;
    const wait = ((65 - second) % 60) * 1_000;
    await new Promise((r) => setTimeout(r, wait));
  }

  const stateIs = (id: string, ...states: string[]) =>
    waitFor(`order ${id} in ${states.join('/')}`, async () =>
      states.includes(await orderState(db, id)),
    );

  const row = async (id: string) =>
    (await db.query(`SELECT * FROM orders WHERE id = $1`, [id])).rows[0];

  const kinds = async (id: string) =>
    (
      await db.query(`SELECT kind FROM audit_events WHERE order_id = $1 ORDER BY id`, [id])
    ).rows.map((r) => r.kind as string);

  const api = (path: string, body: unknown, token: string = TEST_TOKENS.sender) =>
    fetch(`${adapter.httpUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it('cancels from our REST API, and answers problem JSON for what it refuses', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    await push(spec);
    const id = await send(spec);
    await stateIs(id, 'processing');
    expect((await api(`/api/orders/${id}/cancel`, {})).status).toBe(400);
    expect(
      (await api(`/api/orders/${id}/cancel`, { reason: 'x' }, TEST_TOKENS.analyst)).status,
    ).toBe(403);
    const unknown = await api(`/api/orders/01a1fd62-0000-7000-8000-000000000000/cancel`, {
      reason: 'x',
    });
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get('content-type')).toMatch(/application\/problem\+json/);
    // An order over HL7 carries no sender token: no sender cancels it here (404, as unknown);
    // admin does (its RIS cancels it over HL7, ORC-1 CA).
    expect((await api(`/api/orders/${id}/cancel`, { reason: 'x' })).status).toBe(404);
    const res = await api(
      `/api/orders/${id}/cancel`,
      { reason: 'patient declined the AI analysis' },
      TEST_TOKENS.admin,
    );
    expect(res.status).toBe(202);
    await stateIs(id, 'cancelled');
    const r = await row(id);
    expect(sandbox.state.orders.get(r.upstream_order_id)?.status).toBe('CANCELLED');
    const again = await api(`/api/orders/${id}/cancel`, { reason: 'again' }, TEST_TOKENS.admin);
    expect(again.status).toBe(409);
    const decision = await db.query(
      `SELECT actor, detail FROM audit_events WHERE order_id = $1 AND kind = 'order.cancel-requested'`,
      [id],
    );
    expect(decision.rows[0].detail).toMatchObject({
      reason: 'patient declined the AI analysis',
      via: 'api',
    });
    // A QC bypass on an order that is not on QC hold is refused.
    const bypass = await api(`/api/orders/${id}/qc-bypass`, { reason: 'x' }, TEST_TOKENS.admin);
    expect(bypass.status).toBe(409);
  });

  it('never lets the upstream overwrite a study: the second order of one study is held, audited', async () => {
    const first = newOrderSpec('sandbox-outcome: delivered');
    const second = {
      ...newOrderSpec('sandbox-outcome: delivered'),
      studyUid: first.studyUid,
      accession: first.accession,
    };
    await push(first);
    const a = await send(first);
    await stateIs(a, 'processing');
    const b = await send(second);
    await stateIs(b, 'placed');
    // The same study arrives again; with two open orders of one Study Instance UID it is held
    // for whichever asks (the studies module's rule), and this order's acquire takes it now.
    await push(second);
    await lifecycle.acquireStudy(b);
    await waitFor('the hold', async () => (await kinds(b)).includes('order.upload-held'));
    expect(await orderState(db, b)).toBe('study-ready');
    expect(
      sandbox.state.completedUploads.filter((u) => u.studyUid === first.studyUid),
    ).toHaveLength(1);
    const held = await db.query(
      `SELECT severity, detail FROM audit_events WHERE order_id = $1 AND kind = 'order.upload-held'`,
      [b],
    );
    expect(held.rows[0]).toMatchObject({ severity: 'warning', detail: { otherOrders: [a] } });
    // Five minutes later (ours and the upstream's), the held upload goes.
    await db.query(
      `UPDATE orders SET upload_completed_at = now() - interval '6 minutes' WHERE id = $1`,
      [a],
    );
    await sandbox.advance(6 * 60_000);
    await lifecycle.uploadStudy(b);
    expect(await orderState(db, b)).toBe('processing');
    const ra = await row(a);
    const rb = await row(b);
    // The earlier order kept its upload (it did not fall back to PENDING).
    expect(sandbox.state.orders.get(ra.upstream_order_id)?.status).not.toBe('PENDING');
    expect(sandbox.state.orders.get(rb.upstream_order_id)?.status).toBe('RECEIVED');
  });

  it('makes a placer group one upstream batch; a member with other products is a clear error; the aggregated report is fetched when all are terminal', async () => {
    const group = `GRP-${Date.now().toString(36)}`;
    const one = { ...newOrderSpec('sandbox-outcome: delivered'), placerGroup: group };
    const two = { ...newOrderSpec('sandbox-outcome: failed'), placerGroup: group };
    const odd = { ...newOrderSpec(), placerGroup: group, procedure: 'MRKOPFHC' };
    await push(one);
    await push(two);
    const a = await send(one);
    await stateIs(a, 'processing');
    const b = await send(two);
    await stateIs(b, 'processing');
    const [ra, rb] = [await row(a), await row(b)];
    expect(ra.upstream_batch_id).toBeTruthy();
    expect(rb.upstream_batch_id).toBe(ra.upstream_batch_id);
    expect(sandbox.state.batches.size).toBe(1);
    const c = await send(odd);
    await stateIs(c, 'failed');
    const rc = await row(c);
    expect(rc.alert).toBe('batch-products-mismatch');
    expect(rc.last_error).toMatch(/differ from those of its batch/);
    expect(rc.upstream_order_id).toBeNull();

    for (let i = 0; i < 10 && !['delivered', 'failed'].includes(await orderState(db, a)); i++) {
      await sandbox.advance(5_000);
      await poller.runNow();
    }
    await sandbox.advance(5_000);
    await poller.runNow();
    expect(await orderState(db, a)).toBe('delivered');
    expect(await orderState(db, b)).toBe('failed');
    await waitFor('the batch report', async () => {
      const { rows } = await db.query(
        `SELECT report_fetched_at, octet_length(report) AS n FROM upstream_batches WHERE placer_group_number = $1`,
        [group],
      );
      return rows[0]?.report_fetched_at ? rows[0] : undefined;
    });
    expect(await kinds(a)).toContain('order.batch');
  });

  it('sends changed metadata upstream (ORC-1 XO)', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    const id = await send(spec);
    await stateIs(id, 'placed');
    const upstreamId = (await row(id)).upstream_order_id as string;
    expect(sandbox.state.orders.get(upstreamId)?.apiMetadata?.priority ?? 'routine').toBe(
      'routine',
    );
    expect(
      ackSummary(
        await mllp.send(
          ormMessage({
            ...spec,
            orderControl: 'XO',
            priority: 'S',
            controlId: `XO-${spec.placer}`,
          }),
        ),
      ).code,
    ).toBe('AA');
    await waitFor(
      'metadata sent',
      async () => (await kinds(id)).filter((k) => k === 'order.updated').length >= 2,
    );
    const { metadata } = await poller['deps'].client.getMetadata({ orderId: upstreamId });
    expect(metadata.priority).toBe('stat');
    expect(metadata.correlation_id).toBe(id);
  });

  it('an XO that comes while the upstream order is being created still reaches the upstream', async () => {
    // The create is under way (its call sent, its answer not stored): the change is accepted
    // (not a change of products) and must not be lost once the order is placed.
    const client = poller['deps'].client;
    const create = client.createOrder.bind(client);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inCreate = new Promise<void>((r) => (entered = r));
    client.createOrder = async (...args: Parameters<typeof client.createOrder>) => {
      entered();
      await gate;
      return create(...args);
    };
    try {
      const spec = newOrderSpec('sandbox-outcome: delivered');
      const id = await send(spec);
      await inCreate;
      expect(
        ackSummary(
          await mllp.send(
            ormMessage({
              ...spec,
              orderControl: 'XO',
              priority: 'S',
              controlId: `XO-${spec.placer}`,
            }),
          ),
        ).code,
      ).toBe('AA');
      // The change's metadata job has run (and found no upstream order yet).
      await waitFor('the metadata job done', async () => {
        const jobs = await db.query(
          `SELECT (SELECT count(*) FROM graphile_worker.jobs WHERE key = $1)
                + (SELECT count(*) FROM job_outbox WHERE job_key = $1) AS n`,
          [`metadata:${id}`],
        );
        return Number(jobs.rows[0].n) === 0;
      });
      release();
      await stateIs(id, 'placed', 'study-ready', 'uploading', 'processing');
      const upstreamId = (await row(id)).upstream_order_id as string;
      await waitFor(
        'the change upstream',
        async () => sandbox.state.orders.get(upstreamId)?.apiMetadata?.priority === 'stat',
      );
    } finally {
      release();
      client.createOrder = create;
    }
  });

  it('a study that never arrives: past the deadline the order fails with an alert and the upstream order is cancelled', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    const id = await send(spec);
    await stateIs(id, 'placed');
    await db.query(
      `UPDATE orders SET study_deadline_at = now() - interval '1 second' WHERE id = $1`,
      [id],
    );
    const swept = await lifecycle.sweep();
    expect(swept.studyDeadlines).toBeGreaterThanOrEqual(1);
    const r = await row(id);
    expect(r).toMatchObject({ state: 'failed', alert: 'study-deadline' });
    expect(sandbox.state.orders.get(r.upstream_order_id)?.status).toBe('CANCELLED');
    const alert = await db.query(
      `SELECT severity, summary FROM audit_events WHERE order_id = $1 AND kind = 'order.alert'`,
      [id],
    );
    expect(alert.rows[0]).toMatchObject({ severity: 'error' });
    expect(alert.rows[0].summary).toMatch(/^study-deadline: no usable study arrived/);
    const metrics = await (
      await fetch(`${adapter.httpUrl}/metrics`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
      })
    ).text();
    expect(metrics).toMatch(/adapter_order_alerts_total\{alert="study-deadline"\} [1-9]/);
  });

  it('an upstream order stuck in a non-terminal status past the limit fails with an alert', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    await push(spec);
    const id = await send(spec);
    await stateIs(id, 'processing');
    await db.query(
      `UPDATE orders SET upstream_status_at = now() - interval '100 hours' WHERE id = $1`,
      [id],
    );
    await lifecycle.sweep();
    const r = await row(id);
    expect(r).toMatchObject({ state: 'failed', alert: 'upstream-stuck' });
    expect(sandbox.state.orders.get(r.upstream_order_id)?.status).toBe('CANCELLED');
    // Later upstream news about it is refused by the transition table, audited, harmless.
    await poller.runNow();
    expect(await orderState(db, id)).toBe('failed');
  });

  it('ends a followed order the upstream no longer knows (not listed, 404), with an alert', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    await push(spec);
    const id = await send(spec);
    await stateIs(id, 'processing');
    // As if the upstream had lost it: an id it never issued.
    await db.query(`UPDATE orders SET upstream_order_id = gen_random_uuid()::text WHERE id = $1`, [
      id,
    ]);
    const stats = await poller.runNow();
    expect(stats!.leftActiveList).toBeGreaterThanOrEqual(1);
    expect(await row(id)).toMatchObject({ state: 'failed', alert: 'upstream-unknown' });
    // Ended: it costs no call in the next cycle.
    const next = await poller.runNow();
    expect(next!.leftActiveList).toBe(0);
  });

  it('tells an ended order nothing more: a late upstream status is refused, not published again', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    await push(spec);
    const id = await send(spec);
    await stateIs(id, 'processing');
    await db.query(`UPDATE orders SET upstream_order_id = gen_random_uuid()::text WHERE id = $1`, [
      id,
    ]);
    await poller.runNow();
    const ended = await row(id);
    expect(ended).toMatchObject({ state: 'failed', alert: 'upstream-unknown' });
    const outbox = async () =>
      Number(
        (await db.query(`SELECT count(*) AS n FROM outbox WHERE order_id = $1`, [id])).rows[0].n,
      );
    const published = await outbox();
    // A poll cycle that read the order before it ended applies what it saw then.
    expect(await lifecycle.applyUpstreamStatus(id, 'EXPIRED', { qcBypassPossible: false })).toBe(
      false,
    );
    expect(await lifecycle.applyUpstreamStatus(id, 'QC_PASSED', { qcBypassPossible: true })).toBe(
      false,
    );
    expect(await outbox()).toBe(published);
    expect(await row(id)).toMatchObject({
      state: 'failed',
      upstream_status: ended.upstream_status,
    });
    const refused = await db.query(
      `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'order.illegal-transition' ORDER BY id`,
      [id],
    );
    expect(refused.rows.map((r) => r.detail.upstreamStatus)).toEqual(['EXPIRED', 'QC_PASSED']);
  });

  it("takes a delivered order's status from GET /reports, without a GET /status for it", async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    await push(spec);
    const id = await send(spec);
    await stateIs(id, 'processing');
    const upstreamId = (await row(id)).upstream_order_id as string;
    // Delivered upstream: off the active list, its results report listed by GET /reports.
    await sandbox.advance(60_000);
    expect(sandbox.state.orders.get(upstreamId)?.status).toBe('DELIVERED');
    const stats = await poller.runNow();
    expect(stats!.leftActiveList).toBeGreaterThanOrEqual(1);
    expect(stats!.statusFromReports).toBeGreaterThanOrEqual(1);
    expect(stats!.upstreamCalls).toBeLessThanOrEqual(
      3 + stats!.leftActiveList - stats!.statusFromReports,
    );
    expect(await orderState(db, id)).toBe('delivered');
  });

  it('recognises an upload that landed before a crash kept it from being recorded', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    await push(spec);
    const id = await send(spec);
    await stateIs(id, 'processing');
    // As if the worker died between the upload and its commit, and came back much later.
    await db.query(
      `UPDATE orders SET state = 'uploading', upload_completed_at = NULL, lease_owner = NULL, lease_until = NULL WHERE id = $1`,
      [id],
    );
    await sandbox.advance(6 * 60_000);
    await push(spec); // the package was released after the upload: the study comes again
    await lifecycle.uploadStudy(id); // waits for the repackaged study, then the job goes on
    await stateIs(id, 'processing', 'failed');
    expect(await row(id)).toMatchObject({ state: 'processing', alert: null });
    const upstreamId = (await row(id)).upstream_order_id as string;
    expect(sandbox.state.completedUploads.filter((u) => u.orderId === upstreamId)).toHaveLength(1);
  });

  it('describes the order API in the OpenAPI document', async () => {
    const doc = (await (
      await fetch(`${adapter.httpUrl}/openapi.json`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
      })
    ).json()) as { paths: Record<string, Record<string, unknown>> };
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining([
        '/api/orders/{id}',
        '/api/orders/{id}/cancel',
        '/api/orders/{id}/qc-bypass',
        '/api/orders/poll-cycle',
      ]),
    );
    expect(doc.paths['/api/orders/{id}/qc-bypass']!.post).toMatchObject({
      requestBody: expect.anything(),
    });
  });

  it('runs one poll cycle at a time across the cluster', async () => {
    const results = await Promise.all([poller.runNow(), poller.runNow(), poller.runIfDue()]);
    expect(results.filter((r) => r !== undefined)).toHaveLength(1);
    const { rows } = await db.query(
      `SELECT next_due_at > now() AS later, last_stats FROM poll_schedule`,
    );
    expect(rows[0].later).toBe(true);
    expect(rows[0].last_stats.upstreamCalls).toBeGreaterThanOrEqual(2);
  });
  /** A job under `key`, in the queue or still in the job outbox. */
  const jobUnder = async (key: string) =>
    (
      await db.query(
        `SELECT id FROM graphile_worker._private_jobs WHERE key = $1
          UNION ALL SELECT id FROM job_outbox WHERE job_key = $1`,
        [key],
      )
    ).rows[0];

  const missingJobWarnings = async (id: string) =>
    (
      await db.query(
        `SELECT 1 FROM audit_events WHERE order_id = $1 AND kind = 'error' AND summary LIKE '%job was missing%'`,
        [id],
      )
    ).rows.length;

  const storedResults = async (id: string) =>
    (
      await db.query(
        `SELECT count(*)::int AS n FROM order_documents WHERE order_id = $1 AND upstream_status = 'DELIVERED'`,
        [id],
      )
    ).rows[0].n as number;

  it('a delivered order whose results are all stored but not marked fetched is marked by the job the sweep enqueues, not given a new job every 10 minutes', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    await push(spec);
    const id = await send(spec);
    await stateIs(id, 'processing');
    await sandbox.advance(60_000);
    await poller.runNow();
    await stateIs(id, 'delivered');
    const key = `documents:${id}:DELIVERED`;
    await waitFor(
      'the results stored and the job done',
      async () => (await storedResults(id)) === 2 && (await jobUnder(key)) === undefined,
    );
    // `documents_fetched_for` holds the last row whose documents a job stored: a QC report job
    // (QC_FAILED_BYPASSABLE) that waited out its back-off while the order went on to DELIVERED
    // stores its report after the results, and leaves its row there.
    await db.query(
      `UPDATE orders SET documents_fetched_for = 'QC_FAILED_BYPASSABLE',
                         upstream_status_at = now() - interval '20 minutes' WHERE id = $1`,
      [id],
    );
    await lifecycle.sweep();
    expect(await missingJobWarnings(id)).toBe(1);
    await waitFor('the enqueued job run', async () => (await jobUnder(key)) === undefined);
    // Before: the job found every document stored and returned without marking them, so every
    // sweep 10 minutes on enqueued it again (a warning each time), for good.
    expect((await row(id)).documents_fetched_for).toBe('DELIVERED');
    await lifecycle.sweep();
    expect(await jobUnder(key)).toBeUndefined();
    expect(await missingJobWarnings(id)).toBe(1);
    expect(await storedResults(id)).toBe(2);
  });

  it('two sweeps at once (the minute tick and POST /api/orders/poll-cycle) enqueue the upload of a lapsed lease once', async () => {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    await push(spec);
    const id = await send(spec);
    await stateIs(id, 'processing');
    // The adapter's own minute tick (a graphile-worker cron item at :00) sweeps too: had it run
    // between the lapse below and the four sweeps, it would resume the lease itself and the four
    // would rightly find nothing. Start clear of it, so only the test's sweeps see the lapse.
    await clearOfMinuteTick();
    // As if the worker uploading it was killed: its lease lapsed, its job gone.
    await db.query(
      `UPDATE orders SET state = 'uploading', upload_completed_at = NULL,
                         lease_owner = 'a-killed-worker', lease_until = now() - interval '1 minute'
        WHERE id = $1`,
      [id],
    );
    // Before: each sweep read the lease lapsed before another had enqueued the upload, and each
    // enqueued it (a second job under the key once a worker had taken the first, the upload
    // run twice). The queue is held for writes (reads go on) until every sweep that is going to
    // enqueue straight into it waits, so all four read before any enqueues, every time.
    const holder = new PgClient({ connectionString: adapter.db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE graphile_worker._private_jobs IN EXCLUSIVE MODE');
      const sweeps = Promise.all([
        lifecycle.sweep(),
        lifecycle.sweep(),
        lifecycle.sweep(),
        lifecycle.sweep(),
      ]);
      const waiting = async () =>
        (
          await db.query(
            `SELECT count(*)::int AS n FROM pg_stat_activity
              WHERE wait_event_type = 'Lock' AND query LIKE '%graphile_worker.add_job(%'`,
          )
        ).rows[0].n as number;
      const until = Date.now() + 3_000;
      while (Date.now() < until && (await waiting()) < 4) {
        await new Promise((r) => setTimeout(r, 50));
      }
      await holder.query('COMMIT');
      const swept = await sweeps;
      expect(swept.reduce((n, s) => n + s.leasesResumed, 0)).toBe(1);
    } finally {
      await holder.end();
    }
    await waitFor('the upload job', async () => (await jobUnder(`upload:${id}`)) !== undefined);
  });
});
