import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext } from 'playwright-core';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { launchChromium } from '../helpers/chromium';

/** Every route the running Express app serves (Express 5 router stack). */
function routesOf(adapter: TestAdapter): Array<{ method: string; path: string }> {
  const express = adapter.app.getHttpAdapter().getInstance() as {
    router?: { stack: Array<{ route?: { path: string; methods: Record<string, boolean> } }> };
  };
  const out: Array<{ method: string; path: string }> = [];
  for (const layer of express.router?.stack ?? []) {
    if (!layer.route) continue;
    for (const [method, on] of Object.entries(layer.route.methods))
      if (on && method !== '_all') out.push({ method, path: layer.route.path });
  }
  return out;
}

/** Issue #18 item 8: /openapi.json covers the front doors, Swagger UI at /docs, / opens /audit. */
describe('API documentation and the browser entry points', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
  });
  afterAll(async () => {
    await adapter?.close();
  });

  const auth = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });

  it('/openapi.json describes every /fhir and /dicomweb route, with opaque bearer tokens', async () => {
    const doc = (await (
      await fetch(`${adapter.httpUrl}/openapi.json`, auth(TEST_TOKENS.sender))
    ).json()) as {
      paths: Record<string, Record<string, unknown>>;
      components: {
        securitySchemes: Record<
          string,
          { scheme: string; bearerFormat?: string; description?: string }
        >;
      };
    };
    const missing = routesOf(adapter)
      .filter((r) => /^\/(fhir|dicomweb)(\/|$)/.test(r.path) && !r.path.includes('*'))
      .map((r) => ({ method: r.method, path: r.path.replace(/:(\w+)/g, '{$1}') }))
      .filter((r) => !doc.paths[r.path]?.[r.method])
      .map((r) => `${r.method.toUpperCase()} ${r.path}`);
    expect(missing).toEqual([]);
    expect(doc.paths['/fhir/ServiceRequest']?.post).toBeDefined();
    expect(doc.paths['/dicomweb/studies']?.post).toBeDefined();
    const bearer = doc.components.securitySchemes.bearer!;
    expect(bearer.scheme).toBe('bearer');
    expect(bearer.bearerFormat).toBeUndefined();
    expect(bearer.description).toMatch(/opaque/);
    expect(JSON.stringify(doc)).not.toMatch(/bearerFormat/);
  });

  it('/openapi.json gives every paged audit list its cursor and late-commit fields', async () => {
    const doc = (await (
      await fetch(`${adapter.httpUrl}/openapi.json`, auth(TEST_TOKENS.analyst))
    ).json()) as { components: { schemas: Record<string, { properties?: object }> } };
    for (const page of ['OrderPageDto', 'EventPageDto', 'MessagePageDto', 'OutboundPageDto']) {
      expect(Object.keys(doc.components.schemas[page]?.properties ?? {}).sort()).toEqual(
        expect.arrayContaining(['items', 'lateCommits', 'moreLateCommits', 'nextCursor']),
      );
    }
  });

  it('/ redirects to /audit and /docs to the Swagger UI behind the audit sign-in', async () => {
    const root = await fetch(`${adapter.httpUrl}/`, { redirect: 'manual' });
    expect(root.status).toBe(302);
    expect(root.headers.get('location')).toBe('/audit');
    const docs = await fetch(`${adapter.httpUrl}/docs`, { redirect: 'manual' });
    expect(docs.status).toBe(302);
    expect(docs.headers.get('location')).toBe('/audit/docs');
    // anonymous browser: the sign-in form; anonymous API client: 401 problem
    const anon = await fetch(`${adapter.httpUrl}/audit/docs`, { headers: { accept: 'text/html' } });
    expect(anon.status).toBe(401);
    expect(await anon.text()).toContain('Sign in to the audit log');
    expect((await fetch(`${adapter.httpUrl}/audit/docs/openapi.json`)).status).toBe(401);
    expect((await fetch(`${adapter.httpUrl}/audit/docs`, auth(TEST_TOKENS.sender))).status).toBe(
      403,
    );
    const page = await fetch(`${adapter.httpUrl}/audit/docs`, auth(TEST_TOKENS.analyst));
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('swagger-ui-bundle.js');
  });

  it('a signed-in analyst sees the Swagger UI render the FHIR front door (chromium)', async () => {
    const userDataDir = mkdtempSync(join(tmpdir(), 'docs-chromium-'));
    let context: BrowserContext | undefined;
    try {
      context = await launchChromium(userDataDir);
      const page = context.pages()[0] ?? (await context.newPage());
      const failed: string[] = [];
      page.on('response', (r) => {
        if (r.status() >= 400 && !r.url().endsWith('/favicon.ico'))
          failed.push(`${r.status()} ${r.url()}`);
      });
      const first = await page.goto(`${adapter.httpUrl}/docs`);
      expect(first?.status()).toBe(401); // followed to /audit/docs: sign in first
      await page.getByLabel('API token').fill(TEST_TOKENS.analyst);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL(`${adapter.httpUrl}/audit/docs`);
      failed.length = 0; // the 401 before signing in was expected
      await page.locator('.opblock-summary-path').first().waitFor({ timeout: 30_000 });
      const paths = await page.locator('.opblock-summary-path').allInnerTexts();
      expect(paths.map((p) => p.replace(/\u200b/g, ''))).toEqual(
        expect.arrayContaining(['/fhir/ServiceRequest', '/dicomweb/studies', '/api/audit/orders']),
      );
      expect(failed).toEqual([]); // the UI's script, styles and document all loaded
    } finally {
      await context?.close();
      rmSync(userDataDir, { recursive: true, force: true });
    }
  }, 90_000);
});
