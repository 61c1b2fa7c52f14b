import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
import { ImagingClientError } from '../../src/imaging-client/imaging-client.error';
import { MAX_LIST_ENTRIES } from '../../src/imaging-client/upstream-schemas';
import { HttpUpstreamProbe } from '../../src/imaging-client/http-upstream.probe';
import { OrderPollerService } from '../../src/orders/order-poller.service';
import { isTransient } from '../../src/orders/upstream-errors';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { DicomWebClient } from '../../src/studies/dicomweb.client';
import { StudyError } from '../../src/studies/study.error';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { ackSummary } from '../helpers/hl7-fixtures';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';
import {
  newOrderSpec,
  placeWithStudy,
  orderByPlacer,
  orderDiagnostics,
  orderState,
  ormMessage,
  SANDBOX_CLIENT,
  waitFor,
  writeSiteConfig,
} from '../e2e/e2e-support';
import { startFaultyProxy } from '../imaging-client/faulty-proxy';
import { buildClient } from '../imaging-client/sandbox-harness';
import { json, startScriptedUpstream, tokenAnswer } from '../imaging-client/scripted-upstream';

jest.setTimeout(180_000);

/**
 * The adapter as a client of an upstream it does not control: answers a hostile or broken
 * Imaging Analysis Service could give (a list far larger than any real one, a storage host
 * that trickles its answer, presigned URLs naming this machine's neighbours), against the
 * client on loopback and against a running adapter. Each must end in a typed, bounded error
 * that names what was wrong, with /health answering and no credential or signature sent or kept.
 */

const ORDER = '3f1b2c4d-0000-4000-8000-0000000000aa';
const entry = (i: number) =>
  `{"order_id":"3f1b2c4d-0000-4000-8000-${String(i).padStart(12, '0')}","status":"PENDING"}`;
const listOf = (n: number) =>
  `{"orders":[${Array.from({ length: n }, (_, i) => entry(i)).join(',')}]}`;

async function errorOf(p: Promise<unknown>): Promise<ImagingClientError> {
  const error = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ImagingClientError);
  return error as ImagingClientError;
}

describe('hostile upstream: list answers', () => {
  it('a /list-orders of 32 MiB (860,000 entries) is a typed invalid_response, read no further than 16 MiB', async () => {
    // Before: `items.push(...entries)` overflowed the stack (RangeError, untyped) after 2 s of
    // parsing on the event loop.
    const big = Buffer.from(`{"orders":[${`${entry(1)},`.repeat(420_000)}${entry(2)}]}`);
    const upstream = await startScriptedUpstream((req, res) => {
      if (req.path === '/auth/token') return tokenAnswer(res);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(big);
    });
    const c = buildClient(upstream.baseUrl, { retry: { maxAttempts: 1 } });
    try {
      const error = await errorOf(c.client.listActiveOrders());
      expect(error.code).toBe('invalid_response');
      expect(error.message).toMatch(/larger than 16777216 bytes/);
    } finally {
      await c.close();
      await upstream.close();
    }
  });

  it('more than MAX_LIST_ENTRIES entries, on one page or over several, is refused before the schema reads them', async () => {
    const half = Math.ceil(MAX_LIST_ENTRIES / 2) + 1;
    const page1 = JSON.parse(listOf(half)) as Record<string, unknown>;
    page1.next = '?page=2';
    let onePage = false;
    const upstream = await startScriptedUpstream((req, res) => {
      if (req.path === '/auth/token') return tokenAnswer(res);
      if (onePage) return json(res, 200, JSON.parse(listOf(MAX_LIST_ENTRIES + 1)));
      if (req.query.get('page') === '2') return json(res, 200, JSON.parse(listOf(half)));
      return json(res, 200, page1);
    });
    const c = buildClient(upstream.baseUrl, { retry: { maxAttempts: 1 } });
    try {
      const paged = await errorOf(c.client.listActiveOrders());
      expect(paged.code).toBe('invalid_response');
      expect(paged.message).toMatch(new RegExp(`more than ${MAX_LIST_ENTRIES} entries`));
      expect(upstream.seen.filter((s) => s.path === '/list-orders')).toHaveLength(2);
      onePage = true;
      const single = await errorOf(c.client.listActiveOrders());
      expect(single.message).toMatch(
        new RegExp(`more than ${MAX_LIST_ENTRIES} entries \\(orders\\)`),
      );
    } finally {
      await c.close();
      await upstream.close();
    }
  });
});

describe('hostile upstream: ambiguous JSON', () => {
  it('an answer naming a key twice (status PENDING, then DELIVERED) is refused, not read as the last', async () => {
    const upstream = await startScriptedUpstream((req, res) => {
      if (req.path === '/auth/token') return tokenAnswer(res);
      res.writeHead(200, { 'content-type': 'application/json' });
      if (req.path === '/status')
        return res.end(`{"order_id":"${ORDER}","status":"PENDING","status":"DELIVERED"}`);
      // __proto__ is only a key: no prototype is touched, the order reads as sent.
      return res.end(
        `{"orders":[{"order_id":"${ORDER}","status":"PENDING","__proto__":{"status":"DELIVERED"}}]}`,
      );
    });
    const c = buildClient(upstream.baseUrl, { retry: { maxAttempts: 1 } });
    try {
      const error = await errorOf(c.client.getStatus({ orderId: ORDER }));
      expect(error.code).toBe('invalid_response');
      expect(error.message).toMatch(/response names status twice/);
      const listed = await c.client.listActiveOrders();
      expect(listed.orders.map((o) => o.status)).toEqual(['PENDING']);
      expect(({} as Record<string, unknown>).status).toBeUndefined();
    } finally {
      await c.close();
      await upstream.close();
    }
  });
});

describe('hostile token endpoint', () => {
  it.each([
    ['a CR/LF in access_token', 'tok\r\nX-Injected: 1'],
    ['an access_token of 1 MB', 'a'.repeat(1_000_000)],
  ])('%s: refused at the token, never sent, and no order fails for it', async (_what, token) => {
    // Before: "network error UND_ERR_INVALID_ARG", or the service's 431 as client_error,
    // which failed the order as refused by the upstream.
    const upstream = await startScriptedUpstream((req, res) => {
      if (req.path === '/auth/token') return tokenAnswer(res, token);
      return json(res, 200, { order_id: ORDER, status: 'PENDING' });
    });
    const c = buildClient(upstream.baseUrl, { retry: { maxAttempts: 1 } });
    try {
      const error = await errorOf(c.client.getStatus({ orderId: ORDER }));
      expect(error.code).toBe('invalid_response');
      expect(error.operation).toBe('token');
      expect(error.message).toMatch(/access_token/);
      expect(isTransient(error)).toBe(true);
      expect(upstream.seen.map((s) => s.path)).toEqual(['/auth/token']);
    } finally {
      await c.close();
      await upstream.close();
    }
  });
});

describe('hostile object storage and presigned URLs', () => {
  let dir: string;
  let study: string;
  let storage: Server;
  let storageOrigin: string;
  const storageSeen: string[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'hostile-storage-'));
    study = join(dir, 'study.zip');
    await writeFile(study, Buffer.alloc(32 * 1024, 7));
    // Takes the bytes, sends its headers (with an ETag), then one byte of body a second.
    storage = createServer((req, res: ServerResponse) => {
      storageSeen.push(req.url ?? '');
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { etag: '"part"', 'content-type': 'application/xml' });
        const drip = setInterval(
          () => (res.destroyed ? clearInterval(drip) : res.write(' ')),
          1000,
        );
      });
    });
    await new Promise<void>((resolve) => storage.listen(0, '127.0.0.1', resolve));
    storageOrigin = `http://127.0.0.1:${(storage.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    storage?.closeAllConnections();
    await new Promise<void>((resolve) => (storage ? storage.close(() => resolve()) : resolve()));
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const upstreamHanding = (url: string) =>
    startScriptedUpstream((req, res) => {
      if (req.path === '/auth/token') return tokenAnswer(res, 'upstream-bearer-secret');
      if (req.path === '/upload/single-put')
        return json(res, 200, { url, expires_at: new Date(Date.now() + 3_600_000).toISOString() });
      return json(res, 404, { error: 'not_found' });
    });

  it('a storage answer trickled after its headers ends the PUT at the part timeout, in total', async () => {
    // Before: the body timeout is an idle time, so one byte a second held the upload (and
    // one of the organization's 100 upload slots) for ever.
    const upstream = await upstreamHanding(`${storageOrigin}/bucket/o?X-Amz-Signature=s3cr3t`);
    const c = buildClient(upstream.baseUrl, { uploadPartTimeoutMs: 2_000 });
    const started = Date.now();
    try {
      const error = await errorOf(c.uploader.upload(ORDER, study));
      expect(error.code).toBe('deadline');
      expect(error.message).toMatch(/storage's answer did not end within 2000 ms/);
      expect(Date.now() - started).toBeLessThan(15_000);
      expect(storageSeen.length).toBeGreaterThan(0);
      expect(JSON.stringify(c.records)).not.toContain('s3cr3t');
    } finally {
      await c.close();
      await upstream.close();
    }
  });

  it.each([
    [
      'the cloud metadata service',
      'http://169.254.169.254/latest/meta-data/?X-Amz-Signature=s3cr3t',
      /link-local/,
    ],
    ['the same, as one number', 'http://2852039166/latest/?X-Amz-Signature=s3cr3t', /link-local/],
    [
      'the GCP metadata name',
      'http://metadata.google.internal/x?X-Amz-Signature=s3cr3t',
      /link-local/,
    ],
    ['the unspecified address', 'http://0.0.0.0:5432/x?X-Amz-Signature=s3cr3t', /unspecified/],
  ])('a presigned URL naming %s is refused before any byte is sent', async (_what, url, why) => {
    const upstream = await upstreamHanding(url);
    const c = buildClient(upstream.baseUrl, { retry: { maxAttempts: 2 } });
    try {
      const error = await errorOf(c.uploader.upload(ORDER, study));
      expect(error.code).toBe('invalid_response');
      expect(error.message).toMatch(why);
      // No storage PUT was made: no call record of one has a status or a host.
      const put = c.records.find((r) => r.operation === 'upload-single-put');
      expect(put?.status ?? null).toBeNull();
      expect(put?.storageHost).toBeUndefined();
      expect(JSON.stringify(c.records)).not.toContain('s3cr3t');
    } finally {
      await c.close();
      await upstream.close();
    }
  });
});

describe('hostile PACS (DICOMweb)', () => {
  it('a QIDO-RS answer trickled a byte at a time ends at the timeout, in total', async () => {
    // Before: headers and body timeouts are idle times; one byte every half second held the
    // study search (and the order's acquisition) for ever.
    const pacs = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/dicom+json' });
      res.write('[');
      const drip = setInterval(() => (res.destroyed ? clearInterval(drip) : res.write(' ')), 500);
    });
    await new Promise<void>((resolve) => pacs.listen(0, '127.0.0.1', resolve));
    const client = new DicomWebClient({
      baseUrl: `http://127.0.0.1:${(pacs.address() as AddressInfo).port}/dicom-web`,
      timeoutMs: 2_000,
    });
    const started = Date.now();
    try {
      const error = await client.findStudies({ accessionNumber: 'ACC-DRIP-1' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(StudyError);
      expect((error as StudyError).code).toBe('pacs_unavailable');
      expect((error as Error).message).toMatch(/no complete answer within 2000 ms/);
      expect(Date.now() - started).toBeLessThan(15_000);
    } finally {
      await client.close();
      pacs.closeAllConnections();
      await new Promise<void>((resolve) => pacs.close(() => resolve()));
    }
  });
});

describe('hostile upstream: /health on a fresh replica (the /test-token probe)', () => {
  /** An upstream whose every answer is headers, then one byte a second; 410s endless. */
  const trickling = () =>
    startScriptedUpstream((req, res) => {
      if (req.query.get('endless') !== null || req.path === '/gone/test-token') {
        res.writeHead(410, { 'content-type': 'application/json' });
        const chunk = Buffer.alloc(1 << 16, 32);
        const pump = () => {
          while (!res.destroyed && res.write(chunk));
          if (!res.destroyed) res.once('drain', pump);
        };
        return pump();
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{');
      const drip = setInterval(() => (res.destroyed ? clearInterval(drip) : res.write(' ')), 1000);
    });

  it('a trickled answer to every call: /health still answers within seconds', async () => {
    // Before: before any call had finished, /health asked GET /test-token and waited for its
    // whole body; a byte a second held every /health request (each adding a connection).
    const upstream = await trickling();
    const adapter = await startTestAdapter({
      IMAGING_BASE_URL: upstream.baseUrl,
      ...SANDBOX_CLIENT,
      POLL_INTERVAL_SECONDS: '3600',
    });
    try {
      const started = Date.now();
      const answers = await Promise.all(
        [1, 2, 3].map(() =>
          fetch(`${adapter.httpUrl}/health`, { signal: AbortSignal.timeout(15_000) }).then(
            (r) => r.status,
          ),
        ),
      );
      expect(answers.every((s) => s === 200 || s === 503)).toBe(true);
      expect(Date.now() - started).toBeLessThan(10_000);
      // One probe for the three requests.
      expect(upstream.seen.filter((r) => r.path === '/test-token').length).toBeLessThanOrEqual(1);
    } finally {
      await upstream.close();
      await adapter.close();
    }
  });

  it('an endless 410 body is read to 64 KiB, not to the end of memory', async () => {
    const upstream = await trickling();
    const probe = new HttpUpstreamProbe(`${upstream.origin}/gone`);
    try {
      const before = process.memoryUsage().rss;
      const result = await probe.check();
      expect(result.status).toBe('down');
      expect(result.detail).toMatch(/larger than 65536 bytes/);
      expect(process.memoryUsage().rss - before).toBeLessThan(200 * 1024 * 1024);
    } finally {
      await upstream.close();
    }
  });
});

describe('hostile upstream in front of a running adapter', () => {
  let sandbox: RunningSandbox;
  let proxy: Awaited<ReturnType<typeof startFaultyProxy>>;
  let harness: MllpHarness | undefined;
  let adapter: TestAdapter;
  let mllp: MllpClient;
  let db: PgClient;
  let hugeList = false;
  let refuseToken = false;
  /** Set: /new-order answers 302 to elsewhere, with this body. */
  let redirectCreate: string | undefined;
  let brokenReports = false;
  /** Every single-PUT URL rewritten to name the metadata service (the first test's answer). */
  let uploadToMetadataService = true;
  let holdCreate: Promise<unknown> | undefined;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hostile-upstream-'));
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', clock: 'manual', dataDir: dir });
    proxy = await startFaultyProxy(sandbox.baseUrl, (method, path) => {
      if (uploadToMetadataService && path === '/upload/single-put')
        return {
          rewrite: (body) => {
            const answer = JSON.parse(body.toString()) as { url: string };
            const signed = new URL(answer.url);
            answer.url = `http://169.254.169.254/latest/meta-data/${signed.search}`;
            return JSON.stringify(answer);
          },
        };
      if (holdCreate && path === '/new-order') return { until: holdCreate };
      if (redirectCreate !== undefined && path === '/new-order') {
        const body = redirectCreate;
        return {
          status: 302,
          headers: { location: 'https://collector.evil.example/v1/new-order?steal=1' },
          rewrite: () => body,
        };
      }
      if (refuseToken && path !== '/auth/token')
        return {
          status: 401,
          rewrite: () => '{"error":"invalid_token","message":"token revoked"}',
        };
      if (brokenReports && method === 'GET' && path === '/reports')
        return { rewrite: () => '<html><body>502 Bad Gateway</body></html>' };
      if (path === '/list-orders' && hugeList)
        return { rewrite: () => `{"orders":[${`${entry(1)},`.repeat(300_000)}${entry(2)}]}` };
      return 'pass';
    });
    harness = await startMllpHarness({
      JOBS_ENABLED: 'true',
      IMAGING_BASE_URL: proxy.baseUrl,
      ...SANDBOX_CLIENT,
      STUDY_QUIET_PERIOD_SECONDS: '1',
      CONFIG_FILE: writeSiteConfig(dir),
      POLL_INTERVAL_SECONDS: '3600',
    });
    ({ adapter, mllp, db } = harness);
  });
  afterAll(async () => {
    await harness?.close();
    await proxy?.close();
    await sandbox?.close();
  });

  const health = async () => (await fetch(`${adapter.httpUrl}/health`)).status;

  it('an upload URL pointing at the metadata service: nothing sent there, the order failed with the reason on its timeline', async () => {
    const spec = newOrderSpec();
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
    await waitFor(
      'the order failed',
      async () => (await orderState(db, id)) === 'failed',
      60_000,
      200,
      () => orderDiagnostics(db, id),
    );
    const res = await fetch(`${adapter.httpUrl}/api/audit/orders/${id}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
    });
    const timeline = JSON.stringify(await res.json());
    // Before: "the upload was refused: invalid_response" after a PUT of the study to
    // 169.254.169.254; now the analyst reads which rule refused which host.
    expect(timeline).toMatch(/presigned upload URL refused: host 169\.254\.169\.254 is link-local/);
    expect(timeline).not.toMatch(/X-Amz-Signature=(?!\[redacted\])|Signature=[0-9a-f]{8}/i);
    expect(await health()).toBe(200);
  });

  it('a /list-orders far larger than any real one: the poll cycle fails typed, /health answers', async () => {
    hugeList = true;
    try {
      const poller = adapter.app.get(OrderPollerService);
      const cycle = poller.runNow().then(
        () => undefined,
        (e: unknown) => e,
      );
      const during = await health();
      const error = await cycle;
      expect(during).toBe(200);
      // Before: a RangeError (stack overflow) after the whole 19 MB were parsed and checked.
      expect(error).toBeInstanceOf(ImagingClientError);
      expect((error as ImagingClientError).code).toBe('invalid_response');
      expect((error as Error).message).toMatch(/larger than 16777216 bytes|more than 50000/);
      expect(await health()).toBe(200);
    } finally {
      hugeList = false;
    }
  });

  it('an upstream that refuses every token: two token requests per attempt, the reason on the timeline, placed once it relents', async () => {
    refuseToken = true;
    const before = proxy.hits.length;
    const spec = newOrderSpec();
    let id: string;
    try {
      expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
      id = (await waitFor('the order', () => orderByPlacer(db, spec.placer))).id as string;
      const warning = async () =>
        (
          await db.query(
            `SELECT summary FROM audit_events WHERE order_id = $1 AND kind = 'error' ORDER BY id`,
            [id],
          )
        ).rows as Array<{ summary: string }>;
      // Before: nothing on the timeline but "received" while the job failed and waited.
      const rows = await waitFor('the reason on the timeline', async () =>
        (await warning()).length >= 2 ? warning() : undefined,
      );
      expect(rows[0]!.summary).toMatch(
        /not placed upstream yet \(unauthorized on new-order .*invalid_token.*\); tried again later/,
      );
      expect(await orderState(db, id)).toBe('received');
      // Contract, Errors: 401 → a new token, retried once; never a storm.
      const phase = proxy.hits.slice(before);
      const tokens = phase.filter((h) => h.path === '/auth/token').length;
      const refused = phase.filter((h) => h.path !== '/auth/token').length;
      expect(refused).toBeGreaterThanOrEqual(4);
      expect(tokens).toBeLessThanOrEqual(refused);
      expect(await health()).toBe(200);
    } finally {
      refuseToken = false;
    }
    await waitFor(
      'the order placed',
      async () => (await orderState(db, id)) !== 'received',
      90_000,
      500,
      () => orderDiagnostics(db, id),
    );
  });

  it('an XO changing the products while the order is being created upstream is refused (AE 207), not placed under the old products', async () => {
    let release!: () => void;
    holdCreate = new Promise<void>((r) => (release = r));
    const spec = newOrderSpec();
    try {
      const creates = proxy.hits.filter((h) => h.path === '/new-order').length;
      expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
      // the place job has read the order and its create is on the wire (held by the proxy)
      await waitFor('the create under way', async () =>
        proxy.hits.filter((h) => h.path === '/new-order').length > creates ? true : undefined,
      );
      // Before: XR, and the order said neuro-volumetry + hippocampal-atrophy while the upstream
      // was created with neuro-volumetry alone (its result then published under the new code).
      const reply = await mllp.send(
        ormMessage({
          ...spec,
          orderControl: 'XO',
          procedure: 'MRKOPFHC',
          controlId: `XO-${spec.placer}`,
        }),
      );
      expect(ackSummary(reply)).toMatchObject({
        code: 'AE',
        errors: [expect.stringMatching(/^OBR\^1\^4\^207/)],
      });
      release();
      await waitFor('placed', async () =>
        (await orderState(db, (await orderByPlacer(db, spec.placer))!.id)) === 'placed'
          ? true
          : undefined,
      );
      const { rows } = await db.query<{ request: { products: string[] } }>(
        `SELECT request FROM orders WHERE placer_order_number = $1`,
        [spec.placer],
      );
      expect(rows[0]!.request.products).toEqual(['neuro-volumetry']);
    } finally {
      release?.();
      holdCreate = undefined;
    }
  });

  it.each([
    ['no body', '', ''],
    ['a body with only a code', '{"error":"moved"}', ' (moved)'],
  ])(
    'a 302 from /new-order with %s: not followed, the order waits (not failed) with where it pointed, /health degraded',
    async (_, body, shown) => {
      redirectCreate = body;
      const { rows: last } = await db.query<{ id: string }>(
        `SELECT coalesce(max(id), 0)::text AS id FROM audit_events`,
      );
      const before = Number(last[0]!.id);
      const spec = newOrderSpec();
      try {
        expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
        const { id } = (await waitFor('the order', () => orderByPlacer(db, spec.placer))) as {
          id: string;
        };
        const reason = await waitFor('the reason on the timeline', async () => {
          const { rows } = await db.query(
            `SELECT summary FROM audit_events WHERE order_id = $1 AND kind = 'error' ORDER BY id`,
            [id],
          );
          return (rows as Array<{ summary: string }>)[0]?.summary;
        });
        // Before: "received → failed: the upstream refused the order: client_error on
        // new-order: upstream answered 302", for good, for every order while misconfigured.
        const note =
          'a redirect to host collector.evil.example that is not followed (IMAGING_BASE_URL must be the final address)';
        // before, with a body of only a code: 'redirected on new-order ({"error":"moved"})',
        // what to correct lost
        expect(reason).toContain('redirected on new-order');
        expect(reason).toContain(note);
        expect(reason).not.toContain('steal');
        // the analyst's upstream.call event of the refused create says the same (before, with a
        // body of only a code: "new-order: upstream answered 302 (moved)", our note cut off)
        const call = await waitFor('the upstream.call event', async () => {
          const res = await fetch(`${adapter.httpUrl}/api/audit/events?limit=200`, {
            headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
          });
          const { items } = (await res.json()) as {
            items: Array<{ id: string; kind: string; detail: Record<string, unknown> }>;
          };
          return items.find(
            (e) =>
              Number(e.id) > before &&
              e.kind === 'upstream.call' &&
              e.detail.operation === 'new-order' &&
              e.detail.status === 302,
          );
        });
        expect((call.detail.error as { message: string }).message).toBe(
          `new-order: upstream answered 302${shown}, ${note}`,
        );
        expect(await orderState(db, id)).toBe('received');
        const healthBody = (await (await fetch(`${adapter.httpUrl}/health`)).json()) as {
          checks: { upstream: Record<string, unknown> };
        };
        expect(JSON.stringify(healthBody.checks.upstream)).toContain('redirected');
      } finally {
        redirectCreate = undefined;
      }
    },
  );

  it('GET /reports answering no JSON: every order is still followed to its end, the cycle says why it went without', async () => {
    uploadToMetadataService = false;
    try {
      const id = await placeWithStudy({ adapter, mllp, db }, newOrderSpec());
      await waitFor('uploaded', async () => (await orderState(db, id)) === 'processing', 90_000);
      const poller = adapter.app.get(OrderPollerService);
      brokenReports = true;
      // /reports only saves GET /status calls and acknowledges stored reports: without it the
      // active list and GET /status still say where each order is. Before, every cycle threw
      // 'reports-poll: response body is not JSON' and no order of ours was followed at all.
      let stats: Awaited<ReturnType<OrderPollerService['runNow']>>;
      for (let i = 0; i < 40 && (await orderState(db, id)) !== 'delivered'; i++) {
        await sandbox.advance(5_000);
        stats = await poller.runNow();
        expect(stats).toMatchObject({ reportsUnread: 'invalid_response' });
      }
      expect(await orderState(db, id)).toBe('delivered');
    } finally {
      brokenReports = false;
      uploadToMetadataService = true;
    }
  });
});
