import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { reportFigures } from './fire-support';

jest.setTimeout(120_000);

/**
 * Endpoints that answer without a credential, each for a reason: the liveness probe (load
 * balancers carry no token), the FHIR CapabilityStatement (R4 http.html#capabilities: a
 * client reads it before it authenticates), and the audit UI's sign-in form and its POST.
 */
const PUBLIC = new Set(['GET /health', 'GET /fhir/metadata']);
const PUBLIC_PREFIXES = ['/openapi', '/audit/sign-in', '/audit/login', '/api-docs'];

interface Route {
  method: string;
  path: string;
}

/** Every route the running Express app serves (Express 5 router stack). */
function routesOf(adapter: TestAdapter): Route[] {
  const express = adapter.app.getHttpAdapter().getInstance() as {
    router?: { stack: Array<{ route?: { path: string; methods: Record<string, boolean> } }> };
    _router?: { stack: Array<{ route?: { path: string; methods: Record<string, boolean> } }> };
  };
  const stack = (express.router ?? express._router)?.stack ?? [];
  const routes: Route[] = [];
  for (const layer of stack) {
    if (!layer.route) continue;
    for (const [method, on] of Object.entries(layer.route.methods)) {
      if (on && method !== '_all')
        routes.push({ method: method.toUpperCase(), path: layer.route.path });
    }
  }
  return routes;
}

function concrete(path: string): string {
  return path
    .replace(/\*\w+/g, 'Patient/x')
    .replace(/\{[^}]*\}/g, '')
    .replace(/:\w+/g, '0190a5e8-0000-7000-8000-000000000000');
}

describe('security: authentication on every endpoint, role boundaries', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter();
  });
  afterAll(async () => {
    await adapter?.close();
  });

  it('no endpoint answers without a credential, except the few public ones', async () => {
    const routes = routesOf(adapter);
    expect(routes.length).toBeGreaterThan(15);
    const open: string[] = [];
    for (const r of routes) {
      const key = `${r.method} ${r.path}`;
      if (PUBLIC.has(key) || PUBLIC_PREFIXES.some((p) => r.path.startsWith(p))) continue;
      const res = await fetch(`${adapter.httpUrl}${concrete(r.path)}`, {
        method: r.method,
        ...(['POST', 'PUT', 'PATCH'].includes(r.method)
          ? { body: '{}', headers: { 'content-type': 'application/json' } }
          : {}),
        redirect: 'manual',
      });
      await res.arrayBuffer();
      // 401, or for the browser pages a redirect to the sign-in form.
      const refused = res.status === 401 || res.status === 303 || res.status === 302;
      if (!refused) open.push(`${key} -> ${res.status}`);
    }
    // A wrong token is no better than none.
    const wrong = await fetch(`${adapter.httpUrl}/api/audit/events`, {
      headers: { authorization: 'Bearer not-a-token-0123456789' },
    });
    expect(wrong.status).toBe(401);
    reportFigures('security-auth', { routes: routes.length, open: open.length });
    expect(open).toEqual([]);
  });

  it('role boundaries hold: a sender cannot read the audit trail or run operations', async () => {
    const call = (path: string, token: string, method = 'GET') =>
      fetch(`${adapter.httpUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}` },
      }).then(async (r) => {
        await r.arrayBuffer();
        return r.status;
      });
    expect(await call('/api/audit/events', TEST_TOKENS.sender)).toBe(403);
    expect(await call('/api/audit/dead-letters', TEST_TOKENS.sender)).toBe(403);
    expect(await call('/api/orders/poll-cycle', TEST_TOKENS.sender, 'POST')).toBe(403);
    expect(await call('/api/orders/poll-cycle', TEST_TOKENS.analyst, 'POST')).toBe(403);
    expect(await call('/api/audit/events', TEST_TOKENS.analyst)).toBe(200);
    expect(await call('/api/orders/poll-cycle', TEST_TOKENS.admin, 'POST')).toBe(200);
  });
});
