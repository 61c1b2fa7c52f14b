import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { FhirHttpError, FhirRestClient, searchUrl } from './fhir-rest.client';

/** A loopback EHR whose answer each test chooses; it records what it was sent. */
function ehr(answer: (req: IncomingMessage, res: ServerResponse, body: string) => void) {
  const seen: Array<{ method: string; url: string; auth?: string; body: string }> = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, auth: req.headers.authorization, body });
      answer(req, res, body);
    });
  });
  return {
    seen,
    start: () =>
      new Promise<string>((resolve) =>
        server.listen(0, '127.0.0.1', () =>
          resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}/fhir`),
        ),
      ),
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const failure = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (error) {
    return error as FhirHttpError;
  }
  throw new Error('expected a failure');
};

describe('FhirRestClient: the EHR answers within bounds, or the call fails', () => {
  it('sends JSON with the token and reads the JSON answer', async () => {
    const peer = ehr((_req, res, body) => {
      res.writeHead(201, { 'content-type': 'application/fhir+json' });
      res.end(JSON.stringify({ ...JSON.parse(body || '{}'), id: 'p1' }));
    });
    const base = await peer.start();
    try {
      const client = new FhirRestClient({ bearerToken: () => 'tok-1' });
      const made = await client.post<{ id: string; resourceType: string }>(`${base}/Patient`, {
        resourceType: 'Patient',
      });
      expect(made).toEqual({ resourceType: 'Patient', id: 'p1' });
      expect(peer.seen[0]).toMatchObject({
        method: 'POST',
        url: '/fhir/Patient',
        auth: 'Bearer tok-1',
      });
    } finally {
      await peer.stop();
    }
  });

  it('an answer that never ends is dropped at maxAnswerBytes (memory stays bounded)', async () => {
    const peer = ehr((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/fhir+json' });
      res.write('{"resourceType":"Patient","text":"');
      const chunk = 'x'.repeat(64 * 1024);
      const pump = () => {
        while (!res.destroyed && res.write(chunk));
        if (!res.destroyed) res.once('drain', pump);
      };
      pump();
    });
    const base = await peer.start();
    try {
      const client = new FhirRestClient({ maxAnswerBytes: 1024 * 1024, timeoutMs: 10_000 });
      const started = Date.now();
      const error = await failure(client.get(`${base}/Patient/1`));
      expect(error.message).toMatch(/larger than 1048576 bytes/);
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      await peer.stop();
    }
  });

  it('an answer that trickles is cut at the deadline of the whole exchange', async () => {
    const peer = ehr((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/fhir+json' });
      const timer = setInterval(() => res.write(' '), 50);
      res.on('close', () => clearInterval(timer));
    });
    const base = await peer.start();
    try {
      const started = Date.now();
      const error = await failure(new FhirRestClient({ timeoutMs: 600 }).get(`${base}/Patient/1`));
      expect(error.message).toMatch(/no complete answer within 600 ms/);
      expect(Date.now() - started).toBeLessThan(3_000);
    } finally {
      await peer.stop();
    }
  });

  it('a 3xx is an answer: not followed, so the token goes nowhere else', async () => {
    let elsewhere = 0;
    const other = ehr((_req, res) => {
      elsewhere++;
      res.end('{}');
    });
    const otherBase = await other.start();
    const peer = ehr((_req, res) => {
      res.writeHead(302, { location: `${otherBase}/Patient/1` });
      res.end();
    });
    const base = await peer.start();
    try {
      const error = await failure(
        new FhirRestClient({ bearerToken: () => 's3cret' }).get(`${base}/Patient/1`),
      );
      expect(error.response?.status).toBe(302);
      expect(elsewhere).toBe(0);
    } finally {
      await peer.stop();
      await other.stop();
    }
  });

  it('a refusal carries its status and OperationOutcome; a 2xx that is not JSON is an error', async () => {
    const outcome = {
      resourceType: 'OperationOutcome',
      issue: [{ severity: 'error', code: 'invalid' }],
    };
    const peer = ehr((req, res) => {
      if (req.method === 'PUT') {
        res.writeHead(422, { 'content-type': 'application/fhir+json' });
        res.end(JSON.stringify(outcome));
      } else {
        res.writeHead(200, { 'content-type': 'text/html' });
        res.end('<html>proxy login</html>');
      }
    });
    const base = await peer.start();
    try {
      const client = new FhirRestClient();
      const refused = await failure(
        client.put(`${base}/Task?identifier=x`, { resourceType: 'Task' }),
      );
      expect(refused.response).toEqual({ status: 422, data: outcome });
      const html = await failure(client.get(`${base}/Patient/1`));
      expect(html.response?.status).toBe(200);
      expect(html.message).toMatch(/not JSON/);
    } finally {
      await peer.stop();
    }
  });

  it('search URLs repeat array parameters and encode values', () => {
    expect(
      searchUrl('https://ehr.example/fhir/', 'ServiceRequest', {
        identifier: 'urn:oid:1.2|A&B',
        _include: ['ServiceRequest:subject', 'ServiceRequest:requester'],
        _count: 50,
      }),
    ).toBe(
      'https://ehr.example/fhir/ServiceRequest?identifier=urn%3Aoid%3A1.2%7CA%26B&_include=ServiceRequest%3Asubject&_include=ServiceRequest%3Arequester&_count=50',
    );
    expect(searchUrl('https://ehr.example/fhir', 'Patient', {})).toBe(
      'https://ehr.example/fhir/Patient',
    );
  });
});
