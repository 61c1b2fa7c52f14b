import { connect } from 'node:net';
import { newOrder, startHarness, type Harness } from './sandbox-test-kit';

/** Sends raw bytes over a socket and returns the status line's code (for requests fetch cannot make). */
function rawRequest(port: number, text: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(text));
    let data = '';
    socket.on('data', (c: Buffer) => {
      data += c.toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(data);
      if (m) {
        resolve(Number(m[1]));
        socket.destroy();
      }
    });
    socket.on('error', reject);
    socket.on('close', () =>
      resolve(/^HTTP\/1\.1 (\d{3})/.exec(data) ? Number(/^HTTP\/1\.1 (\d{3})/.exec(data)![1]) : 0),
    );
  });
}

describe('sandbox: bad input gets a specific 4xx, never a 500', () => {
  let h: Harness;
  let t: string;
  let order: string;
  let uploadId: string;
  beforeAll(async () => {
    h = await startHarness();
    t = await h.token();
    order = await newOrder(h);
    uploadId = (
      await h.call('POST', '/upload/multipart/initiate', { token: t, json: { order_id: order } })
    ).json.upload_id as string;
  });
  afterAll(async () => h.close());

  const jsonEndpoints: [string, string, Record<string, string>][] = [
    ['POST', '/new-order', {}],
    ['PATCH', '/add-metadata', { order_id: '' }],
    ['POST', '/upload/multipart/initiate', {}],
    ['POST', '/upload/multipart/presigned-urls', {}],
    ['POST', '/upload/multipart/complete', {}],
    ['POST', '/upload/multipart/abort', {}],
    ['PATCH', '/qc-bypass', { order_id: '' }],
    ['POST', '/new-batch', {}],
    ['POST', '/reports', { organizationId: 'org-a' }],
    ['POST', '/agent/heartbeat', {}],
    ['POST', '/agent/reports', {}],
  ];

  const bodies: unknown[] = [
    [],
    42,
    'text',
    null,
    { order_id: 7 },
    { upload_id: 'x' },
    { upload_id: null, parts: 'many' },
    { parts: [{}] },
    { reason: ['a'] },
    { products: 'neuro-volumetry' },
    { report_ids: [1, 2] },
    { agent_id: '../../etc', reports: 'x' },
    { patient_id: 'x'.repeat(2000) },
  ];

  it('answers every odd JSON body on every JSON endpoint with a 4xx and an error code', async () => {
    for (const [method, path, q] of jsonEndpoints) {
      const query = Object.fromEntries(
        Object.entries(q).map(([k, v]) => [k, v === '' ? order : v]),
      );
      for (const body of bodies) {
        const r = await h.call(method, path, {
          token: t,
          query,
          body: JSON.stringify(body),
          headers: { 'content-type': 'application/json' },
        });
        if (r.status >= 200 && r.status < 300) continue; // some bodies are acceptable somewhere (e.g. new-batch {})
        expect([method, path, JSON.stringify(body), r.status < 500]).toEqual([
          method,
          path,
          JSON.stringify(body),
          true,
        ]);
        expect(r.status).toBeGreaterThanOrEqual(400);
        expect(typeof r.json.error).toBe('string');
        expect(typeof r.json.message).toBe('string');
      }
      const malformed = await h.call(method, path, {
        token: t,
        query,
        body: '{"a":',
        headers: { 'content-type': 'application/json' },
      });
      expect([path, malformed.status]).toEqual([path, 400]);
      const xml = await h.call(method, path, {
        token: t,
        query,
        body: '<a/>',
        headers: { 'content-type': 'application/xml' },
      });
      expect([path, xml.status]).toEqual([path, 415]);
    }
  });

  it('answers an oversized JSON body with 413', async () => {
    const r = await h.call('POST', '/new-order', {
      token: t,
      body: JSON.stringify({ note: 'x'.repeat(1100 * 1024) }),
      headers: { 'content-type': 'application/json' },
    });
    expect(r.status).toBe(413);
  });

  it('answers odd query parameters with 4xx', async () => {
    const cases: [string, string, Record<string, string>][] = [
      ['GET', '/status', { order_id: '%%%' }],
      ['GET', '/status', { study_uid: '' }],
      ['GET', '/results', { order_id: order, report_type: '' }],
      ['GET', '/results', { order_id: 'ORDER' }],
      ['GET', '/qc-report', { order_id: order, report_type: 'results', round: 'LATEST' }],
      ['GET', '/report', { study_group: order, report_type: 'PDF' }],
      ['GET', '/report', { report_type: 'PDF' }],
      ['PATCH', '/associate-order-to-batch', { order_id: order }],
      ['PATCH', '/associate-order-to-batch', { order_id: order, batch_id: 'b' }],
      ['GET', '/upload/single-put', {}],
      ['GET', '/upload', { order_id: '00000000-0000-4000-8000-000000000000' }],
      ['GET', '/new-order', { patient_sex: 'Q' }],
      ['GET', '/reports', { organizationId: '' }],
    ];
    for (const [method, path, query] of cases) {
      const r = await h.call(method, path, { token: t, query });
      expect([path, JSON.stringify(query), r.status >= 400 && r.status < 500]).toEqual([
        path,
        JSON.stringify(query),
        true,
      ]);
    }
  });

  it('answers malformed presigned URLs and storage paths with 4xx', async () => {
    const origin = h.base.replace(/\/v1$/, '');
    for (const path of [
      '/storage/',
      '/storage/single/x/y',
      `/storage/part/${uploadId}/101?X-Sandbox-Expires=1&X-Sandbox-Signature=zz`,
      `/storage/part/${uploadId}/1?X-Sandbox-Expires=99999999999&X-Sandbox-Signature=${'0'.repeat(64)}`,
    ]) {
      const r = await fetch(`${origin}${path}`, { method: 'PUT', body: 'x' });
      expect([path, r.status]).toEqual([path, 403]);
    }
  });

  it('answers raw protocol oddities without a 500', async () => {
    const port = h.sandbox.port;
    expect(
      await rawRequest(port, 'GET http://[ HTTP/1.1\r\nHost: x\r\n\r\n'),
    ).toBeGreaterThanOrEqual(400);
    expect(
      await rawRequest(
        port,
        'GET /v1/products HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n\r\n',
      ),
    ).toBe(401);
    expect(
      await rawRequest(
        port,
        `POST /v1/auth/token HTTP/1.1\r\nHost: x\r\nAuthorization: Basic !!!\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 29\r\n\r\ngrant_type=client_credentials`,
      ),
    ).toBe(401);
    const status = await rawRequest(
      port,
      `POST /v1/new-order HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${t}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
    );
    expect(status).toBe(400);
  });
});
