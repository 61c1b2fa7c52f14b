import type { ServerResponse } from 'node:http';
import { codeOf } from '../../test/imaging-client/error-code';
import {
  JumpingClock,
  json,
  startScriptedUpstream,
  tokenAnswer,
  type Script,
} from '../../test/imaging-client/scripted-upstream';
import { ImagingClient } from './imaging-client';
import { withDefaults } from './imaging-client.config';
import { ImagingClientError } from './imaging-client.error';
import { InMemoryRateLimiter } from './in-memory-rate-limiter';
import { silentLogger, type CallRecord } from './ports';
import { UpstreamHealthStatus } from './upstream-health.status';

const ORDER_ID = '3f0b6a3e-8f0e-4c5e-9d7b-1a2b3c4d5e6f';

/** Every upstream and client a test set up, closed after it. */
const opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const t of opened.splice(0)) await t.close();
});

/**
 * A client of a scripted upstream: `/auth/token` issues `tok-1` (unless `ownTokens`, then the
 * script answers it too), every other request goes to `script`.
 */
async function setup(
  script: Script,
  options: {
    retry?: Partial<{ maxAttempts: number; deadlineMs: number }>;
    ownTokens?: boolean;
  } = {},
) {
  const upstream = await startScriptedUpstream((req, res) => {
    if (req.path === '/auth/token' && !options.ownTokens) return tokenAnswer(res);
    return script(req, res);
  });
  const clock = new JumpingClock();
  const records: CallRecord[] = [];
  const health = new UpstreamHealthStatus(() => clock.now());
  const client = new ImagingClient(
    withDefaults({
      baseUrl: upstream.baseUrl,
      clientId: 'client id',
      clientSecret: 's3cr:et',
      organizationId: 'org-1',
      retry: {
        maxAttempts: 4,
        deadlineMs: 600_000,
        baseDelayMs: 100,
        maxDelayMs: 1_000,
        ...options.retry,
      },
      timeouts: { requestMs: 500 },
    }),
    {
      clock,
      rateLimiter: new InMemoryRateLimiter(),
      observer: {
        onCall: (r) => {
          records.push(r);
          health.onCall(r);
        },
      },
      logger: silentLogger,
    },
  );
  const t = {
    upstream,
    clock,
    records,
    health,
    client,
    async close() {
      await client.close();
      await upstream.close();
    },
  };
  opened.push(t);
  return t;
}

describe('ImagingClient over a scripted upstream', () => {
  it('authenticates with HTTP Basic and a form body, then sends the Bearer token', async () => {
    const t = await setup((req, res) => {
      json(res, 200, {
        order_id: ORDER_ID,
        status: 'QUEUED',
        study_uid: null,
        updated_at: null,
        extra: { x: 1 },
      });
    });
    const status = await t.client.getStatus({ orderId: ORDER_ID });
    expect(status).toMatchObject({ orderId: ORDER_ID, status: 'QUEUED' });
    const [tokenReq, statusReq] = t.upstream.seen;
    expect(tokenReq.method).toBe('POST');
    expect(tokenReq.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(tokenReq.body.toString()).toBe('grant_type=client_credentials');
    const basic = Buffer.from(String(tokenReq.headers.authorization).slice(6), 'base64').toString();
    expect(basic).toBe('client%20id:s3cr%3Aet');
    expect(statusReq.headers.authorization).toBe('Bearer tok-1');
    expect(statusReq.query.get('order_id')).toBe(ORDER_ID);
    expect(t.records.map((r) => [r.operation, r.endpoint, r.status])).toEqual([
      ['token', '/auth/token', 200],
      ['status', '/status', 200],
    ]);
  });

  it('a token answer that breaks the contract: health and the call record name the token, not a call never sent', async () => {
    // expires_in as a string ("3600"): the token is refused (contract: integer). Before, /health
    // said "last list-orders failed (invalid_response)" and the audit log "GET /list-orders →
    // no answer", though GET /list-orders was never sent: the operator looked at the wrong
    // endpoint.
    const t = await setup(
      (req, res) => {
        if (req.path === '/auth/token')
          return json(res, 200, { access_token: 'tok', token_type: 'Bearer', expires_in: '3600' });
        return json(res, 200, { orders: [] });
      },
      { ownTokens: true },
    );
    const error = await t.client.listOrders().catch((e: unknown) => e as ImagingClientError);
    expect(error).toMatchObject({ code: 'invalid_response', operation: 'token' });
    expect(t.upstream.seen.map((r) => r.path)).toEqual(['/auth/token']);
    const list = t.records.find((r) => r.operation === 'list-orders')!;
    expect(list).toMatchObject({ status: null, outcome: 'error' });
    expect(list.error).toMatchObject({ code: 'invalid_response', operation: 'token' });
    expect(t.health.snapshot().lastError).toMatchObject({
      operation: 'token',
      code: 'invalid_response',
    });
  });

  it('refused credentials (401 after the renewal, or from the token endpoint) show the upstream degraded', async () => {
    // docs/lifecycle.md: refused credentials do not end orders, and /health shows the upstream
    // degraded. Before, /health said "up, last success …" (the token request that preceded
    // each refused call counted as the success) while every call was refused.
    const t = await setup((_req, res) => json(res, 401, { error: 'invalid_token' }));
    expect(await codeOf(t.client.listOrders())).toBe('unauthorized');
    expect(t.health.snapshot()).toMatchObject({
      state: 'degraded',
      lastError: { operation: 'list-orders', code: 'unauthorized' },
    });
    const u = await setup((_req, res) => json(res, 401, { error: 'invalid_client' }), {
      ownTokens: true,
    });
    expect(await codeOf(u.client.listOrders())).toBe('unauthorized');
    expect(u.health.snapshot()).toMatchObject({
      state: 'degraded',
      lastError: { operation: 'token', code: 'unauthorized' },
    });
  });

  it('on 401 renews the token and retries once, and no more', async () => {
    let issued = 0;
    let rejectAll = false;
    const t = await setup(
      (req, res) => {
        if (req.path === '/auth/token') return tokenAnswer(res, `tok-${++issued}`);
        if (rejectAll || req.headers.authorization === 'Bearer tok-1')
          return json(res, 401, { error: 'invalid_token' });
        json(res, 200, { valid: true });
      },
      { ownTokens: true },
    );
    await expect(t.client.testToken()).resolves.toMatchObject({ valid: true });
    expect(issued).toBe(2);
    rejectAll = true;
    const error = await t.client.testToken().catch((e: unknown) => e as ImagingClientError);
    expect(error).toBeInstanceOf(ImagingClientError);
    expect((error as ImagingClientError).code).toBe('unauthorized');
    expect((error as ImagingClientError).operation).toBe('test-token');
    expect(t.upstream.seen.filter((r) => r.path === '/test-token')).toHaveLength(4);
  });

  it('retries 429 and 5xx with backoff, honouring Retry-After', async () => {
    let n = 0;
    const t = await setup((req, res) => {
      n++;
      if (n === 1) return json(res, 429, { error: 'rate_limited' }, { 'retry-after': '7' });
      if (n === 2) return json(res, 503, { error: 'unavailable' });
      json(res, 200, {
        products: [{ id: 'p1', name: 'Brain', UDI: null, fda_desc: null, new_field: true }],
      });
    });
    const products = await t.client.getProducts();
    expect(products).toEqual([
      { id: 'p1', name: 'Brain', UDI: null, fda_desc: null, new_field: true },
    ]);
    expect(t.clock.sleeps[0]).toBeGreaterThanOrEqual(7_000);
    expect(t.clock.sleeps[1]).toBeLessThan(200);
    expect(t.records.at(-1)).toMatchObject({
      operation: 'products',
      attempts: 3,
      status: 200,
      outcome: 'success',
    });
  });

  it('stops at the attempt limit and at the deadline with a transient typed error', async () => {
    const t = await setup((req, res) => {
      json(res, 500, { error: 'internal', message: 'see https://files.example/x?sig=SECRET' });
    });
    const error = (await t.client.listOrders().catch((e: unknown) => e)) as ImagingClientError;
    expect(error.code).toBe('server_error_exhausted');
    expect(error.attempts).toBe(4);
    expect(error.transient).toBe(true);
    expect(JSON.stringify(error.toJSON())).not.toContain('SECRET');
    const d = await setup(
      (req, res) => {
        json(res, 429, { error: 'rate_limited' }, { 'retry-after': '120' });
      },
      { retry: { deadlineMs: 60_000 } },
    );
    expect(await codeOf(d.client.listOrders())).toBe('deadline');
    expect(d.upstream.seen.filter((r) => r.path === '/list-orders')).toHaveLength(1);
  });

  it('never retries 400, 403, 404 or 409, and names the operation', async () => {
    const answers: Record<string, number> = {
      '/add-metadata': 400,
      '/metadata': 403,
      '/status': 404,
      '/cancel-order': 409,
    };
    const t = await setup((req, res) => {
      json(res, answers[req.path] ?? 500, { error: 'nope', message: 'no' });
    });
    expect(await codeOf(t.client.addMetadata({ orderId: ORDER_ID }, { priority: 'bogus' }))).toBe(
      'bad_request',
    );
    expect(await codeOf(t.client.getMetadata({ studyUid: '1.2.3' }))).toBe('forbidden');
    expect(await codeOf(t.client.getStatus({ orderId: ORDER_ID }))).toBe('not_found');
    const conflict = (await t.client
      .cancelOrder(ORDER_ID)
      .catch((e: unknown) => e)) as ImagingClientError;
    expect(conflict.code).toBe('conflict');
    expect(conflict.operation).toBe('cancel-order');
    expect(conflict.upstreamError).toEqual({ error: 'nope', message: 'no' });
    expect(t.upstream.seen.filter((r) => r.path !== '/auth/token')).toHaveLength(4);
  });

  it('an answer larger than 32 MiB is not read into memory: invalid_response', async () => {
    const t = await setup((req, res) => {
      res.setHeader('content-type', 'application/json');
      const chunk = Buffer.alloc(1024 * 1024, 0x20);
      let sent = 0;
      const pump = () => {
        while (sent < 40 && res.write(chunk)) sent++;
        if (sent < 40) res.once('drain', pump);
        else res.end();
      };
      res.on('error', () => undefined);
      pump();
    });
    expect(await codeOf(t.client.getProducts())).toBe('invalid_response');
  });

  it('an answer that drips (never idle for the idle timeout) ends at the call deadline', async () => {
    // A proxy or a struggling upstream trickling bytes: each chunk resets the 500 ms idle
    // timeout, so only a bound on the whole attempt ends it.
    const timers = new Set<NodeJS.Timeout>();
    const t = await setup(
      (req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"order_id":"');
        const timer = setInterval(() => res.write('a'), 100);
        timers.add(timer);
        res.on('close', () => clearInterval(timer));
      },
      { retry: { deadlineMs: 1_500 } },
    );
    const started = Date.now();
    const error = (await t.client
      .getStatus({ orderId: ORDER_ID })
      .catch((e: unknown) => e)) as ImagingClientError;
    for (const timer of timers) clearInterval(timer);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(error).toBeInstanceOf(ImagingClientError);
    expect(error.code).toBe('deadline');
    expect(error.message).toMatch(/no complete answer within/);
    expect(t.records.at(-1)).toMatchObject({ operation: 'status', outcome: 'error' });
  });

  it('a 410 without the contract body (a proxy) is an ordinary failure: retried, no retirement', async () => {
    let gone = 2;
    const t = await setup((req, res) => {
      if (gone-- > 0) {
        res.statusCode = 410;
        res.setHeader('content-type', 'text/html');
        res.end('<html><body>410 Gone (nginx)</body></html>');
        return;
      }
      json(res, 200, { products: [] });
    });
    await t.client.getProducts();
    expect(t.client.http.retired).toBeUndefined();
    expect(t.health.snapshot().state).not.toBe('retired');
  });

  it('on 410 stops calling for good and reports retirement with the migration guide', async () => {
    const t = await setup((req, res) => {
      json(res, 410, {
        error: 'v1 retired; use v2',
        migration_guide: 'https://docs.example/migrate-v2',
      });
    });
    const error = (await t.client.getProducts().catch((e: unknown) => e)) as ImagingClientError;
    expect(error.code).toBe('retired');
    expect(error.migrationGuide).toBe('https://docs.example/migrate-v2');
    const before = t.upstream.seen.length;
    expect(await codeOf(t.client.listOrders())).toBe('retired');
    expect(t.upstream.seen.length).toBe(before);
    expect(t.health.snapshot()).toMatchObject({
      state: 'retired',
      retired: { migrationGuide: 'https://docs.example/migrate-v2' },
    });
  });

  it('a 410 whose migration_guide is 1 MiB or no link is not repeated whole in health, errors and records', async () => {
    const guides = [
      `https://docs.example/migrate-v2?${'a'.repeat(1024 * 1024 - 200)}`,
      'see\u0007 the portal\n\u001b[2J for https://docs.example/migrate?X-Amz-Signature=abc',
    ];
    for (const guide of guides) {
      const t = await setup((req, res) => {
        json(res, 410, { error: 'v1 retired; use v2', migration_guide: guide });
      });
      const error = (await t.client.getProducts().catch((e: unknown) => e)) as ImagingClientError;
      expect(error.code).toBe('retired');
      const health = t.health.snapshot().retired!;
      for (const shown of [
        error.migrationGuide!,
        health.migrationGuide,
        t.records.at(-1)!.retirement!.migrationGuide,
      ]) {
        expect(shown.length).toBeLessThanOrEqual(2048);
        // eslint-disable-next-line no-control-regex
        expect(shown).not.toMatch(/[\u0000-\u001f\u007f]/);
        expect(shown).not.toContain('X-Amz-Signature=abc');
      }
    }
  });

  it('records the deprecation warning and surfaces it in health', async () => {
    const t = await setup((req, res) => {
      json(
        res,
        200,
        { activity: [{ orderId: ORDER_ID, statusDesc: 'Delivered', failureReason: null }] },
        {
          'X-API-Deprecation-Warning': 'v1 will be deprecated on 2027-03-01',
        },
      );
    });
    await t.client.getRecentActivity();
    expect(t.records.at(-1)?.deprecationWarning).toBe('v1 will be deprecated on 2027-03-01');
    expect(t.health.snapshot().deprecation).toMatchObject({ date: '2027-03-01' });
  });

  it('a deprecation warning of 12 KB is kept to 200 characters (every call record, health)', async () => {
    // The header comes with every answer; each upstream.call audit event and /health carried
    // it whole (the reachability probe and the metric already cut it at 200).
    const warning = `v1 will be deprecated on 2027-03-01; ${'see the portal '.repeat(800)}`;
    const t = await setup((req, res) => {
      json(res, 200, { products: [] }, { 'X-API-Deprecation-Warning': warning });
    });
    await t.client.getProducts();
    expect(t.records.at(-1)?.deprecationWarning).toBe(warning.slice(0, 200));
    expect(t.health.snapshot().deprecation).toMatchObject({
      warning: warning.slice(0, 200),
      date: '2027-03-01',
    });
  });

  it('turns a response that breaks the contract into invalid_response', async () => {
    const bodies: Record<string, (res: ServerResponse) => void> = {
      '/list-orders': (res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"orders": [');
      },
      '/status': (res) => json(res, 200, { order_id: ORDER_ID, status: 'DONE' }),
      '/new-batch': (res) => json(res, 201, { id: 'x' }),
      '/qc-report': (res) => json(res, 200, { findings: [] }),
    };
    const t = await setup((req, res) => {
      bodies[req.path](res);
    });
    for (const call of [
      t.client.listOrders(),
      t.client.getStatus({ orderId: ORDER_ID }),
      t.client.createBatch(['p1']),
      t.client.getQcReport(ORDER_ID, 'results'),
    ]) {
      expect(await codeOf(call)).toBe('invalid_response');
    }
  });

  it('keeps the whole files list of a long invalid_study answer (beyond 4 KB), up to 1 MiB of body', async () => {
    const files = Array.from({ length: 3_000 }, (_, i) => ({
      file: `DICOM/1.2.826.0.1.3680043.8.498.${i}/1.2.826.0.1.3680043.8.498.${i}.1.dcm`,
      reason: `incomplete uncompressed pixel data: declared ${i + 1000} bytes more than present`,
    }));
    let huge = false;
    const t = await setup((req, res) => {
      const body = { error: 'invalid_study', message: 'study validation failed', files };
      if (huge) body.files = [...files, ...files, ...files, ...files, ...files, ...files];
      json(res, 400, body);
    });
    const error = (await t.client
      .addMetadata({ orderId: ORDER_ID }, { a: 'b' })
      .catch((e: unknown) => e)) as ImagingClientError;
    expect(JSON.stringify(files).length).toBeGreaterThan(100 * 1024);
    expect(error.code).toBe('bad_request');
    expect(error.fileProblems).toHaveLength(3_000);
    expect(error.fileProblems![2_999]).toEqual(files[2_999]);
    expect(error.fileProblemsTotal).toBe(3_000);
    // The message and upstreamError stay short: the list is carried beside them.
    expect(error.message.length).toBeLessThan(700);
    // Over 1 MiB the body is not read as JSON: no list, a short sanitised text.
    huge = true;
    const over = (await t.client
      .addMetadata({ orderId: ORDER_ID }, { a: 'b' })
      .catch((e: unknown) => e)) as ImagingClientError;
    expect(over.code).toBe('bad_request');
    expect(over.fileProblems).toBeUndefined();
  });

  it('retries a dropped connection', async () => {
    let n = 0;
    const t = await setup((req, res) => {
      if (++n === 1) return res.socket?.destroy();
      json(res, 200, { orders: [] });
    });
    await expect(t.client.listOrders()).resolves.toEqual([]);
    expect(t.records.at(-1)?.attempts).toBe(2);
  });

  it('after a timed-out new-order finds the order it created instead of creating another', async () => {
    const created: Array<{ id: string; meta: Record<string, unknown>; at: string }> = [];
    const t = await setup((req, res) => {
      if (req.path === '/new-order') {
        const id = `${ORDER_ID.slice(0, -1)}${created.length}`;
        created.push({ id, meta: JSON.parse(req.body.toString()), at: new Date().toISOString() });
        // Created, but the answer comes too late for the client's timeout.
        setTimeout(() => json(res, 201, { order_id: id }), 1_500);
        return;
      }
      if (req.path === '/list-orders') {
        return json(res, 200, {
          orders: created.map((o) => ({ order_id: o.id, status: 'PENDING', created_at: o.at })),
        });
      }
      if (req.path === '/metadata') {
        const order = created.find((o) => o.id === req.query.get('order_id'));
        return json(res, 200, { order_id: order?.id, metadata: order?.meta });
      }
      json(res, 404, { error: 'not_found' });
    });
    const result = await t.client.createOrder(
      { patient_id: 'P1', products: ['p1'] },
      { correlationId: 'corr-42' },
    );
    expect(result).toEqual({ orderId: created[0].id, recovered: true });
    expect(created).toHaveLength(1);
    expect(created[0].meta.correlation_id).toBe('corr-42');
  });

  it('an upstream that answers our order id in another case: the same order (status, cancel, lost-create lookup)', async () => {
    // A UUID is the same in either case (RFC 9562 §4). The list names the order lower case, its
    // reads answer upper case. Before, GET /status and a cancel's answer were refused as about
    // another order, and the lookup after a lost create refused our own order's metadata and
    // created a second order.
    const created: string[] = [];
    const t = await setup((req, res) => {
      if (req.path === '/new-order') {
        created.push(`${ORDER_ID.slice(0, -1)}${created.length}`);
        // Created, but the answer is lost (no answer before the client's timeout).
        return;
      }
      if (req.path === '/list-orders') {
        return json(res, 200, {
          orders: created.map((id) => ({ order_id: id, status: 'PENDING', created_at: null })),
        });
      }
      const asked = req.query.get('order_id') ?? '';
      if (req.path === '/metadata') {
        return json(res, 200, {
          order_id: asked.toUpperCase(),
          metadata: { correlation_id: 'corr-42' },
        });
      }
      if (req.path === '/status') {
        return json(res, 200, { order_id: asked.toUpperCase(), status: 'QUEUED' });
      }
      if (req.path === '/cancel-order') {
        return json(res, 200, { order_id: asked.toUpperCase(), status: 'CANCELLED' });
      }
      json(res, 404, { error: 'not_found' });
    });
    expect((await t.client.getStatus({ orderId: ORDER_ID })).status).toBe('QUEUED');
    expect(await t.client.cancelOrder(ORDER_ID)).toMatchObject({ status: 'CANCELLED' });
    const result = await t.client.createOrder(
      { patient_id: 'P1', products: ['p1'] },
      { correlationId: 'corr-42' },
    );
    expect(result).toEqual({ orderId: created[0], recovered: true });
    expect(created).toHaveLength(1);
  });

  it('a lookup on an upstream listing our orders in upper case reads no metadata of the orders it knows', async () => {
    // The client remembers the correlation id of every order it created, and the caller names
    // the upstream ids held for other orders (knownElsewhere). Both compared as text, an upper
    // case list matched neither, and every lookup read GET /metadata of every PENDING order
    // (the budget problem of docs/fire.md).
    const created: string[] = [];
    const t = await setup((req, res) => {
      if (req.path === '/new-order') {
        created.push(`${ORDER_ID.slice(0, -1)}${created.length}`);
        return json(res, 201, { order_id: created.at(-1) });
      }
      if (req.path === '/list-orders') {
        return json(res, 200, {
          orders: created.map((id) => ({
            order_id: id.toUpperCase(),
            status: 'PENDING',
            created_at: null,
          })),
        });
      }
      if (req.path === '/metadata') {
        const asked = req.query.get('order_id') ?? '';
        return json(res, 200, { order_id: asked, metadata: { correlation_id: 'someone' } });
      }
      json(res, 404, { error: 'not_found' });
    });
    // Ours, created here: the client knows its correlation id.
    await t.client.createOrder({ products: ['p1'] }, { correlationId: 'corr-1' });
    // Held for another of our orders (by another replica): the caller names it as it holds it.
    created.push(`${ORDER_ID.slice(0, -1)}9`);
    const result = await t.client.createOrder(
      { products: ['p1'] },
      {
        correlationId: 'corr-2',
        previouslyAttempted: true,
        knownElsewhere: async (ids) =>
          new Set(
            ids.filter((id) => id.toLowerCase() === created[1]).map((id) => id.toLowerCase()),
          ),
      },
    );
    expect(result.recovered).toBe(false);
    expect(t.upstream.seen.filter((r) => r.path === '/metadata')).toEqual([]);
  });

  it('after a timed-out new-order never takes an order whose metadata answer is about another order', async () => {
    // Another system's PENDING order of the organization; its GET /metadata is answered with
    // our order's metadata (a cache or routing mix-up upstream). Taken as ours, the study of
    // our patient would be uploaded into another system's order.
    const theirs = `${ORDER_ID.slice(0, -1)}9`;
    const ours = `${ORDER_ID.slice(0, -1)}1`;
    let creates = 0;
    const t = await setup((req, res) => {
      if (req.path === '/new-order') {
        creates++;
        // The first attempt is lost (no answer before the timeout, nothing created).
        if (creates === 1) return;
        return json(res, 201, { order_id: ours });
      }
      if (req.path === '/list-orders') {
        const orders = [{ order_id: theirs, status: 'PENDING', created_at: null }];
        if (creates > 1) orders.push({ order_id: ours, status: 'PENDING', created_at: null });
        return json(res, 200, { orders });
      }
      if (req.path === '/metadata') {
        return json(res, 200, { order_id: ours, metadata: { correlation_id: 'corr-42' } });
      }
      json(res, 404, { error: 'not_found' });
    });
    const result = await t.client.createOrder(
      { patient_id: 'P1', products: ['p1'] },
      { correlationId: 'corr-42' },
    );
    expect(result.orderId).not.toBe(theirs);
    expect(result.orderId).toBe(ours);
    expect(t.upstream.seen.filter((r) => r.path === '/cancel-order')).toEqual([]);
  });

  it('a QC report naming a key twice has no one meaning: invalid_response by its path', async () => {
    const t = await setup((req, res) => {
      // JSON.parse keeps the last verdict; the service's own log may keep the first.
      res.writeHead(200, { 'content-type': 'application/json', 'X-QC-Round': 'latest' });
      res.end(`{"order_id":"${ORDER_ID}","checks":{"verdict":"fail","verdict":"pass"}}`);
    });
    const error = await t.client.getQcReport(ORDER_ID, 'results').catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'invalid_response',
      message: 'qc-report: the QC report names checks.verdict twice in one object',
    });
  });

  it('list pages that each keep 10 MiB of extra fields: read no further than MAX_LIST_TOTAL_BYTES in all', async () => {
    // Each page is under the page limit (16 MiB) and holds one entry, but its extra field is
    // kept (contract, Versioning 2): over 100 pages, 1.6 GB would be held at once.
    const pad = 'x'.repeat(10 * 1024 * 1024);
    const t = await setup((req, res) => {
      const page = Number(req.query.get('page') ?? 1);
      json(res, 200, {
        orders: [
          {
            order_id: `${ORDER_ID.slice(0, -2)}${String(page).padStart(2, '0')}`,
            status: 'QUEUED',
            note: pad,
          },
        ],
        ...(page < 6 ? { next_page: page + 1 } : {}),
      });
    });
    const error = await t.client.listOrders().catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'invalid_response',
      message: expect.stringMatching(
        /list-orders: the list's pages hold more than \d+ bytes in all/,
      ),
    });
    expect(t.upstream.seen.filter((r) => r.path === '/list-orders').length).toBeLessThanOrEqual(4);
  });

  it('after a timed-out new-order never takes a listed order whose id is no UUID (../, %2F, ?, #)', async () => {
    // The contract: the order ID is a UUIDv4. A listed id with path characters, even one whose
    // metadata carries our correlation_id, is no order we could have created.
    const odd = '../../cancel-order?order_id=x%2F#frag';
    const ours = `${ORDER_ID.slice(0, -1)}1`;
    let creates = 0;
    const t = await setup((req, res) => {
      if (req.path === '/new-order') {
        creates++;
        if (creates === 1) return; // lost: no answer before the timeout, nothing created
        return json(res, 201, { order_id: ours });
      }
      if (req.path === '/list-orders') {
        const orders = [{ order_id: odd, status: 'PENDING', created_at: null }];
        if (creates > 1) orders.push({ order_id: ours, status: 'PENDING', created_at: null });
        return json(res, 200, { orders });
      }
      if (req.path === '/metadata') {
        const asked = req.query.get('order_id');
        return json(res, 200, { order_id: asked, metadata: { correlation_id: 'corr-42' } });
      }
      json(res, 404, { error: 'not_found' });
    });
    const result = await t.client.createOrder(
      { patient_id: 'P1', products: ['p1'] },
      { correlationId: 'corr-42' },
    );
    expect(result.orderId).toBe(ours);
    expect(t.upstream.seen.filter((r) => r.query.get('order_id') === odd)).toEqual([]);
  });

  it('reads documents and the QC round header', async () => {
    const t = await setup((req, res) => {
      if (req.path === '/qc-report')
        return json(res, 200, { findings: ['motion'] }, { 'X-QC-Round': 'corrected' });
      res.writeHead(200, { 'content-type': 'application/pdf' });
      res.end(Buffer.from('%PDF-1.7\n%…'));
    });
    const doc = await t.client.getResults({ orderId: ORDER_ID }, 'PDF');
    expect(doc.contentType).toBe('application/pdf');
    expect(doc.body.subarray(0, 5).toString()).toBe('%PDF-');
    await expect(t.client.getQcReport(ORDER_ID, 'results', 'latest')).resolves.toEqual({
      round: 'corrected',
      report: { findings: ['motion'] },
    });
    const qc = t.upstream.seen.find((r) => r.path === '/qc-report');
    expect(Object.fromEntries(qc!.query)).toEqual({
      order_id: ORDER_ID,
      report_type: 'results',
      round: 'latest',
    });
  });
});
