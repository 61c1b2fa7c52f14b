import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EhrFhirClient, EhrFhirError } from '../../src/inbound-fhir/ehr-fhir.client';

/**
 * What the EHR answers to our searches (a catch-up after missed subscription events, an
 * `empty` notification, a Patient by identifier), from a loopback HTTP peer answering as
 * scripted. Only a searchset Bundle is a search result (R4 http.html#search).
 */
describe('EHR search answers', () => {
  let server: Server;
  let base: string;
  let answer: { status: number; body: unknown } = { status: 200, body: {} };

  beforeAll(async () => {
    server = createServer((_req, res) => {
      res.writeHead(answer.status, { 'content-type': 'application/fhir+json' });
      res.end(JSON.stringify(answer.body));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/fhir`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  const search = () =>
    new EhrFhirClient({ baseUrl: base, timeoutMs: 2_000 }).searchAll('ServiceRequest', {
      _lastUpdated: 'ge2026-11-27T03:00:00Z',
    });

  it('a searchset Bundle is read, its match entries kept', async () => {
    answer = {
      status: 200,
      body: {
        resourceType: 'Bundle',
        type: 'searchset',
        total: 1,
        entry: [
          {
            fullUrl: `${base}/ServiceRequest/sr1`,
            resource: { resourceType: 'ServiceRequest', id: 'sr1' },
            search: { mode: 'match' },
          },
          {
            fullUrl: `${base}/Patient/p1`,
            resource: { resourceType: 'Patient', id: 'p1' },
            search: { mode: 'include' },
          },
        ],
      },
    };
    const found = await search();
    expect(found.map((f) => f.fullUrl)).toEqual([`${base}/ServiceRequest/sr1`]);
  });

  // Before, each was read as "nothing matched": a catch-up closed the gap of missed events
  // with nothing ingested, and those orders were never seen.
  it.each([
    [
      'an OperationOutcome (too-costly) sent with 200, as some gateways answer errors',
      {
        resourceType: 'OperationOutcome',
        issue: [{ severity: 'error', code: 'too-costly', diagnostics: 'Search too expensive' }],
      },
      'OperationOutcome',
    ],
    [
      "a gateway's JSON",
      { status: 'degraded', message: 'backend unavailable' },
      'JSON that is no resource',
    ],
    [
      'a Bundle that is not a search result',
      { resourceType: 'Bundle', type: 'transaction-response', entry: [] },
      'Bundle of type transaction-response',
    ],
  ])('a 200 with %s is an error naming what came, not an empty result', async (_w, body, what) => {
    answer = { status: 200, body };
    const error = await search().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EhrFhirError);
    expect((error as Error).message).toBe(
      `the EHR FHIR server answered a search of ServiceRequest with ${what}, not a searchset Bundle`,
    );
  });
});
