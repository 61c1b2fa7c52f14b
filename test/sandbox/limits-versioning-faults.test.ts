import { connect, type Socket } from 'node:net';
import {
  ADMIN,
  MINUTE,
  basic,
  newOrder,
  putObject,
  singlePutUrl,
  startHarness,
  type Harness,
} from './sandbox-test-kit';
import { createMrBrainSeries } from '../helpers/dicom-factory';

describe('sandbox: rate limits', () => {
  let h: Harness;
  afterEach(async () => h.close());

  it('answers 429 with Retry-After past the per-endpoint limit, counting each endpoint on its own, until the minute has passed', async () => {
    h = await startHarness({ rateLimitPerEndpoint: 5, rateLimitPerIp: 1000 });
    const t = await h.token();
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++)
      statuses.push((await h.call('GET', '/products', { token: t })).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429]);
    const limited = await h.call('GET', '/products', { token: t });
    expect(limited.status).toBe(429);
    expect(limited.json.error).toBe('rate_limited');
    const retryAfter = Number(limited.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect((await h.call('GET', '/test-token', { token: t })).status).toBe(200);
    await h.sandbox.advance(MINUTE);
    expect((await h.call('GET', '/products', { token: t })).status).toBe(200);
  });

  it('answers 429 past the per-IP limit across endpoints', async () => {
    h = await startHarness({ rateLimitPerEndpoint: 1000, rateLimitPerIp: 4 });
    const t = await h.token(); // 1
    expect((await h.call('GET', '/products', { token: t })).status).toBe(200); // 2
    expect((await h.call('GET', '/list-orders', { token: t })).status).toBe(200); // 3
    expect((await h.call('GET', '/test-token', { token: t })).status).toBe(200); // 4
    const limited = await h.call('GET', '/recent-activity', { token: t });
    expect(limited.status).toBe(429);
    expect(limited.json.message).toMatch(/per IP/);
    expect(limited.headers.get('retry-after')).toMatch(/^\d+$/);
    await h.sandbox.advance(MINUTE);
    expect((await h.call('GET', '/recent-activity', { token: t })).status).toBe(200);
  });

  it('uses the contract limits by default: 600 per endpoint per minute', async () => {
    h = await startHarness();
    const t = await h.token();
    const results: number[] = [];
    // In waves of 50, so the test does not open hundreds of sockets at once.
    for (let wave = 0; wave < 601; wave += 50) {
      const n = Math.min(50, 601 - wave);
      results.push(
        ...(await Promise.all(
          Array.from({ length: n }, () =>
            h.call('GET', '/test-token', { token: t }).then((r) => r.status),
          ),
        )),
      );
    }
    expect(results.filter((s) => s === 200)).toHaveLength(600);
    expect(results.filter((s) => s === 429)).toHaveLength(1);
  });
});

describe('sandbox: versioning', () => {
  let h: Harness;
  afterEach(async () => h.close());

  it('adds X-API-Deprecation-Warning to every /v1 response, errors included', async () => {
    h = await startHarness({ deprecationDate: '2027-03-31' });
    const expected = 'v1 will be deprecated on 2027-03-31';
    const tokenReply = await h.call('POST', '/auth/token', {
      headers: { authorization: basic(ADMIN), 'content-type': 'application/x-www-form-urlencoded' },
      body: 'grant_type=client_credentials',
    });
    expect(tokenReply.headers.get('x-api-deprecation-warning')).toBe(expected);
    const t = tokenReply.json.access_token as string;
    for (const r of [
      await h.call('GET', '/products', { token: t }),
      await h.call('GET', '/products'),
      await h.call('GET', '/status', {
        token: t,
        query: { order_id: '3b241101-e2bb-4255-8caf-4136c566a962' },
      }),
      await h.call('POST', '/new-order', { token: t, json: { patient_sex: 'bad' } }),
      await h.call('GET', '/nowhere', { token: t }),
      await h.call('GET', '/openapi.json'),
    ]) {
      expect(r.headers.get('x-api-deprecation-warning')).toBe(expected);
    }
  });

  it('applies both to presigned storage PUTs, an operation of the v1 table', async () => {
    h = await startHarness({ deprecationDate: '2027-03-31' });
    const id = await newOrder(h);
    const url = await singlePutUrl(h, id);
    const put = await putObject(url, createMrBrainSeries({ series: { slices: 1 } })[0].bytes);
    expect(put.status).toBe(200);
    expect(put.headers.get('x-api-deprecation-warning')).toBe(
      'v1 will be deprecated on 2027-03-31',
    );
    const retired = await startHarness({ retired: true, signingKey: h.sandbox.options.signingKey });
    try {
      const gone = await putObject(
        url.replace(h.base.replace(/\/v1$/, ''), retired.base.replace(/\/v1$/, '')),
        Buffer.from('x'),
      );
      expect(gone.status).toBe(410);
      expect(Object.keys(gone.json).sort()).toEqual(['error', 'migration_guide']);
    } finally {
      await retired.close();
    }
  });

  it('sends no deprecation header when no date is configured', async () => {
    h = await startHarness();
    expect((await h.call('GET', '/products')).headers.get('x-api-deprecation-warning')).toBeNull();
  });

  it('answers every operation with 410 and {error, migration_guide} once retired', async () => {
    h = await startHarness({
      retired: true,
      migrationGuideUrl: 'https://docs.example.test/imaging/v2-migration',
      deprecationDate: '2026-01-31',
    });
    for (const [method, path] of [
      ['POST', '/auth/token'],
      ['GET', '/auth/token'],
      ['GET', '/test-token'],
      ['POST', '/new-order'],
      ['GET', '/status'],
      ['GET', '/results'],
      ['POST', '/upload/multipart/initiate'],
      ['PATCH', '/qc-bypass'],
      ['POST', '/agent/reports'],
      ['GET', '/nowhere'],
    ] as const) {
      const r = await h.call(method, path, { headers: { authorization: basic(ADMIN) } });
      expect([path, r.status]).toEqual([path, 410]);
      expect(Object.keys(r.json).sort()).toEqual(['error', 'migration_guide']);
      expect(r.json.migration_guide).toBe('https://docs.example.test/imaging/v2-migration');
      expect(r.json.error).toMatch(/v2/);
      expect(r.headers.get('x-api-deprecation-warning')).toBe(
        'v1 will be deprecated on 2026-01-31',
      );
    }
  });
});

describe('sandbox: fault injection', () => {
  let h: Harness;
  afterEach(async () => h.close());

  it('injects 500/503 at the configured share, repeatably with a seed', async () => {
    const run = async (): Promise<number[]> => {
      h = await startHarness({
        faults: { seed: 7, endpoints: { '/products': { error5xx: 0.5 } } },
      });
      const t = await h.token();
      const out: number[] = [];
      for (let i = 0; i < 40; i++)
        out.push((await h.call('GET', '/products', { token: t })).status);
      await h.close();
      return out;
    };
    const first = await run();
    const second = await run();
    expect(first).toEqual(second);
    const errors = first.filter((s) => s >= 500);
    expect(errors.length).toBeGreaterThan(8);
    expect(errors.length).toBeLessThan(32);
    expect(new Set(errors)).toEqual(new Set([500, 503]));
    h = await startHarness({ faults: { seed: 7, endpoints: { '/products': { error5xx: 1 } } } });
    const replies = await Promise.all(
      Array.from({ length: 10 }, async () =>
        h.call('GET', '/products', { token: await h.token() }),
      ),
    );
    for (const r of replies)
      expect(r.headers.get('retry-after')).toBe(r.status === 503 ? '1' : null);
    await h.close();
    expect(first.filter((s) => s === 200).length).toBe(40 - errors.length);
    h = await startHarness();
  });

  it('injects 429, drops connections and slows responses; "*" applies to every endpoint, specific keys override it', async () => {
    h = await startHarness({
      faults: {
        seed: 1,
        endpoints: {
          '*': { rate429: 1 },
          'GET /test-token': { rate429: 0, drop: 1 },
          '/list-orders': { rate429: 0, slowMs: 300, slowShare: 1 },
          'POST /auth/token': { rate429: 0 },
        },
      },
    });
    const t = await h.token();
    const limited = await h.call('GET', '/products', { token: t });
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('1');
    await expect(h.call('GET', '/test-token', { token: t })).rejects.toThrow();
    const started = Date.now();
    expect((await h.call('GET', '/list-orders', { token: t })).status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
  });

  it('drops the connection after the operation took effect (dropAfter), and can fault the storage PUTs', async () => {
    h = await startHarness({
      faults: { endpoints: { 'POST /new-order': { dropAfter: 1 }, storage: { error5xx: 1 } } },
    });
    const t = await h.token();
    await expect(
      h.call('POST', '/new-order', { token: t, json: { correlation_id: 'lost-answer' } }),
    ).rejects.toThrow();
    const list = (await h.call('GET', '/list-orders', { token: t })).json.orders as {
      order_id: string;
    }[];
    expect(list).toHaveLength(1); // the order exists although its answer was lost
    const url = await singlePutUrl(h, list[0].order_id);
    const put = await putObject(url, createMrBrainSeries({ series: { slices: 1 } })[0].bytes);
    expect([500, 503]).toContain(put.status);
  });

  it('is off by default', async () => {
    h = await startHarness();
    const t = await h.token();
    const statuses = await Promise.all(
      Array.from({ length: 50 }, () =>
        h.call('GET', '/products', { token: t }).then((r) => r.status),
      ),
    );
    expect(new Set(statuses)).toEqual(new Set([200]));
    expect(await newOrder(h)).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('sandbox: OpenAPI document', () => {
  it('describes every operation it serves at /v1/openapi.json', async () => {
    const h = await startHarness();
    try {
      const r = await h.call('GET', '/openapi.json');
      expect(r.status).toBe(200);
      expect(r.json.openapi).toBe('3.1.0');
      expect((r.json.servers as { url: string }[])[0].url).toBe(h.base);
      const paths = r.json.paths as Record<
        string,
        Record<string, { responses: Record<string, unknown>; deprecated?: boolean }>
      >;
      const operations = Object.entries(paths).flatMap(([p, ops]) =>
        Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`),
      );
      expect(operations).toEqual(
        expect.arrayContaining([
          'POST /auth/token',
          'GET /auth/token',
          'GET /test-token',
          'POST /new-order',
          'GET /new-order',
          'PATCH /add-metadata',
          'GET /metadata',
          'GET /upload/single-put',
          'GET /upload',
          'POST /upload/multipart/initiate',
          'POST /upload/multipart/presigned-urls',
          'POST /upload/multipart/complete',
          'POST /upload/multipart/abort',
          'GET /status',
          'GET /list-orders',
          'GET /results',
          'GET /failure-report',
          'GET /qc-report',
          'PATCH /qc-bypass',
          'PATCH /cancel-order',
          'POST /new-batch',
          'PATCH /associate-order-to-batch',
          'GET /report',
          'GET /products',
          'GET /recent-activity',
          'GET /reports',
          'POST /reports',
          'POST /agent/reports',
          'POST /agent/heartbeat',
        ]),
      );
      expect(paths['/new-order'].get.deprecated).toBe(true);
      expect(paths['/status'].get.responses).toHaveProperty('410');
    } finally {
      await h.close();
    }
  });
});

/** The subset of JSON Schema the sandbox's OpenAPI document uses. */
function schemaErrors(schema: Record<string, unknown>, value: unknown, at = '$'): string[] {
  const errors: string[] = [];
  const type = schema.type as string | string[] | undefined;
  const typeOf = (v: unknown): string =>
    v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v;
  if (type !== undefined) {
    const allowed = Array.isArray(type) ? type : [type];
    const actual = typeOf(value);
    if (!allowed.includes(actual) && !(actual === 'integer' && allowed.includes('number')))
      errors.push(`${at}: ${actual} is not ${allowed.join('|')}`);
  }
  if ('const' in schema && value !== schema.const)
    errors.push(`${at}: expected ${JSON.stringify(schema.const)}`);
  if (Array.isArray(schema.enum) && !schema.enum.includes(value)) errors.push(`${at}: not in enum`);
  if (typeOf(value) === 'object') {
    const v = value as Record<string, unknown>;
    for (const key of (schema.required as string[] | undefined) ?? [])
      if (!(key in v)) errors.push(`${at}.${key}: missing`);
    for (const [key, sub] of Object.entries(
      (schema.properties as Record<string, Record<string, unknown>>) ?? {},
    )) {
      if (key in v) errors.push(...schemaErrors(sub, v[key], `${at}.${key}`));
    }
  }
  if (Array.isArray(value) && schema.items)
    value.forEach((item, i) =>
      errors.push(...schemaErrors(schema.items as Record<string, unknown>, item, `${at}[${i}]`)),
    );
  return errors;
}

describe('sandbox: responses match its OpenAPI document', () => {
  it('validates the JSON answers of a full order flow against the published schemas', async () => {
    const h = await startHarness();
    try {
      const doc = (await h.call('GET', '/openapi.json')).json as {
        paths: Record<
          string,
          Record<
            string,
            {
              responses: Record<
                string,
                { content: Record<string, { schema: Record<string, unknown> }> }
              >;
            }
          >
        >;
      };
      const t = await h.token();
      const check = async (
        method: string,
        path: string,
        init: Parameters<Harness['call']>[2] = {},
      ): Promise<Record<string, unknown>> => {
        const r = await h.call(method, path, { token: t, ...init });
        const responses = doc.paths[path][method.toLowerCase()].responses;
        const schema = responses[String(r.status)]?.content['application/json']?.schema;
        expect([method, path, r.status, schema !== undefined]).toEqual([
          method,
          path,
          r.status,
          true,
        ]);
        expect([method, path, schemaErrors(schema, r.json)]).toEqual([method, path, []]);
        return r.json;
      };
      await check('GET', '/test-token');
      const { order_id: orderId } = await check('POST', '/new-order', {
        json: { patient_id: 'OAS-1', sandbox_outcome: 'qc_failed' },
      });
      const id = orderId as string;
      await check('PATCH', '/add-metadata', {
        query: { order_id: id },
        json: { priority: 'routine' },
      });
      await check('GET', '/metadata', { query: { order_id: id } });
      const { url } = await check('GET', '/upload/single-put', { query: { order_id: id } });
      await check('GET', '/upload', { query: { order_id: id } });
      const init = await check('POST', '/upload/multipart/initiate', { json: { order_id: id } });
      await check('POST', '/upload/multipart/presigned-urls', {
        json: { upload_id: init.upload_id, parts: 2 },
      });
      await check('POST', '/upload/multipart/abort', { json: { upload_id: init.upload_id } });
      expect(
        (await putObject(url as string, createMrBrainSeries({ series: { slices: 1 } })[0].bytes))
          .status,
      ).toBe(200);
      await h.sandbox.advance(MINUTE);
      await check('GET', '/status', { query: { order_id: id } });
      await check('GET', '/list-orders');
      await check('GET', '/qc-report', { query: { order_id: id, report_type: 'results' } });
      await check('POST', '/agent/heartbeat', { json: { agent_id: 'oas' } });
      await check('PATCH', '/qc-bypass', { query: { order_id: id } });
      await check('POST', '/agent/heartbeat', { json: { agent_id: 'oas' } });
      await check('POST', '/agent/reports', {
        json: {
          agent_id: 'oas',
          reports: [{ order_id: id, kind: 'failure', content: { reason: 'x' } }],
        },
      });
      const batch = await check('POST', '/new-batch', { json: { products: ['neuro-volumetry'] } });
      await check('PATCH', '/associate-order-to-batch', {
        query: { order_id: id, batch_id: batch.batch_id as string },
      });
      await check('GET', '/products');
      await check('GET', '/recent-activity');
      const reports = await check('GET', '/reports', { query: { organizationId: 'org-a' } });
      await check('POST', '/reports', {
        query: { organizationId: 'org-a' },
        json: { report_ids: (reports.reports as { report_id: string }[]).map((r) => r.report_id) },
      });
      const other = await newOrder(h);
      await check('PATCH', '/cancel-order', { query: { order_id: other } });
      await check('GET', '/status', {
        query: { order_id: '3b241101-e2bb-4255-8caf-4136c566a962' },
      });
      await check('POST', '/new-order', { json: { patient_sex: 'Z' } });
    } finally {
      await h.close();
    }
  });
});

describe('sandbox: default per-IP limit', () => {
  it('answers the 2,001st request of a minute from one IP with 429, across endpoints', async () => {
    const h = await startHarness();
    try {
      const t = await h.token(); // request 1
      const paths = ['/products', '/list-orders', '/test-token', '/recent-activity'];
      const statuses: number[] = [];
      // 1,999 more requests, spread so that no endpoint reaches its own 600 limit.
      for (let sent = 0; sent < 1999; sent += 50) {
        const n = Math.min(50, 1999 - sent);
        statuses.push(
          ...(await Promise.all(
            Array.from({ length: n }, (_, i) =>
              h.call('GET', paths[(sent + i) % 4], { token: t }).then((r) => r.status),
            ),
          )),
        );
      }
      expect(statuses.filter((s) => s !== 200)).toEqual([]);
      const over = await h.call('GET', '/metadata', {
        token: t,
        query: { order_id: '3b241101-e2bb-4255-8caf-4136c566a962' },
      });
      expect(over.status).toBe(429);
      expect(over.json.message).toMatch(/2000 requests per minute per IP/);
    } finally {
      await h.close();
    }
  });
});

describe('sandbox: connections (a hostile local client cannot exhaust the process)', () => {
  let h: Harness;
  const sockets: Socket[] = [];
  afterEach(async () => {
    for (const s of sockets.splice(0)) s.destroy();
    await h.close();
  });

  function open(port: number): Promise<{ socket: Socket; closed: () => boolean }> {
    return new Promise((resolve) => {
      let closed = false;
      const socket = connect(port, '127.0.0.1');
      sockets.push(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => {
        closed = true;
        resolve({ socket, closed: () => closed });
      });
      socket.once('connect', () => resolve({ socket, closed: () => closed }));
    });
  }

  it('a body refused before it is read (declared 10 GB, unsigned storage PUT) is answered and its connection closed, not drained', async () => {
    // Before: the 413 / 403 went out and the connection stayed open reading and dropping
    // whatever the client went on sending, for as long as it liked (Node's request timeout).
    h = await startHarness();
    const heads = [
      [
        'POST /v1/auth/token HTTP/1.1',
        'Host: sandbox',
        `Authorization: ${basic(ADMIN)}`,
        'Content-Type: application/x-www-form-urlencoded',
        'Content-Length: 10000000000',
      ],
      ['PUT /storage/not-signed HTTP/1.1', 'Host: sandbox', 'Content-Length: 10000000000'],
    ];
    for (const head of heads) {
      const { socket } = await open(h.sandbox.port);
      let answer = '';
      let closed = false;
      socket.on('data', (c: Buffer) => (answer += c.toString('latin1')));
      socket.on('close', () => (closed = true));
      socket.write(`${head.join('\r\n')}\r\n\r\ngrant_type=client_credentials`);
      const timer = setInterval(() => !closed && socket.write(Buffer.alloc(16 * 1024, 0x61)), 50);
      const started = Date.now();
      while (!closed && Date.now() - started < 5_000) await new Promise((r) => setTimeout(r, 50));
      clearInterval(timer);
      expect(answer).toMatch(/^HTTP\/1\.1 4(13|03) /);
      expect(closed).toBe(true);
    }
  });

  it('holds at most maxConnections; silent ones give way to a real client and are closed once idle', async () => {
    // Before: 300 silent connections all stayed open for ever (Node closes none that never
    // sends a byte), each a file handle of the adapter's own process when in-process.
    h = await startHarness({ maxConnections: 50, idleTimeoutSeconds: 2 });
    const silent = [];
    for (let i = 0; i < 300; i++) silent.push(await open(h.sandbox.port));
    await new Promise((r) => setTimeout(r, 200));
    expect(silent.filter((s) => !s.closed()).length).toBeLessThanOrEqual(50);
    // A real client still gets in (a token: a form POST and its answer).
    expect(await h.token()).toEqual(expect.any(String));
    const started = Date.now();
    while (silent.some((s) => !s.closed()) && Date.now() - started < 8_000)
      await new Promise((r) => setTimeout(r, 100));
    expect(silent.filter((s) => !s.closed())).toHaveLength(0);
  });

  it('a kept-alive connection is promised no longer than the sandbox keeps it: Keep-Alive names the idle timeout', async () => {
    // Before: every answer said timeout=65 (Node's keepAliveTimeout, set on its own) while the
    // connection guard closed an idle connection after idleTimeoutSeconds (2 here): a client
    // believing the header reused a connection already being closed.
    h = await startHarness({ idleTimeoutSeconds: 2 });
    const { socket } = await open(h.sandbox.port);
    let answer = '';
    socket.on('data', (c: Buffer) => (answer += c.toString('latin1')));
    socket.write('GET /v1/no-such-path HTTP/1.1\r\nHost: sandbox\r\n\r\n');
    const started = Date.now();
    while (!/\r\n\r\n/.test(answer) && Date.now() - started < 5_000)
      await new Promise((r) => setTimeout(r, 20));
    expect(answer).toMatch(/\r\nKeep-Alive: timeout=2\r\n/i);
  });
});
