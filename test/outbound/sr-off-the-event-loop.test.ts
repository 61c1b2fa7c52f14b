import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseResultContent } from '../../src/mappings/result-content.mapping';
import { buildMeasurementSr } from '../../src/outbound/dicom-result.builder';
import { DicomWebResultPublisher } from '../../src/outbound/dicomweb-result.publisher';
import { publicationInput, sourceStudy } from './publication-fixtures';

jest.setTimeout(120_000);

/**
 * A lesion product's report of 300 findings (MAX_FINDINGS, as a multiple-sclerosis or
 * metastasis count gives) published to a PACS by STOW-RS: dcmjs took 0.4–1.7 s to write
 * the 650 KB SR and 0.3–0.4 s to dump it for the audit, on the event loop that answers
 * `/health`, takes MLLP orders and runs every other delivery — at every retry. Built on a
 * worker thread now: the event loop is measured while the delivery runs against a real
 * HTTP peer, and what arrives is the SR the builder writes.
 */
describe('a large SR is built off the event loop', () => {
  let server: Server;
  let url: string;
  const received: Buffer[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push(Buffer.concat(chunks));
        res.writeHead(200, { 'content-type': 'application/dicom+json' });
        res.end(JSON.stringify({ '00081199': { vr: 'SQ', Value: [{}] } }));
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/dicom-web`;
  });
  afterAll(
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );

  function largeReport() {
    const findings = Array.from({ length: 300 }, (_, i) => ({
      structure: `Lesion ${i + 1}`,
      volume_ml: 0.05 + i / 100,
      icv_percent: 0.01,
      percentile: 50,
      flag: 'high',
    }));
    return publicationInput('DELIVERED', {
      results: parseResultContent(JSON.stringify({ report_kind: 'results', findings })),
    });
  }

  /** The longest the event loop went without running a 5 ms timer while `work` ran. */
  async function worstLoopGap(work: () => Promise<unknown>): Promise<number> {
    let worst = 0;
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      worst = Math.max(worst, now - last);
      last = now;
    }, 5);
    try {
      await work();
      return worst;
    } finally {
      clearInterval(timer);
    }
  }

  it('delivers the SR the builder writes, the event loop never held for long', async () => {
    const input = largeReport();
    const now = new Date('2026-11-27T10:00:00Z');
    const publisher = new DicomWebResultPublisher({ baseUrl: url, clock: () => now });
    try {
      // the first build starts the worker (compiling the builder there): not measured
      const first = await publisher.deliver({ id: '1', kind: 'dicom-sr', attempts: 1 }, {
        input,
        source: sourceStudy(1),
      } as never);
      expect(first.outcome).toBe('delivered');
      let result: Awaited<ReturnType<typeof publisher.deliver>> | undefined;
      // The better of two deliveries: a CI machine short of CPU stalled one for 1,132 ms with the
      // build off the loop; inline, every delivery holds the loop at least 700 ms.
      let gap = Infinity;
      for (const id of ['2', '3']) {
        const held = await worstLoopGap(async () => {
          result = await publisher.deliver({ id, kind: 'dicom-sr', attempts: 1 }, {
            input,
            source: sourceStudy(1),
          } as never);
        });
        gap = Math.min(gap, held);
        expect(result!.outcome).toBe('delivered');
      }
      // the dump of what was sent is in the answer, as before
      expect(JSON.stringify(result!.sent)).toContain('Lesion 20');
      // inline, the build alone held the loop 400–1,700 ms here and the dump 300–400 ms more
      // (at least 700 ms together); off the loop, under 250 ms quiet, 345 ms seen at load 11
      expect(gap).toBeLessThan(500);
    } finally {
      await publisher.close();
    }
    // what the PACS received holds the SR the builder writes, byte for byte
    const sr = buildMeasurementSr(input, sourceStudy(1), now);
    expect(received.at(-1)!.includes(sr)).toBe(true);
  });
});
