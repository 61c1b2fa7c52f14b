import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { PassThrough } from 'node:stream';
import { gzipSync } from 'node:zlib';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { chestCtRequest } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/** The front door's request line and headers, sent as they are over a raw socket. */
async function raw(url: string, request: Buffer | string): Promise<string> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  let answer = '';
  let closed = false;
  socket.on('data', (c: Buffer) => (answer += c.toString('latin1')));
  socket.on('close', () => (closed = true));
  socket.on('error', () => undefined);
  await new Promise((r) => socket.once('connect', r));
  socket.write(request);
  const started = Date.now();
  while (!closed && Date.now() - started < 5_000) await sleep(20);
  socket.destroy();
  return answer;
}

/** A ServiceRequest whose patient travels with it (no EHR to read it from). */
function orderBody(placer: string): Buffer {
  return Buffer.from(
    JSON.stringify(
      chestCtRequest(placer, {
        contained: [
          {
            resourceType: 'Patient',
            id: 'pat',
            identifier: [{ system: 'urn:oid:2.16.840.1.113883.3.999.2', value: 'MRN-4711' }],
            name: [{ family: 'Doe', given: ['Jane'] }],
            birthDate: '1970-01-01',
            gender: 'female',
          },
        ],
        subject: { reference: '#pat' },
        requester: undefined,
        performer: undefined,
        encounter: undefined,
        reasonReference: undefined,
        supportingInfo: undefined,
        specimen: undefined,
        insurance: undefined,
      }),
    ),
  );
}

function post(version: string, headers: string[], body: Buffer): Buffer {
  return Buffer.concat([
    Buffer.from(
      [
        `POST /fhir/ServiceRequest ${version}`,
        ...headers,
        `Authorization: Bearer ${TEST_TOKENS.sender}`,
        'Content-Type: application/fhir+json',
        'Connection: close',
        `Content-Length: ${body.length}`,
        '',
        '',
      ].join('\r\n'),
    ),
    body,
  ]);
}

describe('HTTP front door: request line and headers as sent', () => {
  let adapter: TestAdapter;

  beforeAll(async () => {
    adapter = await startTestAdapter({ DATA_DIR_MIN_FREE_BYTES: '1' });
  });
  afterAll(async () => {
    await adapter?.close();
  });

  it('a request line and headers over the limit are 431 in words (problem JSON, or an OperationOutcome under /fhir)', async () => {
    // An audit search takes an identifier of 4,096 characters; percent-encoded, 4,096 `Ä` are
    // 24,576 bytes. Before: Node's bare 431 with no body and no content type (a blank page).
    const accession = encodeURIComponent('Ä'.repeat(4096));
    const audit = await raw(
      adapter.httpUrl,
      `GET /api/audit/orders?accession=${accession} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${TEST_TOKENS.analyst}\r\n\r\n`,
    );
    expect(audit).toMatch(/^HTTP\/1\.1 431 /);
    expect(audit).toMatch(/^Content-Type: application\/problem\+json/im);
    expect(audit).toMatch(/^Connection: close/im);
    const problem = JSON.parse(audit.slice(audit.indexOf('\r\n\r\n') + 4));
    expect(problem).toMatchObject({
      status: 431,
      title: 'request_header_fields_too_large',
      detail: expect.stringContaining('16384 bytes'),
    });
    const fhir = await raw(
      adapter.httpUrl,
      `GET /fhir/ServiceRequest?identifier=${'x'.repeat(20_000)} HTTP/1.1\r\nHost: a\r\n\r\n`,
    );
    expect(fhir).toMatch(/^HTTP\/1\.1 431 /);
    expect(JSON.parse(fhir.slice(fhir.indexOf('\r\n\r\n') + 4))).toMatchObject({
      resourceType: 'OperationOutcome',
      issue: [{ code: 'too-long', diagnostics: expect.stringContaining('16384 bytes') }],
    });
    // On a kept-alive connection whose first request was answered, the second, too long, is
    // answered too (before: the connection was closed without a word, its bytes written > 0).
    const { hostname, port } = new URL(adapter.httpUrl);
    const socket = connect(Number(port), hostname);
    let kept = '';
    socket.on('data', (c: Buffer) => (kept += c.toString('latin1')));
    socket.on('error', () => undefined);
    await new Promise((r) => socket.once('connect', r));
    socket.write('GET /health HTTP/1.1\r\nHost: a\r\n\r\n');
    for (let i = 0; i < 250 && !/^HTTP\/1\.1 200 [\s\S]*\r\n\r\n[\s\S]*\}$/.test(kept); i++)
      await sleep(20);
    expect(kept).toMatch(/^HTTP\/1\.1 200 /);
    socket.write(
      `GET /api/audit/orders?accession=${accession} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${TEST_TOKENS.analyst}\r\n\r\n`,
    );
    const closed = new Promise((r) => socket.once('close', r));
    await Promise.race([closed, sleep(5_000)]);
    socket.destroy();
    expect(kept).toMatch(/\}HTTP\/1\.1 431 [\s\S]*"request_header_fields_too_large"/);
    // anything else the parser refuses is answered as before
    expect(await raw(adapter.httpUrl, 'NOT HTTP AT ALL\r\n\r\n')).toMatch(
      /^HTTP\/1\.1 400 Bad Request\r\nConnection: close\r\n\r\n$/,
    );
  });

  it('a Host that is no host[:port] is 400 (RFC 9112 §3.2), never copied into Location', async () => {
    // Before: 201 with Location: http://evil.example:1/x?/fhir/ServiceRequest/… (the path
    // pushed into a query of the caller's choosing).
    for (const host of ['evil.example:1/x?', 'a b', 'evil.example@x', 'x:99999999']) {
      const answer = await raw(
        adapter.httpUrl,
        post('HTTP/1.1', [`Host: ${host}`], orderBody(`HOST-${host.length}`)),
      );
      expect({ host, status: answer.slice(0, 12) }).toEqual({ host, status: 'HTTP/1.1 400' });
      expect(answer).not.toMatch(/^Location:/im);
      // answered as the FHIR front door answers: an OperationOutcome
      expect(answer).toMatch(/^Content-Type: application\/fhir\+json/im);
      expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toMatchObject({
        resourceType: 'OperationOutcome',
        issue: [{ code: 'invalid', diagnostics: expect.stringContaining('Host') }],
      });
    }
    // Two Host lines: which one a proxy in front routed by is unknown (before: 201 under the first).
    const twice = await raw(
      adapter.httpUrl,
      post('HTTP/1.1', ['Host: adapter.example', 'Host: evil.example'], orderBody('HOST-TWICE')),
    );
    expect(twice).toMatch(/^HTTP\/1\.1 400 /);
    expect(twice).toContain('more than one Host header');
    const ok = await raw(
      adapter.httpUrl,
      post('HTTP/1.1', ['Host: [::1]:8080'], orderBody('HOST-OK')),
    );
    expect(ok).toMatch(/^HTTP\/1\.1 201 /);
    // a well-formed Host is not used either: links name FHIR_PUBLIC_BASE_URL or, unset, the
    // address and port the connection reached (fhir-public-base.test.ts)
    const { port } = new URL(adapter.httpUrl);
    expect(ok).toMatch(
      new RegExp(
        `^Location: http://127\\.0\\.0\\.1:${port}/fhir/ServiceRequest/[\\w-]+/_history/1\r$`,
        'm',
      ),
    );
  });

  it('a FHIR path in other letter case (routed case-insensitively) is read as FHIR, its application/json body not taken by the /api parser', async () => {
    // Before: POST /FHIR/ServiceRequest with Content-Type application/json had its body eaten
    // by the /api JSON parser (the front door's /fhir test was case-sensitive, the routing is
    // not) and was answered 400 "the body is empty", the order lost.
    const body = orderBody('CASE-1');
    const answer = await raw(
      adapter.httpUrl,
      Buffer.concat([
        Buffer.from(
          [
            'POST /FHIR/ServiceRequest HTTP/1.1',
            'Host: adapter',
            `Authorization: Bearer ${TEST_TOKENS.sender}`,
            'Content-Type: application/json',
            'Connection: close',
            `Content-Length: ${body.length}`,
            '',
            '',
          ].join('\r\n'),
        ),
        body,
      ]),
    );
    expect(answer).toMatch(/^HTTP\/1\.1 201 /);
  });

  it('HTTP/1.0 without Host: Location and the CapabilityStatement name the address the request came to', async () => {
    // Before: Location: http://undefined/fhir/ServiceRequest/…, implementation.url http://undefined.
    const created = await raw(adapter.httpUrl, post('HTTP/1.0', [], orderBody('HTTP10-1')));
    expect(created).toMatch(/^HTTP\/1\.1 201 /);
    const location = /^Location: (.*)\r$/m.exec(created)?.[1];
    expect(location).toMatch(
      new RegExp(
        `^${adapter.httpUrl.replace(/\./g, '\\.')}/fhir/ServiceRequest/[\\w-]+/_history/1$`,
      ),
    );
    const metadata = await raw(adapter.httpUrl, 'GET /fhir/metadata HTTP/1.0\r\n\r\n');
    expect(metadata).toMatch(/^HTTP\/1\.1 200 /);
    expect(metadata).not.toContain('undefined');
    expect(metadata).toContain(`${adapter.httpUrl}/fhir`);
  });

  it('a transfer coding other than chunked is 501, not read as the body (RFC 9112 §6.1)', async () => {
    // Before: Transfer-Encoding: gzip, chunked had its gzip bytes read as the JSON itself (400
    // unparseable), and the same for STOW-RS and /api.
    const body = gzipSync(orderBody('TE-GZIP-1'));
    const chunked = Buffer.concat([
      Buffer.from(`${body.length.toString(16)}\r\n`),
      body,
      Buffer.from('\r\n0\r\n\r\n'),
    ]);
    const head = (path: string, type: string, token: string) =>
      [
        `POST ${path} HTTP/1.1`,
        'Host: adapter',
        `Authorization: Bearer ${token}`,
        `Content-Type: ${type}`,
        'Transfer-Encoding: gzip, chunked',
        '',
        '',
      ].join('\r\n');
    const fhir = await raw(
      adapter.httpUrl,
      Buffer.concat([
        Buffer.from(head('/fhir/ServiceRequest', 'application/fhir+json', TEST_TOKENS.sender)),
        chunked,
      ]),
    );
    expect(fhir).toMatch(/^HTTP\/1\.1 501 /);
    expect(JSON.parse(fhir.slice(fhir.indexOf('\r\n\r\n') + 4))).toMatchObject({
      resourceType: 'OperationOutcome',
      issue: [{ code: 'not-supported', diagnostics: expect.stringContaining('gzip') }],
    });
    for (const [path, type, token] of [
      [
        '/dicomweb/studies',
        'multipart/related; type="application/dicom"; boundary=b',
        TEST_TOKENS.sender,
      ],
      ['/api/orders/poll-cycle', 'application/json', TEST_TOKENS.admin],
    ] as const) {
      const answer = await raw(
        adapter.httpUrl,
        Buffer.concat([Buffer.from(head(path, type, token)), chunked]),
      );
      expect({ path, status: answer.slice(0, 12) }).toEqual({ path, status: 'HTTP/1.1 501' });
      expect(answer).toMatch(/^Content-Type: application\/problem\+json/im);
    }
  });

  it('an /api body that is not what its Content-Encoding says is 400 in words, not a 500', async () => {
    // Before: a JSON body sent with `Content-Encoding: gzip` (a client that sets the header and
    // forgets to compress, or compresses with another coding) was a 500 "unexpected error",
    // logged as our failure, and retried by the client as one.
    const cancel = `/api/orders/0190c0de-0000-7000-8000-00000000c0de/cancel`;
    const plain = Buffer.from(JSON.stringify({ reason: 'ordered twice by the ward' }));
    for (const coding of ['gzip', 'deflate', 'br']) {
      const answer = await fetch(`${adapter.httpUrl}${cancel}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/json',
          'content-encoding': coding,
        },
        body: plain,
      });
      expect({ coding, status: answer.status }).toEqual({ coding, status: 400 });
      expect(answer.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      const problem = (await answer.json()) as { title: string; detail: string };
      expect(problem.title).toBe('bad_request');
      expect(problem.detail).toContain(`Content-Encoding ${coding}`);
    }
    // The same body compressed as it says reaches the route (no such order: 404).
    const gzipped = await fetch(`${adapter.httpUrl}${cancel}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/json',
        'content-encoding': 'gzip',
      },
      body: gzipSync(plain),
    });
    expect(gzipped.status).toBe(404);
  });

  it('an /api JSON body nested deeper than 100 levels is refused in words (413, as a FHIR body is), not a 500', async () => {
    // Before: express.json parsed any depth (1 MB of brackets is 500,000 levels); the dry run
    // then serialised the value and overflowed the stack: 500 "unexpected error", logged as ours.
    const bundle = JSON.parse(
      readFileSync(
        join(__dirname, '..', 'fixtures', 'fhir', 'us-core-chest-ct-transaction.json'),
        'utf8',
      ),
    ) as { entry: unknown[] };
    // Written as text: JSON.stringify itself overflows at such a depth.
    const deep = JSON.stringify({ ...bundle, entry: null }).replace(
      '"entry":null',
      `"entry":${'['.repeat(20_000)}${JSON.stringify(bundle.entry)}${']'.repeat(20_000)}`,
    );
    for (const [path, body, status] of [
      ['/api/mappings/dry-run', `{"fhir":${deep}}`, 413],
      // the resource pasted as text (the audit page's form sends it so): 400, a field's value
      ['/api/mappings/dry-run', JSON.stringify({ fhir: deep }), 400],
      ['/api/orders/0190c0de-0000-7000-8000-00000000c0de/cancel', `{"reason":${deep}}`, 413],
    ] as const) {
      const answer = await fetch(`${adapter.httpUrl}${path}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.admin}`,
          'content-type': 'application/json',
        },
        body,
      });
      expect({ path, status: answer.status }).toEqual({ path, status });
      const problem = (await answer.json()) as { detail: string };
      expect(problem.detail).toContain('deeper than 100 levels');
    }
    // The Bundle as it is still dry-runs.
    const plain = await fetch(`${adapter.httpUrl}/api/mappings/dry-run`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_TOKENS.admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ fhir: bundle }),
    });
    expect(plain.status).toBe(200);
  });

  it('a request refused before its body is read closes its connection: the rest of the body is not read and dropped', async () => {
    // Before: a 401 to a client with no credential declaring a 10 GB STOW-RS push (or an endless
    // chunked one) left the connection open, and Node read and dropped every byte that followed:
    // four such clients kept the process reading about 150 MB/s each for nobody.
    const { hostname, port } = new URL(adapter.httpUrl);
    for (const [path, type, token] of [
      ['/dicomweb/studies', 'multipart/related; type="application/dicom"; boundary=b', undefined],
      ['/fhir/ServiceRequest', 'application/fhir+json', undefined],
      [
        '/dicomweb/studies',
        'multipart/related; type="application/dicom"; boundary=b',
        TEST_TOKENS.analyst,
      ],
    ] as const) {
      const socket = connect(Number(port), hostname);
      socket.on('error', () => undefined);
      let answer = '';
      let closed = false;
      socket.on('data', (c: Buffer) => (answer += c.toString('latin1')));
      socket.on('close', () => (closed = true));
      await new Promise((r) => socket.once('connect', r));
      socket.write(
        [
          `POST ${path} HTTP/1.1`,
          'Host: adapter',
          ...(token ? [`Authorization: Bearer ${token}`] : []),
          `Content-Type: ${type}`,
          'Content-Length: 10000000000',
          '',
          '',
        ].join('\r\n'),
      );
      const chunk = Buffer.alloc(64 * 1024, 0x41);
      let sent = 0;
      const started = Date.now();
      while (!closed && Date.now() - started < 5_000) {
        if (!socket.write(chunk))
          await new Promise((r) => {
            socket.once('drain', r);
            socket.once('close', r);
          });
        sent += chunk.length;
      }
      socket.destroy();
      expect({ path, token: token ?? null, status: answer.slice(0, 12) }).toEqual({
        path,
        token: token ?? null,
        status: token ? 'HTTP/1.1 403' : 'HTTP/1.1 401',
      });
      expect({ path, closed, lessThan64MiB: sent < 64 * 1024 * 1024 }).toEqual({
        path,
        closed: true,
        lessThan64MiB: true,
      });
    }
    // A refusal whose small body came whole keeps the connection (keep-alive as before).
    const kept = await raw(
      adapter.httpUrl,
      [
        'POST /fhir/ServiceRequest HTTP/1.1',
        'Host: adapter',
        'Content-Type: application/fhir+json',
        'Content-Length: 2',
        '',
        '{}GET /health HTTP/1.1',
        'Host: adapter',
        'Connection: close',
        '',
        '',
      ].join('\r\n'),
    );
    expect(kept).toMatch(/^HTTP\/1\.1 401 [\s\S]*HTTP\/1\.1 200 /);
  });

  it('an /api body sent chunked without end is 413 once 64 MiB past the limit, its connection closed', async () => {
    // Before: with no Content-Length to judge, the JSON parser stopped at its 1 MiB limit and
    // then read and dropped the rest before answering: an endless chunked body (no credential
    // needed, the parser runs before authentication) was read for ever and never answered.
    const { hostname, port } = new URL(adapter.httpUrl);
    const socket = connect(Number(port), hostname);
    socket.on('error', () => undefined);
    let answer = '';
    let closed = false;
    socket.on('data', (c: Buffer) => (answer += c.toString('latin1')));
    socket.on('close', () => (closed = true));
    await new Promise((r) => socket.once('connect', r));
    socket.write(
      [
        'POST /api/orders/poll-cycle HTTP/1.1',
        'Host: adapter',
        'Content-Type: application/json',
        'Transfer-Encoding: chunked',
        '',
        '',
      ].join('\r\n'),
    );
    const data = Buffer.alloc(1024 * 1024, 0x20);
    const chunk = Buffer.concat([
      Buffer.from(`${data.length.toString(16)}\r\n`),
      data,
      Buffer.from('\r\n'),
    ]);
    let sent = 0;
    const started = Date.now();
    while (!closed && Date.now() - started < 60_000) {
      if (!socket.write(chunk))
        await new Promise((r) => {
          socket.once('drain', r);
          socket.once('close', r);
        });
      sent += data.length;
    }
    socket.destroy();
    expect(answer.slice(0, 12)).toBe('HTTP/1.1 413');
    expect(answer).toMatch(/^Connection: close/im);
    expect(closed).toBe(true);
    expect(sent).toBeLessThan(96 * 1024 * 1024);
  });

  it("the audit page's form posts are bounded as /api's: an endless or 10 GB body is 413, its connection closed", async () => {
    // Before: the sign-in form's parser (before authentication; limit 16 KiB) and the dry-run
    // form's read and dropped whatever followed their limit before answering: a 10 GB declared
    // body was read whole, an endless chunked one for ever, never answered.
    const { hostname, port } = new URL(adapter.httpUrl);
    // Each parser's limit (the dry run's: 3 × MLLP_MAX_MESSAGE_BYTES), 64 MiB past it, and
    // what the two sockets' buffers hold.
    const MiB = 1024 * 1024;
    for (const [path, framing, most] of [
      ['/audit/session', 'Transfer-Encoding: chunked', 64 * MiB + 16 * MiB],
      ['/audit/dry-run', 'Transfer-Encoding: chunked', 30 * MiB + 64 * MiB + 16 * MiB],
      ['/audit/session', 'Content-Length: 10000000000', 64 * MiB + 16 * MiB],
    ] as const) {
      const socket = connect(Number(port), hostname);
      socket.on('error', () => undefined);
      let answer = '';
      let closed = false;
      socket.on('data', (c: Buffer) => (answer += c.toString('latin1')));
      socket.on('close', () => (closed = true));
      await new Promise((r) => socket.once('connect', r));
      socket.write(
        [
          `POST ${path} HTTP/1.1`,
          'Host: adapter',
          'Content-Type: application/x-www-form-urlencoded',
          framing,
          '',
          '',
        ].join('\r\n'),
      );
      const data = Buffer.alloc(1024 * 1024, 0x61);
      const chunked = framing.startsWith('Transfer');
      const chunk = chunked
        ? Buffer.concat([Buffer.from(`${data.length.toString(16)}\r\n`), data, Buffer.from('\r\n')])
        : data;
      let sent = 0;
      const started = Date.now();
      while (!closed && Date.now() - started < 60_000) {
        if (!socket.write(chunk))
          await new Promise((r) => {
            socket.once('drain', r);
            socket.once('close', r);
          });
        sent += data.length;
      }
      socket.destroy();
      // The 413 is written before the close; a client still sending may see the close (a reset
      // for the bytes it sent after) before it reads the answer, as with any server.
      expect({ path, framing, closed, answered: answer === '' ? '' : answer.slice(0, 12) }).toEqual(
        {
          path,
          framing,
          closed: true,
          answered: expect.stringMatching(/^(HTTP\/1\.1 413|)$/),
        },
      );
      expect({ path, framing, bounded: sent < most }).toEqual({ path, framing, bounded: true });
    }
  });
});

describe('HTTP front door: a path that is no UTF-8 once decoded', () => {
  let adapter: TestAdapter;

  beforeAll(async () => {
    adapter = await startTestAdapter({ DATA_DIR_MIN_FREE_BYTES: '1' });
  });
  afterAll(async () => {
    await adapter?.close();
  });

  const get = (path: string, token: string, accept = '*/*') =>
    fetch(`${adapter.httpUrl}${path}`, {
      headers: { authorization: `Bearer ${token}`, accept },
    });

  it('is a 400 in each front door’s own words, naming the bad escape', async () => {
    // Before: the router's "Failed to decode param '%ff'", problem JSON titled BadRequest on
    // every door, /fhir included (a FHIR client reads an OperationOutcome).
    const fhir = await get('/fhir/ServiceRequest/%ff', TEST_TOKENS.sender);
    expect(fhir.status).toBe(400);
    expect(fhir.headers.get('content-type')).toMatch(/^application\/fhir\+json/);
    expect(await fhir.json()).toMatchObject({
      resourceType: 'OperationOutcome',
      issue: [{ severity: 'error', code: 'invalid', diagnostics: expect.stringContaining('%ff') }],
    });
    // a Latin-1 ö in an audit link, as a spreadsheet's hyperlink writes it
    const api = await get('/api/audit/orders/K%F6nig', TEST_TOKENS.analyst);
    expect(api.status).toBe(400);
    expect(api.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(await api.json()).toMatchObject({
      title: 'bad_request',
      detail: expect.stringMatching(/^the path holds %F6, which is no percent-encoded UTF-8/),
    });
    // a bare % is named too, and the same path in UTF-8 is read (404: no such order)
    const bare = await get('/api/audit/orders/50%', TEST_TOKENS.analyst);
    expect(bare.status).toBe(400);
    expect(((await bare.json()) as { detail: string }).detail).toMatch(/^the path holds %,/);
    const utf8 = await get('/api/audit/orders/K%C3%B6nig', TEST_TOKENS.analyst);
    expect(utf8.status).not.toBe(400);
    // the service goes on answering
    expect((await fetch(`${adapter.httpUrl}/health`)).status).toBe(200);
  });
});

describe('HTTP front door: a FHIR body sent chunked without end', () => {
  let adapter: TestAdapter;
  let logs = '';

  beforeAll(async () => {
    const sink = new PassThrough();
    sink.on('data', (chunk: Buffer) => (logs += chunk.toString('utf8')));
    adapter = await startTestAdapter({}, { sink });
  });
  afterAll(async () => {
    await adapter?.close();
  });

  it('is 413 once 64 MiB past FHIR_MAX_BODY_BYTES, its connection closed, and no failure of ours logged', async () => {
    // Before: the reader stopped by leaving its `for await` loop, which destroys the request and
    // its socket; the operation then read req.socket (null) and failed with a TypeError: no
    // answer, and an error-level "FHIR request failed" per such request, from any sender.
    const { hostname, port } = new URL(adapter.httpUrl);
    for (const path of ['/fhir/ServiceRequest', '/fhir']) {
      const socket = connect(Number(port), hostname);
      socket.on('error', () => undefined);
      let answer = '';
      let closed = false;
      socket.on('data', (c: Buffer) => (answer += c.toString('latin1')));
      socket.on('close', () => (closed = true));
      await new Promise((r) => socket.once('connect', r));
      socket.write(
        [
          `POST ${path} HTTP/1.1`,
          'Host: adapter',
          `Authorization: Bearer ${TEST_TOKENS.sender}`,
          'Content-Type: application/fhir+json',
          'Transfer-Encoding: chunked',
          '',
          '',
        ].join('\r\n'),
      );
      const data = Buffer.alloc(1024 * 1024, 0x20);
      const chunk = Buffer.concat([
        Buffer.from(`${data.length.toString(16)}\r\n`),
        data,
        Buffer.from('\r\n'),
      ]);
      const started = Date.now();
      while (!closed && Date.now() - started < 60_000) {
        if (!socket.write(chunk))
          await new Promise((r) => {
            socket.once('drain', r);
            socket.once('close', r);
          });
      }
      await sleep(200);
      socket.destroy();
      expect({ path, closed, answered: answer === '' ? '' : answer.slice(0, 12) }).toEqual({
        path,
        closed: true,
        answered: expect.stringMatching(/^(HTTP\/1\.1 413|)$/),
      });
    }
    await sleep(200);
    const failures = logs.split('\n').filter((l) => l.includes('"level":50'));
    expect(failures).toEqual([]);
  });
});
