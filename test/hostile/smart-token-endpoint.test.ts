import { generateKeyPairSync } from 'node:crypto';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EhrFhirClient } from '../../src/inbound-fhir/ehr-fhir.client';
import {
  SMART_MAX_ANSWER_BYTES,
  SmartBackendAuthError,
  SmartBackendTokenProvider,
} from '../../src/fhir/smart-backend.auth';

jest.setTimeout(30_000);

/**
 * The EHR's SMART token endpoint as a broken or hostile peer, over loopback: it accepts the
 * connection and never answers, answers headers then drips a byte a second, sends an endless
 * body, or answers a token that is not a usable string. Every EHR call (the Patient read of a
 * ServiceRequest, the catch-up search, the Task/DiagnosticReport write) waits on the one token
 * request in flight, so that request must end on its own deadline with bounded memory, and the
 * next call must be free to try again.
 */

type Mode = 'ok' | 'hang' | 'drip' | 'endless' | 'object-token' | 'crlf-token' | 'string-expiry';

async function startTokenEndpoint() {
  let mode: Mode = 'ok';
  let issued = 0;
  const open = new Set<ServerResponse>();
  const timers = new Set<NodeJS.Timeout>();
  const json = (res: ServerResponse, body: unknown) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.url?.endsWith('/Patient/p1')) {
        json(res, { resourceType: 'Patient', id: 'p1' });
        return;
      }
      issued++;
      open.add(res);
      res.on('close', () => open.delete(res));
      switch (mode) {
        case 'hang':
          return; // the connection stays open, nothing is ever written
        case 'drip': {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.write('{"access_token":"');
          const timer = setInterval(() => res.write('a'), 200);
          timers.add(timer);
          res.on('close', () => clearInterval(timer));
          return;
        }
        case 'endless': {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.write('{"access_token":"');
          const chunk = Buffer.alloc(64 * 1024, 0x61);
          const pump = () => {
            while (!res.destroyed && res.write(chunk));
          };
          res.on('drain', pump);
          pump();
          return;
        }
        case 'object-token':
          json(res, { access_token: { value: 'x' }, token_type: 'bearer', expires_in: 300 });
          return;
        case 'crlf-token':
          json(res, { access_token: 'tok\r\nx-injected: 1', token_type: 'bearer' });
          return;
        case 'string-expiry':
          // Some authorization servers send expires_in as a string.
          json(res, { access_token: `tok-${issued}`, token_type: 'bearer', expires_in: '3600' });
          return;
        default:
          json(res, { access_token: `tok-${issued}`, token_type: 'bearer', expires_in: 300 });
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    tokenUrl: `${base}/auth/token`,
    fhirBase: `${base}/fhir`,
    setMode: (m: Mode) => (mode = m),
    get issued() {
      return issued;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const t of timers) clearInterval(t);
        for (const res of open) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('hostile: the SMART token endpoint of the EHR', () => {
  let endpoint: Awaited<ReturnType<typeof startTokenEndpoint>>;
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
  const provider = (timeoutMs = 400) =>
    new SmartBackendTokenProvider({
      clientId: 'imaging-ai-adapter',
      privateKeyPem: pem,
      alg: 'RS384',
      scopes: 'system/Patient.rs',
      tokenUrl: endpoint.tokenUrl,
      fhirBaseUrl: endpoint.fhirBase,
      timeoutMs,
    });

  beforeAll(async () => {
    endpoint = await startTokenEndpoint();
  });
  afterAll(async () => {
    await endpoint?.close();
  });

  it.each(['hang', 'drip'] as const)(
    'an endpoint that %ss fails the token request on its deadline; the next request is sent afresh',
    async (mode) => {
      endpoint.setMode(mode);
      const smart = provider();
      const started = Date.now();
      await expect(smart.token()).rejects.toThrow(/no complete answer within 400 ms/);
      expect(Date.now() - started).toBeLessThan(3_000);
      endpoint.setMode('ok');
      const before = endpoint.issued;
      // The token names the request that the endpoint answered. On a machine short of CPU the
      // abandoned request may reach the endpoint's handler only now (its bytes were already in
      // the socket), so the count alone may rise by two; the token must come from a request
      // counted after the failure, never from the one that was abandoned.
      const token = await smart.token();
      expect(token).toMatch(/^tok-\d+$/);
      expect(Number(token.slice(4))).toBeGreaterThan(before);
      expect(endpoint.issued).toBeGreaterThanOrEqual(before + 1);
    },
  );

  it('an endless answer is not read beyond the bound', async () => {
    endpoint.setMode('endless');
    const smart = provider(10_000);
    const heapBefore = process.memoryUsage().arrayBuffers;
    await expect(smart.token()).rejects.toThrow(
      new SmartBackendAuthError(
        `the SMART answer is larger than ${SMART_MAX_ANSWER_BYTES} bytes; not read`,
      ),
    );
    expect(process.memoryUsage().arrayBuffers - heapBefore).toBeLessThan(64 * 1024 * 1024);
  });

  it('a token that is not a string, or carries CR LF, is refused rather than sent as a header', async () => {
    for (const mode of ['object-token', 'crlf-token'] as const) {
      endpoint.setMode(mode);
      await expect(provider().token()).rejects.toThrow(/no usable access_token/);
    }
  });

  it('expires_in as a string of digits is read as seconds: the token is reused', async () => {
    endpoint.setMode('string-expiry');
    const smart = provider();
    const first = await smart.token();
    const before = endpoint.issued;
    expect(await smart.token()).toBe(first);
    expect(endpoint.issued).toBe(before);
  });

  it('an EHR read waiting on a hung token request fails with the token error, not forever', async () => {
    endpoint.setMode('hang');
    const ehr = new EhrFhirClient({ baseUrl: endpoint.fhirBase, smart: provider() });
    const started = Date.now();
    await expect(ehr.read('Patient/p1')).rejects.toThrow(SmartBackendAuthError);
    expect(Date.now() - started).toBeLessThan(3_000);
    endpoint.setMode('ok');
    await expect(ehr.read('Patient/p1')).resolves.toMatchObject({ id: 'p1' });
  });
});
