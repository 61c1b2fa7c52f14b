import { generateKeyPairSync, verify, type KeyObject } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'fhir-kit-client';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

const FIXTURES = join(__dirname, '..', 'fixtures', 'fhir');
const fixture = (name: string) => JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8'));

/**
 * A SMART Backend Services token endpoint (backend-services.html) that really checks the
 * client assertion: RS384 signature with the registered public key, iss = sub = client id,
 * aud = this endpoint, exp at most five minutes ahead.
 */
async function startTokenServer(publicKey: KeyObject, clientId: string) {
  const calls: Array<{ grant: string | null; scope: string | null; verdict: string }> = [];
  let url = '';
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const form = new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
      const jwt = form.get('client_assertion') ?? '';
      const [h, p, s] = jwt.split('.');
      let verdict = 'ok';
      try {
        const header = JSON.parse(Buffer.from(h!, 'base64url').toString()) as {
          alg: string;
          kid?: string;
        };
        const claims = JSON.parse(Buffer.from(p!, 'base64url').toString()) as Record<
          string,
          unknown
        >;
        const signed = verify(
          'sha384',
          Buffer.from(`${h}.${p}`),
          publicKey,
          Buffer.from(s!, 'base64url'),
        );
        const now = Math.floor(Date.now() / 1000);
        if (header.alg !== 'RS384' || header.kid !== 'key-1') verdict = 'bad header';
        else if (!signed) verdict = 'bad signature';
        else if (claims.iss !== clientId || claims.sub !== clientId) verdict = 'bad issuer';
        else if (claims.aud !== url) verdict = 'bad audience';
        else if (typeof claims.exp !== 'number' || claims.exp > now + 300 || claims.exp < now)
          verdict = 'bad exp';
        else if (
          form.get('client_assertion_type') !==
          'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'
        )
          verdict = 'bad type';
      } catch {
        verdict = 'unparseable';
      }
      calls.push({ grant: form.get('grant_type'), scope: form.get('scope'), verdict });
      res.setHeader('content-type', 'application/json');
      if (verdict !== 'ok' || form.get('grant_type') !== 'client_credentials') {
        res.statusCode = 400;
        res.end(JSON.stringify({ error: 'invalid_client' }));
        return;
      }
      res.end(
        JSON.stringify({
          access_token: 'smart-access-token-1',
          token_type: 'bearer',
          expires_in: 300,
          scope: form.get('scope'),
        }),
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/auth/token`;
  return { url, calls, close: () => new Promise<void>((r) => server.close(() => r())) };
}

describe('outbound calls to the EHR with SMART Backend Services', () => {
  let ehr: TestFhirServer;
  let token: Awaited<ReturnType<typeof startTokenServer>>;
  let adapter: TestAdapter;

  beforeAll(async () => {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const dir = mkdtempSync(join(tmpdir(), 'smart-'));
    const keyFile = join(dir, 'client.pem');
    writeFileSync(keyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
    token = await startTokenServer(publicKey, 'imaging-ai-adapter');
    ehr = await startTestFhirServer();
    await ehr.seed(fixture('r4-patient-example-dicom'));
    ehr.requiredToken = 'smart-access-token-1';
    // The token endpoint is discovered (SMART App Launch: .well-known/smart-configuration).
    ehr.smartConfiguration = {
      token_endpoint: token.url,
      token_endpoint_auth_methods_supported: ['private_key_jwt'],
    };
    adapter = await startTestAdapter({
      FHIR_SERVER_URL: ehr.baseUrl,
      JOBS_ENABLED: 'false',
      FHIR_SMART_CLIENT_ID: 'imaging-ai-adapter',
      FHIR_SMART_PRIVATE_KEY_FILE: keyFile,
      FHIR_SMART_KEY_ID: 'key-1',
      FHIR_SMART_SCOPES: 'system/Patient.rs system/ServiceRequest.rs',
    });
  });
  afterAll(async () => {
    await adapter?.close();
    await ehr?.close();
    await token?.close();
  });

  it('discovers the token endpoint, gets a token with a signed client assertion, reads the Patient with it, and reuses it', async () => {
    const fhir = new Client({
      baseUrl: `${adapter.httpUrl}/fhir`,
      bearerToken: TEST_TOKENS.sender,
    });
    const di = fixture('r4-servicerequest-example-di');
    await fhir.create({
      resourceType: 'ServiceRequest',
      body: { ...di, identifier: [{ system: 'urn:x', value: 'S-1' }] },
    });
    await fhir.create({
      resourceType: 'ServiceRequest',
      body: { ...di, identifier: [{ system: 'urn:x', value: 'S-2' }] },
    });
    expect(token.calls).toEqual([
      {
        grant: 'client_credentials',
        scope: 'system/Patient.rs system/ServiceRequest.rs',
        verdict: 'ok',
      },
    ]);
    expect(
      ehr.requests.filter((r) => r.url.endsWith('/.well-known/smart-configuration')),
    ).toHaveLength(1);
    const patientReads = ehr.requests.filter((r) => r.url === '/fhir/Patient/dicom');
    expect(patientReads).toHaveLength(2);
    expect(
      patientReads.every((r) => r.headers.authorization === 'Bearer smart-access-token-1'),
    ).toBe(true);
    const rows = (await adapter.dataSource.query(
      `SELECT patient_id FROM orders ORDER BY created_at`,
    )) as Array<{ patient_id: string }>;
    expect(rows.map((r) => r.patient_id)).toEqual(['MINT1234', 'MINT1234']);
  });
});

describe('outbound calls to the EHR with a static bearer token (FHIR_SERVER_TOKEN)', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;

  beforeAll(async () => {
    ehr = await startTestFhirServer({ token: 'ehr-static-token-0123456789' });
    await ehr.seed(fixture('r4-patient-example-dicom'));
    adapter = await startTestAdapter({
      FHIR_SERVER_URL: ehr.baseUrl,
      FHIR_SERVER_TOKEN: 'ehr-static-token-0123456789',
      JOBS_ENABLED: 'false',
    });
  });
  afterAll(async () => {
    await adapter?.close();
    await ehr?.close();
  });

  it('sends the configured token on every read', async () => {
    const fhir = new Client({
      baseUrl: `${adapter.httpUrl}/fhir`,
      bearerToken: TEST_TOKENS.sender,
    });
    const created = (await fhir.create({
      resourceType: 'ServiceRequest',
      body: fixture('r4-servicerequest-example-di'),
    })) as unknown as { id: string };
    expect(created.id).toMatch(/^[0-9a-f-]{36}$/);
    const reads = ehr.requests.filter((r) => r.url === '/fhir/Patient/dicom');
    expect(reads.map((r) => r.headers.authorization)).toEqual([
      'Bearer ehr-static-token-0123456789',
    ]);
  });
});
