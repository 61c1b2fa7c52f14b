import { Client } from 'pg';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';

const HTML = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';

/** The audit page's HTTP contract (sign-in, cookie, headers), over real HTTP without a browser. */
describe('audit page over HTTP', () => {
  let adapter: TestAdapter;
  let db: Client;

  beforeAll(async () => {
    adapter = await startTestAdapter();
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
  });

  const signIn = (token: string, next?: string) =>
    fetch(`${adapter.httpUrl}/audit/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: HTML },
      body: new URLSearchParams({ token, ...(next ? { next } : {}) }).toString(),
      redirect: 'manual',
    });

  const cookieOf = (res: Response) =>
    /^(audit_session=[^;]*)/.exec(res.headers.get('set-cookie') ?? '')![1]!;

  it('answers a browser without a credential with 401 and the sign-in form, an API client with problem JSON', async () => {
    const browser = await fetch(
      `${adapter.httpUrl}/audit/orders/00000000-0000-4000-8000-000000000000`,
      {
        headers: { accept: HTML },
      },
    );
    expect(browser.status).toBe(401);
    expect(browser.headers.get('content-type')).toMatch(/^text\/html/);
    expect(browser.headers.get('www-authenticate')).toMatch(/^Bearer/);
    const html = await browser.text();
    expect(html).toContain('<form method="post" action="/audit/session">');
    expect(html).toContain('value="/audit/orders/00000000-0000-4000-8000-000000000000"');
    const api = await fetch(`${adapter.httpUrl}/audit`);
    expect(api.status).toBe(401);
    expect(api.headers.get('content-type')).toMatch(/problem\+json/);
  });

  it('trades a valid token for an HttpOnly SameSite=Strict cookie scoped to /audit, and redirects only inside /audit', async () => {
    const bad = await signIn('analyst-token-but-wrong-000000');
    expect(bad.status).toBe(401);
    expect(await bad.text()).toContain('That token is not valid.');
    expect(bad.headers.get('set-cookie')).toBeNull();

    const ok = await signIn(TEST_TOKENS.analyst, '/audit/mappings');
    expect(ok.status).toBe(303);
    expect(ok.headers.get('location')).toBe('/audit/mappings');
    const setCookie = ok.headers.get('set-cookie')!;
    expect(setCookie).toMatch(
      /^audit_session=[\w-]{40,}; Path=\/audit; HttpOnly; SameSite=Strict; Max-Age=28800$/,
    );
    const { rows } = await db.query(`SELECT role, actor, id_hash FROM audit_sessions`);
    expect(rows).toEqual([
      {
        role: 'analyst',
        actor: expect.stringMatching(/^analyst#/),
        id_hash: expect.stringMatching(/^[0-9a-f]{64}$/),
      },
    ]);
    // the id itself is not stored
    expect(rows[0].id_hash).not.toBe(cookieOf(ok).split('=')[1]);

    for (const next of [
      '//evil.example/audit',
      'https://evil.example/',
      '/api/audit/orders',
      '/audit//evil',
    ]) {
      expect((await signIn(TEST_TOKENS.analyst, next)).headers.get('location')).toBe('/audit');
    }
  });

  it('a token pasted with white space around it signs in as the same actor as the token itself', async () => {
    await db.query(`DELETE FROM audit_sessions`);
    expect((await signIn(TEST_TOKENS.analyst)).status).toBe(303);
    expect((await signIn(` ${TEST_TOKENS.analyst}\r\n`)).status).toBe(303);
    const { rows } = await db.query<{ actor: string }>(
      `SELECT actor FROM audit_sessions ORDER BY created_at`,
    );
    expect(rows).toHaveLength(2);
    expect(rows[1]!.actor).toBe(rows[0]!.actor);
  });

  it('serves pages with a strict CSP, no caching, and shows a bad filter instead of failing', async () => {
    const cookie = cookieOf(await signIn(TEST_TOKENS.analyst));
    const res = await fetch(`${adapter.httpUrl}/audit?state=bogus&accession=X`, {
      headers: { cookie, accept: HTML },
    });
    expect(res.status).toBe(200);
    const csp = res.headers.get('content-security-policy')!;
    expect(csp).toMatch(/default-src 'none'; style-src 'nonce-[A-Za-z0-9+/=]+'/);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    const html = await res.text();
    expect(html).toContain('role="alert"');
    expect(html).toContain('state must be one of: received, placed');
    expect(html).not.toMatch(/<script/i);
    expect(html).not.toMatch(/https?:\/\/(?!127\.0\.0\.1)/); // nothing external
  });

  it("a form body over the page forms' 16 KiB limit is 413, not a 500", async () => {
    const cookie = cookieOf(await signIn(TEST_TOKENS.admin));
    const res = await fetch(`${adapter.httpUrl}/audit/dead-letters/1/replay`, {
      method: 'POST',
      headers: { cookie, accept: HTML, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ confirm: 'yes', reason: 'x'.repeat(20_000) }).toString(),
    });
    // refused by the body parser before any route: the problem JSON of every refusal there
    expect(res.status).toBe(413);
    expect(await res.text()).toContain('the request body is larger than 16384 bytes');
  });

  it('keeps 403 for senders and refuses an expired session', async () => {
    const sender = await fetch(`${adapter.httpUrl}/audit`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, accept: HTML },
    });
    expect(sender.status).toBe(403);
    expect(await sender.text()).toContain('403 · Not allowed');
    const senderSignIn = await signIn(TEST_TOKENS.sender);
    expect(senderSignIn.status).toBe(403);
    expect(senderSignIn.headers.get('set-cookie')).toBeNull();

    const cookie = cookieOf(await signIn(TEST_TOKENS.admin));
    await db.query(
      `UPDATE audit_sessions SET expires_at = now() - interval '1 second' WHERE role = 'admin'`,
    );
    const expired = await fetch(`${adapter.httpUrl}/audit`, { headers: { cookie, accept: HTML } });
    expect(expired.status).toBe(401);
    expect(expired.headers.get('set-cookie')).toMatch(/^audit_session=; .*Max-Age=0/);
    expect(expired.headers.get('set-cookie')).not.toMatch(/Secure/);
    // behind a TLS-terminating proxy the clearing cookie carries Secure, as the one set did
    const viaProxy = await fetch(`${adapter.httpUrl}/audit`, {
      headers: { cookie, accept: HTML, 'x-forwarded-proto': 'https' },
    });
    expect(viaProxy.status).toBe(401);
    expect(viaProxy.headers.get('set-cookie')).toMatch(
      /^audit_session=; Path=\/audit; HttpOnly; SameSite=Strict; Max-Age=0; Secure$/,
    );
  });
});
