import {
  ADMIN,
  ADMIN_B,
  READER_A,
  USER_A1,
  USER_A2,
  WRITER_A,
  basic,
  newOrder,
  startHarness,
  type Harness,
} from './sandbox-test-kit';

describe('sandbox: authentication (OAuth client credentials) and access control', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(async () => h.close());

  const form = { 'content-type': 'application/x-www-form-urlencoded' };

  it('issues a 3600 s Bearer token for Basic credentials and grant_type=client_credentials', async () => {
    const r = await h.call('POST', '/auth/token', {
      headers: { ...form, authorization: basic(ADMIN) },
      body: 'grant_type=client_credentials',
    });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ token_type: 'Bearer', expires_in: 3600 });
    expect(typeof r.json.access_token).toBe('string');
    expect(r.headers.get('cache-control')).toBe('no-store');
    const check = await h.call('GET', '/test-token', { token: r.json.access_token as string });
    expect(check.status).toBe(200);
    expect(check.json).toMatchObject({
      valid: true,
      client_id: 'admin-a',
      organization_id: 'org-a',
      scopes: ['read', 'write'],
    });
  });

  it('serves the legacy GET /auth/token form', async () => {
    const r = await h.call('GET', '/auth/token', {
      headers: { authorization: basic(ADMIN) },
      query: { grant_type: 'client_credentials' },
    });
    expect(r.status).toBe(200);
    expect(r.json.token_type).toBe('Bearer');
  });

  it('answers 401 invalid_client for a wrong secret, an unknown client and missing credentials', async () => {
    const wrong = await h.call('POST', '/auth/token', {
      headers: { ...form, authorization: basic({ ...ADMIN, clientSecret: 'nope' }) },
      body: 'grant_type=client_credentials',
    });
    expect(wrong.status).toBe(401);
    expect(wrong.json.error).toBe('invalid_client');
    expect(wrong.headers.get('www-authenticate')).toMatch(/^Basic/);
    const unknown = await h.call('POST', '/auth/token', {
      headers: { ...form, authorization: basic({ ...ADMIN, clientId: 'ghost' }) },
      body: 'grant_type=client_credentials',
    });
    expect(unknown.status).toBe(401);
    const none = await h.call('POST', '/auth/token', {
      headers: form,
      body: 'grant_type=client_credentials',
    });
    expect(none.status).toBe(401);
  });

  it('has no refresh grant and requires grant_type', async () => {
    const refresh = await h.call('POST', '/auth/token', {
      headers: { ...form, authorization: basic(ADMIN) },
      body: 'grant_type=refresh_token&refresh_token=x',
    });
    expect(refresh.status).toBe(400);
    expect(refresh.json.error).toBe('unsupported_grant_type');
    const missing = await h.call('POST', '/auth/token', {
      headers: { ...form, authorization: basic(ADMIN) },
      body: 'scope=read',
    });
    expect(missing.status).toBe(400);
    expect(missing.json.error).toBe('invalid_request');
  });

  it('answers 415 for a token request that is not form-encoded', async () => {
    const r = await h.call('POST', '/auth/token', {
      headers: { authorization: basic(ADMIN) },
      json: { grant_type: 'client_credentials' },
    });
    expect(r.status).toBe(415);
    expect(r.json.error).toBe('unsupported_media_type');
  });

  it('narrows a token to a requested scope and refuses scopes the client lacks', async () => {
    const narrowed = await h.call('POST', '/auth/token', {
      headers: { ...form, authorization: basic(ADMIN) },
      body: 'grant_type=client_credentials&scope=read',
    });
    expect(narrowed.status).toBe(200);
    const write = await h.call('POST', '/new-order', {
      token: narrowed.json.access_token as string,
      json: {},
    });
    expect(write.status).toBe(403);
    const refused = await h.call('POST', '/auth/token', {
      headers: { ...form, authorization: basic(READER_A) },
      body: 'grant_type=client_credentials&scope=write',
    });
    expect(refused.status).toBe(400);
    expect(refused.json.error).toBe('invalid_scope');
  });

  it('answers 401 for a missing, malformed or unknown bearer token on every protected endpoint', async () => {
    for (const [method, path] of [
      ['GET', '/test-token'],
      ['POST', '/new-order'],
      ['GET', '/list-orders'],
      ['GET', '/products'],
    ] as const) {
      const none = await h.call(method, path);
      expect(none.status).toBe(401);
      expect(none.json.error).toBe('invalid_token');
      const bad = await h.call(method, path, { token: 'sbx_not-a-real-token' });
      expect(bad.status).toBe(401);
      const wrongScheme = await h.call(method, path, { headers: { authorization: basic(ADMIN) } });
      expect(wrongScheme.status).toBe(401);
    }
  });

  it('expires tokens after one hour (401), and a new token works', async () => {
    const r = await h.call('POST', '/auth/token', {
      headers: { ...form, authorization: basic(USER_A2) },
      body: 'grant_type=client_credentials',
    });
    const token = r.json.access_token as string;
    await h.sandbox.advance(3599 * 1000);
    expect((await h.call('GET', '/test-token', { token })).status).toBe(200);
    await h.sandbox.advance(2 * 1000);
    const expired = await h.call('GET', '/test-token', { token });
    expect(expired.status).toBe(401);
    expect(expired.json.message).toMatch(/expired/);
    const fresh = await h.call('POST', '/auth/token', {
      headers: { ...form, authorization: basic(USER_A2) },
      body: 'grant_type=client_credentials',
    });
    expect(
      (await h.call('GET', '/test-token', { token: fresh.json.access_token as string })).status,
    ).toBe(200);
  });

  it('distinguishes read and write permission with 403', async () => {
    const reader = await h.token(READER_A);
    const writer = await h.token(WRITER_A);
    const created = await h.call('POST', '/new-order', { token: reader, json: {} });
    expect(created.status).toBe(403);
    expect(created.json.error).toBe('insufficient_scope');
    const orderId = await newOrder(h, {}, writer);
    const readByWriter = await h.call('GET', '/qc-report', {
      token: writer,
      query: { order_id: orderId, report_type: 'results' },
    });
    expect(readByWriter.status).toBe(403);
    const bypassByReader = await h.call('PATCH', '/qc-bypass', {
      token: reader,
      query: { order_id: orderId },
    });
    expect(bypassByReader.status).toBe(403);
    expect(
      (await h.call('GET', '/status', { token: reader, query: { order_id: orderId } })).status,
    ).toBe(200);
    expect((await h.call('GET', '/test-token', { token: writer })).status).toBe(200);
  });

  it('shows standard users their own orders and organization admins all orders of the organization', async () => {
    const a1 = await h.token(USER_A1);
    const a2 = await h.token(USER_A2);
    const own1 = await newOrder(h, { patient_id: 'A1' }, a1);
    const own2 = await newOrder(h, { patient_id: 'A2' }, a2);
    const list1 = (await h.call('GET', '/list-orders', { token: a1 })).json.orders as {
      order_id: string;
    }[];
    expect(list1.map((o) => o.order_id)).toContain(own1);
    expect(list1.map((o) => o.order_id)).not.toContain(own2);
    const adminList = (await h.call('GET', '/list-orders', { token: await h.token(ADMIN) })).json
      .orders as { order_id: string }[];
    expect(adminList.map((o) => o.order_id)).toEqual(expect.arrayContaining([own1, own2]));
    // A colleague's order is visible to the admin but forbidden to the other standard user.
    expect((await h.call('GET', '/status', { token: a1, query: { order_id: own2 } })).status).toBe(
      403,
    );
    expect(
      (await h.call('GET', '/status', { token: await h.token(ADMIN), query: { order_id: own2 } }))
        .status,
    ).toBe(200);
  });

  it("answers 404 for another organization's order, everywhere it could be addressed", async () => {
    const foreign = await newOrder(
      h,
      { study_uid: '1.2.826.0.1.3680043.8.498.1' },
      await h.token(ADMIN_B),
    );
    const t = await h.token(ADMIN);
    for (const [method, path] of [
      ['GET', '/status'],
      ['GET', '/metadata'],
      ['GET', '/results'],
      ['GET', '/failure-report'],
      ['GET', '/qc-report'],
      ['PATCH', '/cancel-order'],
      ['PATCH', '/qc-bypass'],
      ['GET', '/upload/single-put'],
    ] as const) {
      const r = await h.call(method, path, {
        token: t,
        query: { order_id: foreign, report_type: path === '/qc-report' ? 'results' : 'PDF' },
      });
      expect([path, r.status, r.json.error]).toEqual([path, 404, 'order_not_found']);
    }
    const byStudy = await h.call('GET', '/status', {
      token: t,
      query: { study_uid: '1.2.826.0.1.3680043.8.498.1' },
    });
    expect(byStudy.status).toBe(404);
    const list = (await h.call('GET', '/list-orders', { token: t })).json.orders as {
      order_id: string;
    }[];
    expect(list.map((o) => o.order_id)).not.toContain(foreign);
  });

  it('answers 404 for unknown paths and 405 with Allow for a wrong method', async () => {
    const t = await h.token();
    const unknown = await h.call('GET', '/no-such-thing', { token: t });
    expect(unknown.status).toBe(404);
    const wrong = await h.call('DELETE', '/new-order', { token: t });
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toContain('POST');
  });
});
