import { mkdtempSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, getGlobalDispatcher, setGlobalDispatcher, type Dispatcher } from 'undici';
import { HttpUpstreamProbe } from '../../src/imaging-client/http-upstream.probe';
import { DicomWebResultPublisher } from '../../src/outbound/dicomweb-result.publisher';
import { DicomWebClient } from '../../src/studies/dicomweb.client';
import { publicationInput, sourceStudy } from '../outbound/publication-fixtures';

/**
 * The adapter's long-lived HTTP clients that use undici's `request()` bring their own
 * connection pool. The process-wide dispatcher is not ours to rely on: Node's built-in fetch
 * replaces it with its bundled, older undici as soon as anything touches `fetch`, `Response`
 * or `Headers` (Nest's decorator metadata for `@Res() res: Response` does at boot), and that
 * parser kills the process (uncatchable `assert(!this.paused)`) when a peer closes while a
 * large body is paused — a replica died that way mid-retrieve in the two-replicas e2e test.
 * Here the process-wide dispatcher refuses every connection: the clients must not notice.
 */
describe('HTTP clients with their own connection pool', () => {
  let server: Server;
  let base: string;
  let dir: string;
  let original: Dispatcher;
  let refusing: Agent;
  const boundary = 'own-agent-boundary';
  const instance = Buffer.alloc(200_000, 0x44);

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'own-agent-'));
    server = createServer((req, res) => {
      if (req.url?.startsWith('/dicom-web/studies?')) {
        res.writeHead(200, { 'content-type': 'application/dicom+json' });
        res.end(
          JSON.stringify([
            { '0020000D': { vr: 'UI', Value: ['1.2.3'] }, '00201208': { vr: 'IS', Value: [1] } },
          ]),
        );
      } else if (req.url === '/dicom-web/studies/1.2.3') {
        res.writeHead(200, {
          'content-type': `multipart/related; type="application/dicom"; boundary=${boundary}`,
          connection: 'close',
        });
        res.end(
          Buffer.concat([
            Buffer.from(`--${boundary}\r\nContent-Type: application/dicom\r\n\r\n`),
            instance,
            Buffer.from(`\r\n--${boundary}--\r\n`),
          ]),
        );
      } else if (req.method === 'POST' && req.url?.startsWith('/dicom-web/studies/')) {
        req.resume();
        req.on('end', () => {
          res.writeHead(200, { 'content-type': 'application/dicom+json' });
          res.end(JSON.stringify({ '00081199': { vr: 'SQ', Value: [{}] } }));
        });
      } else if (req.url === '/v1/test-token') {
        res.writeHead(401).end();
      } else res.writeHead(404).end();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    original = getGlobalDispatcher();
    refusing = new Agent({
      connect: (_options, callback) =>
        callback(new Error('the process-wide dispatcher was used'), null),
    });
    setGlobalDispatcher(refusing);
  });
  afterAll(async () => {
    setGlobalDispatcher(original);
    await refusing?.close();
    await new Promise((r) => server?.close(r));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the DICOMweb client finds and retrieves a study on its own pool', async () => {
    const client = new DicomWebClient({ baseUrl: `${base}/dicom-web` });
    try {
      expect(await client.findStudies({ studyInstanceUid: '1.2.3' })).toEqual([
        { studyInstanceUid: '1.2.3', instanceCount: 1 },
      ]);
      const files = await client.retrieveStudy('1.2.3', join(dir, 'study'));
      expect(files).toHaveLength(1);
      expect((await readFile(files[0]!.path)).equals(instance)).toBe(true);
    } finally {
      await client.close();
    }
  });

  it('the upstream health probe reaches the upstream on its own pool', async () => {
    const probe = new HttpUpstreamProbe(`${base}/v1`);
    expect(await probe.check()).toMatchObject({ status: 'up' });
  });

  it('the STOW-RS result publisher stores an SR on its own pool, not through fetch', async () => {
    // Jest's global fetch does not go through the dispatcher set above; refuse it outright.
    const builtIn = globalThis.fetch;
    globalThis.fetch = () => Promise.reject(new Error('the built-in fetch was used'));
    const publisher = new DicomWebResultPublisher({ baseUrl: `${base}/dicom-web` });
    try {
      const result = await publisher.deliver({ id: '1', kind: 'dicom-sr', attempts: 1 }, {
        input: publicationInput('DELIVERED'),
        source: sourceStudy(),
      } as never);
      expect(result).toMatchObject({ outcome: 'delivered', detail: { httpStatus: 200 } });
    } finally {
      globalThis.fetch = builtIn;
      await publisher.close();
    }
  });
});
