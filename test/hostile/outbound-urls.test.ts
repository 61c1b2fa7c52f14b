import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';
import { startScriptedUpstream } from '../imaging-client/scripted-upstream';
import { buildClient } from '../imaging-client/sandbox-harness';
import { ImagingClientError } from '../../src/imaging-client/imaging-client.error';

jest.setTimeout(120_000);

/**
 * Issue #15 item 1, attacked on a running adapter over loopback: URLs in inputs (notification
 * focus, additional-context, fullUrl, references) and in peers' answers (a redirect from the
 * EHR, presigned upload URLs from the upstream) are followed only within the configured base
 * of their peer, and the peer's credential goes nowhere else. A second HTTP server plays the
 * attacker's host and records every request it gets.
 */

const EHR_TOKEN = 'ehr-secret-token-do-not-leak';
const FIXTURES = join(__dirname, '..', 'fixtures', 'fhir');

interface Recorded {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
}

async function startRecorder(
  answer: (url: string) => { status: number; headers?: Record<string, string>; body?: string },
): Promise<{ url: string; seen: Recorded[]; close(): Promise<void> }> {
  const seen: Recorded[] = [];
  const server: Server = createServer((req, res) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    req.resume();
    const a = answer(req.url ?? '');
    res.writeHead(a.status, { 'content-type': 'application/fhir+json', ...a.headers });
    res.end(a.body ?? '{"resourceType":"ServiceRequest","id":"stolen"}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

type Json = Record<string, unknown>;

/** The published R4 Backport id-only example, with its focus replaced. */
function idOnlyNotification(ehrBase: string, event: number, focus: string, extra: Json[] = []) {
  const bundle = JSON.parse(
    readFileSync(join(FIXTURES, 'backport-r4-notification-id-only.json'), 'utf8').replaceAll(
      'https://example.org/fhir',
      ehrBase,
    ),
  ) as { entry: Array<{ resource: { parameter: Json[] } }> };
  const params = bundle.entry[0]!.resource.parameter as Array<{
    name: string;
    valueString?: string;
    part?: Json[];
  }>;
  params.find((p) => p.name === 'events-since-subscription-start')!.valueString = String(event);
  const ev = params.find((p) => p.name === 'notification-event')!;
  ev.part = [
    { name: 'event-number', valueString: String(event) },
    { name: 'focus', valueReference: { reference: focus } },
    ...extra,
  ];
  return bundle;
}

async function post(adapter: TestAdapter, path: string, body: unknown) {
  const res = await fetch(`${adapter.httpUrl}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${TEST_TOKENS.sender}`,
      'content-type': 'application/fhir+json',
    },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Json };
}

function expressions(outcome: Json): string[] {
  return ((outcome.issue as Array<{ expression?: string[] }>) ?? []).flatMap(
    (i) => i.expression ?? [],
  );
}

describe('hostile: URLs in FHIR inputs are followed only within FHIR_SERVER_URL', () => {
  let ehr: TestFhirServer;
  let evil: Awaited<ReturnType<typeof startRecorder>>;
  let adapter: TestAdapter;
  let db: PgClient;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    evil = await startRecorder(() => ({ status: 200 }));
    adapter = await startTestAdapter({
      FHIR_SERVER_URL: ehr.baseUrl,
      FHIR_SERVER_TOKEN: EHR_TOKEN,
      JOBS_ENABLED: 'false',
    });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await evil?.close();
    await ehr?.close();
  });

  const refusals = async () =>
    (
      await db.query<{ outcome: string; response_code: string; raw: Buffer }>(
        `SELECT outcome, response_code, raw FROM inbound_messages WHERE transport LIKE 'fhir%' ORDER BY received_at`,
      )
    ).rows;

  it('an id-only notification whose focus is on another host: 422 naming the element, nothing fetched, recorded', async () => {
    const before = (await refusals()).length;
    const res = await post(
      adapter,
      '/fhir/subscription-notifications',
      idOnlyNotification(ehr.baseUrl, 1, `${evil.url}/fhir/ServiceRequest/1`),
    );
    expect(res.status).toBe(422);
    expect(res.body.resourceType).toBe('OperationOutcome');
    expect(expressions(res.body)).toEqual([
      'Bundle.entry[0].resource.parameter[notification-event][0].part[1]',
    ]);
    expect(JSON.stringify(res.body)).toMatch(/outside the EHR's FHIR base/);
    expect(evil.seen).toEqual([]);
    // Recorded as a refusal with its raw bytes, for the audit log.
    const after = await refusals();
    expect(after.length).toBe(before + 1);
    expect(after.at(-1)).toMatchObject({ outcome: 'rejected', response_code: '422' });
    expect(after.at(-1)!.raw.toString()).toContain(`${evil.url}/fhir/ServiceRequest/1`);
  });

  it.each([
    ['a look-alike host', (base: string) => base.replace('127.0.0.1', '127.0.0.1.nip.io')],
    ['user information', (base: string) => base.replace('http://', 'http://attacker@')],
    ['a path climbing out of the base', (base: string) => `${base}/../../admin/ServiceRequest/1`],
    ['an encoded slash', (base: string) => `${base}/ServiceRequest%2F..%2F..%2Fx`],
  ])('a focus with %s is refused the same way', async (_why, make) => {
    const res = await post(
      adapter,
      '/fhir/subscription-notifications',
      idOnlyNotification(ehr.baseUrl, 2, make(ehr.baseUrl).replace(/\/?$/, '')),
    );
    expect(res.status).toBe(422);
    expect(expressions(res.body)[0]).toMatch(/notification-event\]\[0\]\.part\[1\]$/);
  });

  it('an additional-context on another host is refused even when the focus is the EHR', async () => {
    const res = await post(
      adapter,
      '/fhir/subscription-notifications',
      idOnlyNotification(ehr.baseUrl, 3, `${ehr.baseUrl}/ServiceRequest/nope`, [
        { name: 'additional-context', valueReference: { reference: `${evil.url}/Patient/1` } },
      ]),
    );
    expect(res.status).toBe(422);
    expect(expressions(res.body)).toEqual([
      'Bundle.entry[0].resource.parameter[notification-event][0].part[2]',
    ]);
    expect(evil.seen).toEqual([]);
  });

  it('a ServiceRequest whose subject is an absolute URL elsewhere: 422 on ServiceRequest.subject, nothing fetched', async () => {
    const sr = JSON.parse(
      readFileSync(join(FIXTURES, 'r4-servicerequest-example-di.json'), 'utf8'),
    ) as Json;
    delete sr.id;
    sr.subject = { reference: `${evil.url}/fhir/Patient/dicom` };
    const res = await post(adapter, '/fhir/ServiceRequest', sr);
    expect(res.status).toBe(422);
    expect(expressions(res.body)).toContain('ServiceRequest.subject');
    expect(evil.seen).toEqual([]);
  });

  it('a requester and a reason elsewhere are not read, and the order goes on with their identifier and display', async () => {
    // An EHR whose Practitioner and Condition links name another server (a directory, an
    // older base): the order needs neither to run, so it is not refused for them; nothing is
    // fetched, and the analyst sees why the ordering provider came from the display.
    await ehr.seed(
      JSON.parse(readFileSync(join(FIXTURES, 'r4-patient-example-dicom.json'), 'utf8')),
    );
    const sr = JSON.parse(
      readFileSync(join(FIXTURES, 'r4-servicerequest-example-di.json'), 'utf8'),
    ) as Json;
    delete sr.id;
    sr.identifier = [{ system: 'http://example.org/ehr/orders', value: 'ELSEWHERE-1' }];
    sr.requester = {
      reference: `${evil.url}/fhir/Practitioner/example?sig=do-not-keep`,
      identifier: { system: 'http://hl7.org/fhir/sid/us-npi', value: '1234567893' },
      display: 'Dr. Adam Careful',
    };
    sr.reasonReference = [{ reference: `${evil.url}/fhir/Condition/1`, display: 'Lung nodule' }];
    const res = await post(adapter, '/fhir/ServiceRequest', sr);
    expect(res.status).toBe(201);
    expect(evil.seen).toEqual([]);
    const order = (
      await db.query<{ request: Json; id: string }>(
        `SELECT id, request FROM orders WHERE placer_order_number = 'ELSEWHERE-1'`,
      )
    ).rows[0]!;
    expect(order.request.orderingProvider).toEqual({
      identifier: { system: 'http://hl7.org/fhir/sid/us-npi', value: '1234567893' },
      name: { prefix: 'Dr.', given: ['Adam'], family: 'Careful' },
    });
    const quirks = (
      await db.query<{ quirks: Array<{ code: string; detail: string }> }>(
        `SELECT quirks FROM inbound_messages WHERE id = (SELECT inbound_message_id FROM orders WHERE id = $1)`,
        [order.id],
      )
    ).rows[0]!.quirks.filter((q) => q.code === 'fhir-reference-outside-base');
    expect(quirks.map((q) => q.detail.split(':')[0])).toEqual([
      'ServiceRequest.requester',
      'ServiceRequest.reasonReference[0]',
    ]);
    // the origin only: a path or query may carry a signature
    expect(JSON.stringify(quirks)).toContain(new URL(evil.url).origin);
    expect(JSON.stringify(quirks)).not.toContain('do-not-keep');
  });
});

describe('hostile: the EHR credential never follows a redirect', () => {
  let evil: Awaited<ReturnType<typeof startRecorder>>;
  let redirecting: Awaited<ReturnType<typeof startRecorder>>;
  let adapter: TestAdapter;

  beforeAll(async () => {
    evil = await startRecorder(() => ({ status: 200 }));
    // An "EHR" (or a proxy in front of it) that sends every read elsewhere.
    redirecting = await startRecorder((url) => ({
      status: 302,
      headers: { location: `${evil.url}${url}` },
      body: '',
    }));
    adapter = await startTestAdapter({
      FHIR_SERVER_URL: `${redirecting.url}/fhir`,
      FHIR_SERVER_TOKEN: EHR_TOKEN,
      JOBS_ENABLED: 'false',
    });
  });
  afterAll(async () => {
    await adapter?.close();
    await redirecting?.close();
    await evil?.close();
  });

  it('a 302 to another host is an error answer (503), and the other host hears nothing', async () => {
    const res = await post(
      adapter,
      '/fhir/subscription-notifications',
      idOnlyNotification(`${redirecting.url}/fhir`, 1, 'ServiceRequest/sr-1'),
    );
    expect(res.status).toBe(503);
    expect(JSON.stringify(res.body)).toMatch(/302/);
    // The read went to the EHR with its token …
    expect(redirecting.seen).toHaveLength(1);
    expect(redirecting.seen[0]!.headers.authorization).toBe(`Bearer ${EHR_TOKEN}`);
    // … and nowhere else.
    expect(evil.seen).toEqual([]);
  });
});

describe('hostile: presigned upload URLs from the upstream', () => {
  let storage: Awaited<ReturnType<typeof startRecorder>>;
  let dir: string;
  let study: string;

  beforeAll(async () => {
    storage = await startRecorder(() => ({ status: 200, body: '' }));
    dir = await mkdtemp(join(tmpdir(), 'hostile-presigned-'));
    study = join(dir, 'study.zip');
    await writeFile(study, Buffer.alloc(64 * 1024, 7));
  });
  afterAll(async () => {
    await storage?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** An upstream that answers the token and the single-PUT URL, the latter chosen by the test. */
  async function upstreamHanding(url: string) {
    return startScriptedUpstream((req, res) => {
      res.setHeader('content-type', 'application/json');
      if (req.path === '/auth/token') {
        res.end(
          JSON.stringify({
            access_token: 'upstream-token',
            token_type: 'Bearer',
            expires_in: 3600,
          }),
        );
      } else if (req.path === '/upload/single-put') {
        res.end(
          JSON.stringify({ url, expires_at: new Date(Date.now() + 3_600_000).toISOString() }),
        );
      } else {
        res.statusCode = 404;
        res.end('{}');
      }
    });
  }

  it.each([
    ['user information in the URL', (s: string) => s.replace('http://', 'http://user:pw@'), {}],
    [
      'a host outside IMAGING_UPLOAD_HOSTS',
      (s: string) => s,
      { uploadHosts: ['storage.imaging.example'] },
    ],
  ])('%s: refused before any byte is sent', async (_why, make, options) => {
    const upstream = await upstreamHanding(`${make(storage.url)}/put?X-Signature=abc`);
    const c = buildClient(upstream.baseUrl, { retry: { maxAttempts: 2 }, ...options });
    try {
      const error = await c.uploader
        .upload('3f1b2c4d-0000-4000-8000-000000000001', study)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ImagingClientError);
      expect((error as ImagingClientError).code).toBe('invalid_response');
      expect((error as Error).message).toMatch(/presigned upload URL refused/);
      expect(storage.seen).toEqual([]);
      // The URL (a credential) is in no call record; the host is.
      expect(JSON.stringify(c.records)).not.toContain('X-Signature');
    } finally {
      await c.close();
      await upstream.close();
    }
  });

  it('an allowed host gets the bytes, and no bearer token goes with them', async () => {
    const host = new URL(storage.url).host;
    const upstream = await upstreamHanding(`${storage.url}/put?X-Signature=abc`);
    const c = buildClient(upstream.baseUrl, { uploadHosts: [host] });
    try {
      await c.uploader.upload('3f1b2c4d-0000-4000-8000-000000000002', study);
      expect(storage.seen).toHaveLength(1);
      expect(storage.seen[0]!.method).toBe('PUT');
      expect(storage.seen[0]!.headers.authorization).toBeUndefined();
      const put = c.records.find((r) => r.operation === 'upload-single-put');
      expect(put?.storageHost).toBe(host);
    } finally {
      await c.close();
      await upstream.close();
    }
  });
});
