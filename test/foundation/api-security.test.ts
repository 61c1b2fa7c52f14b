import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';

interface RouteInfo {
  method: string;
  path: string;
}

/** Every route Express knows about, read from the running application's router. */
function listRoutes(adapter: TestAdapter): RouteInfo[] {
  const express = adapter.app.getHttpAdapter().getInstance() as {
    router: { stack: Array<{ route?: { path: string; methods: Record<string, boolean> } }> };
  };
  const routes: RouteInfo[] = [];
  for (const layer of express.router.stack) {
    if (!layer.route) continue;
    for (const [method, on] of Object.entries(layer.route.methods)) {
      if (on && method !== '_all')
        routes.push({ method: method.toUpperCase(), path: layer.route.path });
    }
  }
  return routes;
}

/** Fills route parameters with plausible values. */
/** A URL the route answers: parameters filled in, an optional group ({/*path}) taken, a wildcard a path. */
function concrete(path: string): string {
  return path
    .replace(/\{([^}]*)\}/g, '$1')
    .replace(/\*\w+/g, 'Patient/x')
    .replace(/:(\w+)/g, (_, name: string) =>
      /id$/i.test(name) ? '00000000-0000-4000-8000-000000000000' : 'x',
    );
}

const PUBLIC_ROUTES = new Set(['GET /health', 'GET /fhir/metadata']);

describe('API security', () => {
  let upstream: Server;
  let adapter: TestAdapter;

  beforeAll(async () => {
    // A real HTTP peer standing in for the upstream: health only needs reachability.
    upstream = createServer((req, res) => {
      res.statusCode = 401;
      res.end('{"error":"unauthorized","message":"token required"}');
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    const port = (upstream.address() as AddressInfo).port;
    adapter = await startTestAdapter({
      IMAGING_BASE_URL: `http://127.0.0.1:${port}/v1`,
      IMAGING_CLIENT_ID: 'test-client',
      IMAGING_CLIENT_SECRET: 'test-secret',
      IMAGING_ORGANIZATION_ID: 'test-org',
      // a nearly full CI disk is not what this suite is about
      DATA_DIR_MIN_FREE_BYTES: '1',
    });
  });

  afterAll(async () => {
    await adapter?.close();
    await new Promise((r) => upstream?.close(r));
  });

  it('health is public and reports database and upstream', async () => {
    const res = await fetch(`${adapter.httpUrl}/health`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      status: string;
      checks: {
        database: { status: string };
        upstream: { status: string };
        storage: { status: string; freeBytes: number };
      };
    };
    expect(body.checks.database.status).toBe('up');
    expect(body.checks.upstream.status).toBe('up');
    expect(body.checks.storage).toMatchObject({ status: 'up', freeBytes: expect.any(Number) });
    expect(body.status).toBe('ok');
  });

  it('health says degraded (still ready) when DATA_DIR has less free space than DATA_DIR_MIN_FREE_BYTES, and /metrics says so', async () => {
    // Before: a full DATA_DIR answered every pushed study 503 while /health said ok.
    const low = await startTestAdapter({ DATA_DIR_MIN_FREE_BYTES: String(2 ** 52) });
    try {
      const res = await fetch(`${low.httpUrl}/health`);
      expect(res.status).toBe(200);
      const body = (await res.json()) as {
        status: string;
        ready: boolean;
        checks: { storage: { status: string; minFreeBytes: number; detail: string } };
      };
      expect(body.status).toBe('degraded');
      expect(body.ready).toBe(true);
      expect(body.checks.storage).toMatchObject({
        status: 'low',
        minFreeBytes: 2 ** 52,
        detail: expect.stringMatching(/DATA_DIR_MIN_FREE_BYTES/),
      });
      const metrics = await fetch(`${low.httpUrl}/metrics`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
      });
      expect(await metrics.text()).toMatch(/adapter_dependency_up\{dependency="storage"\} 0/);
    } finally {
      await low.close();
    }
  });

  it('every other endpoint answers 401 without a credential and with a wrong one', async () => {
    const routes = listRoutes(adapter).filter((r) => !PUBLIC_ROUTES.has(`${r.method} ${r.path}`));
    expect(routes.length).toBeGreaterThanOrEqual(2);
    for (const route of routes) {
      for (const headers of [
        {},
        { authorization: 'Bearer not-a-real-token-000000' },
        { authorization: 'Basic YTpi' },
      ]) {
        const res = await fetch(`${adapter.httpUrl}${concrete(route.path)}`, {
          method: route.method,
          headers,
        });
        expect({ route: `${route.method} ${route.path}`, status: res.status }).toEqual({
          route: `${route.method} ${route.path}`,
          status: 401,
        });
        expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
        expect(res.headers.get('content-type')).toMatch(/problem\+json|fhir\+json/);
      }
    }
  });

  it('a valid credential without the role gets 403; the right role gets through', async () => {
    const metrics = `${adapter.httpUrl}/metrics`;
    expect(
      (await fetch(metrics, { headers: { authorization: `Bearer ${TEST_TOKENS.sender}` } })).status,
    ).toBe(403);
    const ok = await fetch(metrics, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
    });
    expect(ok.status).toBe(200);
    expect(await ok.text()).toContain('adapter_http_request_seconds');
    expect(
      (await fetch(metrics, { headers: { authorization: `Bearer ${TEST_TOKENS.admin}` } })).status,
    ).toBe(200);
  });

  it('every route family answers X-Content-Type-Options: nosniff and Cache-Control: no-store, errors and unknown paths too', async () => {
    // Before: /metrics, /openapi.json, /health, GET / and an unknown path had neither header
    // (only /fhir, /api, /audit, /dicomweb and /docs did).
    const paths = [
      ...listRoutes(adapter)
        .filter((r) => r.method === 'GET')
        .map((r) => concrete(r.path)),
      '/no-such-path',
    ];
    expect(paths).toEqual(expect.arrayContaining(['/health', '/metrics', '/openapi.json', '/']));
    for (const path of paths) {
      for (const token of [TEST_TOKENS.admin, undefined]) {
        const res = await fetch(`${adapter.httpUrl}${path}`, {
          headers: token ? { authorization: `Bearer ${token}` } : {},
          redirect: 'manual',
        });
        await res.arrayBuffer();
        expect({
          path,
          status: res.status,
          nosniff: res.headers.get('x-content-type-options'),
          cache: res.headers.get('cache-control'),
        }).toEqual({ path, status: res.status, nosniff: 'nosniff', cache: 'no-store' });
      }
    }
  });

  it('a method a known path does not answer is 405 with Allow (problem JSON), not 404', async () => {
    // Before: PUT /api/orders/{id}, OPTIONS /api/audit/orders, DELETE /metrics … answered
    // 404 "Cannot PUT …", as if the path did not exist.
    const id = '00000000-0000-4000-8000-000000000000';
    const cases: Array<[string, string, string]> = [
      ['PUT', `/api/orders/${id}`, 'GET, HEAD'],
      ['DELETE', `/api/orders/${id}`, 'GET, HEAD'],
      ['OPTIONS', '/api/audit/orders', 'GET, HEAD'],
      ['PATCH', '/api/audit/events', 'GET, HEAD'],
      ['GET', `/api/orders/${id}/cancel`, 'POST'],
      ['PUT', `/api/orders/${id}/qc-bypass`, 'POST'],
      ['POST', '/metrics', 'GET, HEAD'],
      ['DELETE', '/openapi.json', 'GET, HEAD'],
      ['PUT', '/dicomweb/studies', 'POST'],
    ];
    for (const [method, path, allow] of cases) {
      const res = await fetch(`${adapter.httpUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
      });
      const body = (await res.json()) as { status: number; detail: string };
      expect({
        method,
        path,
        status: res.status,
        allow: res.headers.get('allow'),
        type: res.headers.get('content-type'),
      }).toEqual({
        method,
        path,
        status: 405,
        allow,
        type: expect.stringMatching(/^application\/problem\+json/),
      });
      expect(body).toMatchObject({ status: 405, detail: expect.stringContaining(allow) });
    }
    // A path nobody serves stays 404; a known path with its own method still routes.
    expect((await fetch(`${adapter.httpUrl}/api/nothing-here`, { method: 'PUT' })).status).toBe(
      404,
    );
    expect(
      (
        await fetch(`${adapter.httpUrl}/api/orders/${id}`, {
          headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
        })
      ).status,
    ).toBe(404);
  });

  it('serves its OpenAPI document to any valid credential', async () => {
    const res = await fetch(`${adapter.httpUrl}/openapi.json`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.sender}` },
    });
    expect(res.status).toBe(200);
    const doc = (await res.json()) as { openapi: string; paths: Record<string, unknown> };
    expect(doc.openapi).toMatch(/^3\./);
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/health', '/metrics']));
  });
});
