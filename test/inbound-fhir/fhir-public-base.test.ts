import { request } from 'node:http';
import type { Patient } from '@medplum/fhirtypes';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { chestCtRequest, fhirFixture, type Json } from '../helpers/fhir-fixtures';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

jest.setTimeout(120_000);

/**
 * The URLs the FHIR front door writes into its answers (Location, Content-Location, a
 * searchset's self link and fullUrls, the CapabilityStatement's implementation.url) name this
 * server at its public base: FHIR_PUBLIC_BASE_URL, else the address the connection reached.
 * They were built from the request's Host header, so whoever sent a request chose the URL the
 * answer pointed the EHR to (R4 http.html#create: the Location is where the resource is).
 */

interface RawAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Json;
}

/** An HTTP request on a real socket with the headers as given (fetch refuses to set Host). */
function send(
  url: string,
  method: string,
  headers: Record<string, string>,
  body?: string,
): Promise<RawAnswer> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path: `${u.pathname}${u.search}`,
        method,
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          ...(body !== undefined ? { 'content-type': 'application/fhir+json' } : {}),
          ...headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: text ? (JSON.parse(text) as Json) : {},
          });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const HOSTILE = {
  host: 'evil.example',
  'x-forwarded-host': 'attacker.example',
  'x-forwarded-proto': 'https',
};

/** Every URL an answer carries (headers and body), to look for a host we did not configure. */
function urlsOf(answer: RawAnswer): string[] {
  const found = [answer.headers.location, answer.headers['content-location']].filter(
    (v): v is string => typeof v === 'string',
  );
  JSON.stringify(answer.body, (_k, v: unknown) => {
    if (typeof v === 'string' && /^[a-z]+:\/\//i.test(v)) found.push(v);
    return v;
  });
  return found;
}

describe('FHIR answers name this server by its public base, never by the Host header', () => {
  let ehr: TestFhirServer;
  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(fhirFixture('r4-patient-example-dicom') as unknown as Patient);
  });
  afterAll(() => ehr?.close());

  describe('without FHIR_PUBLIC_BASE_URL: the address the connection reached', () => {
    let adapter: TestAdapter;
    beforeAll(async () => {
      adapter = await startTestAdapter({ FHIR_SERVER_URL: ehr.baseUrl, JOBS_ENABLED: 'false' });
    });
    afterAll(() => adapter?.close());

    it('a create answered to a hostile Host / X-Forwarded-Host points to our own address', async () => {
      const base = `${adapter.httpUrl}/fhir`;
      const created = await send(
        `${base}/ServiceRequest`,
        'POST',
        HOSTILE,
        JSON.stringify(chestCtRequest('PB-HOST-1')),
      );
      expect(created.status).toBe(201);
      const id = created.body.id as string;
      expect(created.headers.location).toBe(`${base}/ServiceRequest/${id}/_history/1`);
      expect(created.headers['content-location']).toBe(created.headers.location);

      const tasks = await send(`${base}/Task?based-on=ServiceRequest/${id}`, 'GET', HOSTILE);
      expect(tasks.status).toBe(200);
      expect(tasks.body.link).toEqual([
        { relation: 'self', url: `${base}/Task?based-on=ServiceRequest%2F${id}` },
      ]);
      expect((tasks.body.entry as Json[])[0]!.fullUrl).toBe(`${base}/Task/${id}`);
      // an absolute based-on on our base still finds the Task
      const absolute = await send(
        `${base}/Task?based-on=${encodeURIComponent(`${base}/ServiceRequest/${id}`)}`,
        'GET',
        HOSTILE,
      );
      expect(absolute.body.total).toBe(1);

      const metadata = await send(`${base}/metadata`, 'GET', HOSTILE);
      expect((metadata.body.implementation as Json).url).toBe(base);

      for (const answer of [created, tasks, absolute, metadata]) {
        expect(urlsOf(answer).filter((u) => /evil|attacker|https:\/\/127/.test(u))).toEqual([]);
      }
    });
  });

  describe('with FHIR_PUBLIC_BASE_URL set (behind a reverse proxy)', () => {
    let adapter: TestAdapter;
    const PUBLIC = 'https://imaging-ai.hospital.example/r4/fhir';
    beforeAll(async () => {
      adapter = await startTestAdapter({
        FHIR_SERVER_URL: ehr.baseUrl,
        JOBS_ENABLED: 'false',
        FHIR_PUBLIC_BASE_URL: `${PUBLIC}/`,
      });
    });
    afterAll(() => adapter?.close());

    it('Location, links, fullUrls and implementation.url are under the configured base', async () => {
      const direct = `${adapter.httpUrl}/fhir`;
      const created = await send(
        `${direct}/ServiceRequest`,
        'POST',
        HOSTILE,
        JSON.stringify(chestCtRequest('PB-HOST-2')),
      );
      expect(created.status).toBe(201);
      const id = created.body.id as string;
      expect(created.headers.location).toBe(`${PUBLIC}/ServiceRequest/${id}/_history/1`);

      const tasks = await send(`${direct}/Task?_id=${id}`, 'GET', HOSTILE);
      expect(tasks.body.link).toEqual([{ relation: 'self', url: `${PUBLIC}/Task?_id=${id}` }]);
      expect((tasks.body.entry as Json[])[0]!.fullUrl).toBe(`${PUBLIC}/Task/${id}`);
      // a based-on written on the public base is ours
      const absolute = await send(
        `${direct}/Task?based-on=${encodeURIComponent(`${PUBLIC}/ServiceRequest/${id}`)}`,
        'GET',
        HOSTILE,
      );
      expect(absolute.body.total).toBe(1);

      const metadata = await send(`${direct}/metadata`, 'GET', HOSTILE);
      expect((metadata.body.implementation as Json).url).toBe(PUBLIC);
      for (const answer of [created, tasks, absolute, metadata]) {
        expect(urlsOf(answer).filter((u) => /evil|attacker/.test(u))).toEqual([]);
      }
    });
  });

  it('a FHIR_PUBLIC_BASE_URL with a query, credentials or another scheme stops the boot', async () => {
    for (const value of [
      'https://a.example/fhir?x=1',
      'https://u:p@a.example/fhir',
      'ftp://a.example/fhir',
    ]) {
      await expect(startTestAdapter({ FHIR_PUBLIC_BASE_URL: value })).rejects.toThrow(
        /FHIR_PUBLIC_BASE_URL/,
      );
    }
  });
});
