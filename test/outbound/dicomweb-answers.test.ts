import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DicomWebResultPublisher } from '../../src/outbound/dicomweb-result.publisher';
import { publicationInput, sourceStudy } from './publication-fixtures';

/**
 * How the STOW-RS answers of a PACS are classified (PS3.18 10.5.3): a small HTTP peer
 * answers each POST as scripted, with the Failed SOP Sequence a PACS would send.
 */
describe('STOW-RS answers', () => {
  let server: Server;
  let url: string;
  let answer: {
    status: number;
    failureReason?: number | string;
    endless?: boolean;
    retryAfter?: string;
    /** Answer in the Native DICOM Model (PS3.19), as some archives do whatever is asked. */
    xml?: boolean;
  } = { status: 200 };
  const received: Array<{ contentType: string; bytes: number }> = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push({
          contentType: req.headers['content-type'] ?? '',
          bytes: Buffer.concat(chunks).length,
        });
        const body =
          answer.failureReason === undefined
            ? { '00081199': { vr: 'SQ', Value: [{}] } }
            : {
                '00081198': {
                  vr: 'SQ',
                  Value: [
                    {
                      '00081155': { vr: 'UI', Value: ['2.25.1'] },
                      '00081197': { vr: 'US', Value: [answer.failureReason] },
                    },
                  ],
                },
              };
        if (answer.xml) {
          res.writeHead(answer.status, { 'content-type': 'application/dicom+xml; charset=utf-8' });
          res.end(nativeDicomModelAnswer(answer.failureReason));
          return;
        }
        res.writeHead(answer.status, {
          'content-type': 'application/dicom+json',
          ...(answer.retryAfter ? { 'retry-after': answer.retryAfter } : {}),
        });
        if (answer.endless) {
          // a PACS (or a proxy in front of it) whose answer never ends
          const chunk = ' '.repeat(64 * 1024);
          const pump = () => {
            while (!res.destroyed && res.write(chunk));
            if (!res.destroyed) res.once('drain', pump);
          };
          pump();
          return;
        }
        res.end(JSON.stringify(body));
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

  const send = async (kind = 'dicom-sr') => {
    const publisher = new DicomWebResultPublisher({ baseUrl: url });
    try {
      return await publisher.deliver({ id: '7', kind, attempts: 1 }, {
        input: publicationInput('DELIVERED'),
        source: sourceStudy(),
      } as never);
    } finally {
      await publisher.close();
    }
  };

  it.each([
    [{ status: 200 }, 'delivered'],
    [{ status: 202 }, 'delivered'],
    [{ status: 409, failureReason: 0x0111 }, 'delivered'],
    [{ status: 409, failureReason: 0xc000 }, 'dead'],
    [{ status: 400 }, 'dead'],
    [{ status: 503 }, 'retry'],
    [{ status: 429 }, 'retry'],
    // Azure Health Data Services DICOM (conformance statement v2, "Store failure reason codes"):
    // 45070 the same Study/Series/SOP Instance UIDs already stored (a resend after the worker
    // died before recording the first answer), 45071 the instance being created by another
    // request; 424 Failed Dependency, the service could not reach its storage or key vault.
    [{ status: 409, failureReason: 45070 }, 'delivered'],
    [{ status: 409, failureReason: 45071 }, 'retry'],
    [{ status: 424 }, 'retry'],
    // a reason written as a string of digits (a JSON number is the rule, PS3.18 F.2.3.1)
    [{ status: 409, failureReason: '273' }, 'delivered'],
  ])('%j → %s', async (scripted, outcome) => {
    answer = scripted;
    const result = await send();
    expect(result.outcome).toBe(outcome);
    expect(result.detail.httpStatus).toBe(scripted.status);
  });

  // PS3.19 A.1 answers (dcm4chee-arc and other archives answer XML when they prefer it): their
  // Failed SOP Sequence was not read, so a 202 whose only instance was refused was "stored".
  it.each([
    [{ status: 200, xml: true }, 'delivered', 'SR stored by the PACS (200)'],
    [
      { status: 202, xml: true, failureReason: 0xc000 },
      'dead',
      'the PACS answered 202 to the SR (1 refused: 0xC000 cannot understand)',
    ],
    [
      { status: 409, xml: true, failureReason: 0xa900 },
      'dead',
      'the PACS answered 409 to the SR (1 refused: 0xA900 data set does not match SOP class)',
    ],
    [
      { status: 409, xml: true, failureReason: 0xa700 },
      'retry',
      'the PACS answered 409 to the SR (1 refused: 0xA700 out of resources)',
    ],
    [{ status: 409, xml: true, failureReason: 0x0111 }, 'delivered', 'SR already held by the PACS'],
  ])('an XML answer %j → %s', async (scripted, outcome, said) => {
    answer = scripted;
    const result = await send();
    expect([result.outcome, result.answer]).toEqual([outcome, said]);
    expect(result.response?.contentType).toBe('application/dicom+xml');
  });

  it('a refusal names its Failure Reason and what it means, for the analyst reading the dead letter', async () => {
    answer = { status: 409, failureReason: 0xa900 };
    const result = await send();
    expect(result.outcome).toBe('dead');
    expect(result.answer).toBe(
      'the PACS answered 409 to the SR (1 refused: 0xA900 data set does not match SOP class)',
    );
  });

  it('posts one multipart/related part of type application/dicom', async () => {
    answer = { status: 200 };
    received.length = 0;
    await send('dicom-pdf');
    expect(received[0]!.contentType).toMatch(
      /^multipart\/related; type="application\/dicom"; boundary=iaa-[0-9a-f]+$/,
    );
    expect(received[0]!.bytes).toBeGreaterThan(1000);
  });

  it('an answer that never ends is read up to 1 MiB, not into memory whole', async () => {
    answer = { status: 200, endless: true };
    const before = process.memoryUsage().rss;
    const started = Date.now();
    const result = await send();
    expect(result.detail.httpStatus).toBe(200);
    expect(result.outcome).toBe('delivered'); // 200: the PACS says it stored the instance
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(process.memoryUsage().rss - before).toBeLessThan(200 * 1024 * 1024);
    answer = { status: 200 };
  });

  it("a busy PACS's Retry-After comes with the retry (the outbox waits at least that long)", async () => {
    answer = { status: 503, retryAfter: '120' };
    const result = await send();
    expect(result.outcome).toBe('retry');
    expect(result.retryAfterMs).toBe(120_000);
    answer = { status: 429, retryAfter: 'not a number' };
    expect((await send()).retryAfterMs).toBeUndefined();
    answer = { status: 400, retryAfter: '120' };
    expect(await send()).toMatchObject({ outcome: 'dead' });
    answer = { status: 200 };
  });

  it('a PACS that cannot be reached is retried', async () => {
    const result = await new DicomWebResultPublisher({
      baseUrl: 'http://127.0.0.1:9/dicom-web',
    }).deliver({ id: '8', kind: 'dicom-sr', attempts: 1 }, {
      input: publicationInput('DELIVERED'),
      source: sourceStudy(),
    } as never);
    expect(result.outcome).toBe('retry');
  });
});

/** A STOW-RS answer in the Native DICOM Model, shaped as PS3.19 A.1 and PS3.18 10.5.3 give it. */
function nativeDicomModelAnswer(failureReason: number | string | undefined): string {
  const attribute = (tag: string, vr: string, keyword: string, value: string) =>
    `<DicomAttribute tag="${tag}" vr="${vr}" keyword="${keyword}"><Value number="1">${value}</Value></DicomAttribute>`;
  const item = (reason?: number | string) =>
    `<Item number="1">${attribute('00081150', 'UI', 'ReferencedSOPClassUID', '1.2.840.10008.5.1.4.1.1.88.22')}` +
    `${attribute('00081155', 'UI', 'ReferencedSOPInstanceUID', '2.25.1')}` +
    (reason === undefined
      ? attribute(
          '00081190',
          'UR',
          'RetrieveURL',
          'http://pacs/dicom-web/studies/2.25.9?a=1&amp;b=2',
        )
      : attribute('00081197', 'US', 'FailureReason', String(reason))) +
    '</Item>';
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    '<NativeDicomModel xmlns="http://dicom.nema.org/PS3.19/models/NativeDICOM">',
    attribute('00081190', 'UR', 'RetrieveURL', 'http://pacs/dicom-web/studies/2.25.9'),
    failureReason === undefined
      ? `<DicomAttribute tag="00081199" vr="SQ" keyword="ReferencedSOPSequence">${item()}</DicomAttribute>`
      : `<DicomAttribute tag="00081198" vr="SQ" keyword="FailedSOPSequence">${item(failureReason)}</DicomAttribute>`,
    '</NativeDicomModel>',
  ].join('\n');
}
