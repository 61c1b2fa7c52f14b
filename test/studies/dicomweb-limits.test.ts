import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { DicomWebClient } from '../../src/studies/dicomweb.client';
import { DefaultStudyAcquirer } from '../../src/studies/study-acquirer.service';
import { StudyStoragePaths } from '../../src/studies/study-storage.paths';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { generateUid } from '../helpers/dicom-factory';
import { rawInstance } from '../helpers/raw-dicom';
import { insertOrder, multipartRelated } from './study-test-support';
import { gzipSync } from 'node:zlib';

jest.setTimeout(60_000);

/**
 * A PACS over DICOMweb whose study is larger than we take: the QIDO-RS count above
 * DICOMWEB_MAX_INSTANCES is not retrieved, and a WADO-RS answer that passes the byte or
 * instance limit while streaming (an endless one included) is cut off with nothing left on
 * disk. Before, WADO-RS had no limit: a 100,000-instance study or an endless answer filled
 * DATA_DIR (the DIMSE pull had its limits already).
 */
describe('DICOMweb pull limits', () => {
  let server: Server;
  let base: string;
  let db: TestDatabase;
  let dataDir: string;
  let studyUid = '';
  let wadoRequests = 0;
  let bytesSent = 0;
  /** What WADO-RS sends: parts of `partBytes`, `parts` of them (Infinity: until we hang up). */
  let wado = { parts: Infinity, partBytes: 256 * 1024 };
  let qidoCount = 100_000;
  /** When set, QIDO-RS answers this body instead (a PACS's own shape of DICOM JSON). */
  let qidoBody: string | undefined;
  let wadoWithoutClose = false;
  let wadoStatus = 200;
  /** When set, the WADO-RS parts are these instances (else parts of `A`s). */
  let wadoInstances: Buffer[] | undefined;
  /**
   * When set, WADO-RS sends bytes outside any part for as long as we read: a preamble that
   * never reaches a boundary, or an epilogue that never ends after the close delimiter.
   */
  let wadoJunk: 'preamble' | 'epilogue' | undefined;
  /**
   * Both answers gzip-compressed: unless the request asks for identity (RFC 9110 §12.5.3: to a
   * client without Accept-Encoding any coding is acceptable), or always (a server ignoring it).
   */
  let gzipAnswers: 'unless-identity' | 'always' | false = false;
  /** Accept-Encoding of each request, as sent. */
  const acceptEncodings: Array<string | undefined> = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    dataDir = mkdtempSync(join(tmpdir(), 'dicomweb-limits-'));
    server = createServer((req, res) => {
      acceptEncodings.push(req.headers['accept-encoding']);
      if (gzipAnswers) {
        // A server compressing what a client without Accept-Encoding gets: any content coding
        // is acceptable to such a client (RFC 9110 §12.5.3). One instance of the study.
        const { body, contentType } = req.url?.startsWith('/studies?')
          ? {
              body: Buffer.from(
                JSON.stringify([
                  {
                    '0020000D': { vr: 'UI', Value: [studyUid] },
                    '00201208': { vr: 'IS', Value: [1] },
                  },
                ]),
              ),
              contentType: 'application/dicom+json',
            }
          : multipartRelated([{ data: rawInstance({ studyInstanceUid: studyUid }).bytes }]);
        const gzip = gzipAnswers === 'always' || req.headers['accept-encoding'] !== 'identity';
        res.writeHead(200, {
          'content-type': contentType,
          ...(gzip ? { 'content-encoding': 'gzip' } : {}),
        });
        res.end(gzip ? gzipSync(body) : body);
        return;
      }
      if (req.url?.startsWith('/studies?')) {
        res.writeHead(200, { 'content-type': 'application/dicom+json' });
        if (qidoBody !== undefined) return void res.end(qidoBody);
        res.end(
          JSON.stringify([
            {
              '0020000D': { vr: 'UI', Value: [studyUid] },
              '00201208': { vr: 'IS', Value: [qidoCount] },
            },
          ]),
        );
        return;
      }
      wadoRequests++;
      const boundary = 'B0UNDARY';
      res.writeHead(wadoStatus, {
        'content-type': `multipart/related; type="application/dicom"; boundary=${boundary}`,
      });
      let sent = 0;
      const chunk = Buffer.alloc(wado.partBytes, 0x41);
      if (wadoJunk) {
        res.on('error', () => undefined);
        if (wadoJunk === 'epilogue') {
          const [instance] = wadoInstances ?? [chunk];
          res.write(
            Buffer.concat([
              Buffer.from(`--${boundary}\r\nContent-Type: application/dicom\r\n\r\n`),
              instance!,
              Buffer.from(`\r\n--${boundary}--\r\n`),
            ]),
          );
        }
        const junk = Buffer.alloc(64 * 1024, 0x2e);
        const endless = () => {
          while (!res.destroyed) {
            bytesSent += junk.length;
            if (!res.write(junk)) return void res.once('drain', endless);
          }
        };
        endless();
        return;
      }
      const pump = () => {
        while (sent < wado.parts && !res.destroyed) {
          const body = wadoInstances?.[sent] ?? chunk;
          sent++;
          bytesSent += body.length;
          const ok = res.write(
            Buffer.concat([
              Buffer.from(`--${boundary}\r\nContent-Type: application/dicom\r\n\r\n`),
              body,
              Buffer.from('\r\n'),
            ]),
          );
          if (!ok) return void res.once('drain', pump);
        }
        // A body that simply stops, without the close delimiter.
        if (!res.destroyed) res.end(wadoWithoutClose ? undefined : `--${boundary}--\r\n`);
      };
      res.on('error', () => undefined);
      pump();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise((r) => server?.close(r));
    await db?.drop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });
  /**
   * The acquirer pulling from the test PACS (defaults otherwise), and its DICOMweb client to
   * close.
   */
  const pacsAcquirer = (quietPeriodSeconds = 0) => {
    const client = new DicomWebClient({ baseUrl: base });
    const acquirer = new DefaultStudyAcquirer({
      dataSource: db.dataSource,
      paths: new StudyStoragePaths(dataDir),
      logger: pino({ level: 'silent' }),
      dicomWeb: client,
      quietPeriodSeconds,
    });
    return { client, acquirer };
  };
  beforeEach(() => {
    studyUid = generateUid();
    wadoRequests = 0;
    bytesSent = 0;
    qidoBody = undefined;
    wadoWithoutClose = false;
    wadoStatus = 200;
    wadoInstances = undefined;
    wadoJunk = undefined;
    gzipAnswers = false;
    acceptEncodings.length = 0;
  });

  it('an endless WADO-RS answer is cut off at DICOMWEB_MAX_BYTES and its files removed', async () => {
    wado = { parts: Infinity, partBytes: 256 * 1024 };
    const client = new DicomWebClient({ baseUrl: base, maxBytes: 2 * 1024 * 1024 });
    const dir = join(dataDir, 'endless');
    await expect(client.retrieveStudy(studyUid, dir)).rejects.toMatchObject({
      code: 'too_large',
      message: expect.stringMatching(/DICOMWEB_MAX_BYTES/),
    });
    expect(readdirSync(dir)).toEqual([]);
    // Cut off near the limit (socket buffers aside), not after the PACS chose to stop.
    expect(bytesSent).toBeLessThan(64 * 1024 * 1024);
    await client.close();
  });

  it.each([
    ['a preamble that never reaches a boundary', 'preamble'],
    ['an epilogue that never ends after the close delimiter', 'epilogue'],
  ] as const)(
    'a WADO-RS answer of %s is cut off, not read for as long as the PACS sends',
    async (_label, junk) => {
      // Bytes outside any part were never counted against DICOMWEB_MAX_BYTES (only part
      // bodies were), and the parser skips them with bounded memory: a PACS (or a proxy)
      // streaming such an answer held the acquisition, its lease and a job worker for ever,
      // the answer read at full speed (seen: 200 MiB read with DICOMWEB_MAX_BYTES 50 MB).
      wadoJunk = junk;
      wadoInstances = [rawInstance({ studyInstanceUid: studyUid }).bytes];
      const client = new DicomWebClient({ baseUrl: base, maxBytes: 8 * 1024 * 1024 });
      const dir = join(dataDir, `junk-${junk}`);
      await expect(client.retrieveStudy(studyUid, dir)).rejects.toMatchObject({
        code: 'pacs_error',
        message: expect.stringMatching(/bytes outside its parts/),
      });
      expect(readdirSync(dir)).toEqual([]);
      // Stopped soon after the part headers' allowance, socket buffers aside.
      expect(bytesSent).toBeLessThan(8 * 1024 * 1024);
      await client.close();
    },
  );

  it('QIDO-RS and WADO-RS ask for uncompressed answers (Accept-Encoding: identity); a compressed one anyway fails naming its coding', async () => {
    // Without Accept-Encoding any content coding is acceptable (RFC 9110 §12.5.3): a PACS (or
    // its proxy) may gzip. We read neither coding: the QIDO-RS answer failed as "not DICOM
    // JSON" and the WADO-RS one waited every 30 s until the order's deadline as a retrieve that
    // "broke off: no boundary found in the body".
    gzipAnswers = 'unless-identity';
    const { client, acquirer } = pacsAcquirer();
    const orderId = await insertOrder(db.dataSource, { studyInstanceUid: studyUid });
    const request = { orderId, studyInstanceUid: studyUid };
    expect(await acquirer.acquire(request)).toMatchObject({ status: 'waiting' });
    expect(await acquirer.acquire(request)).toMatchObject({ status: 'ready' });
    expect(acceptEncodings).toEqual(['identity', 'identity', 'identity']);

    // A server that compresses all the same: failed naming the coding, not retried for ever.
    gzipAnswers = 'always';
    studyUid = generateUid();
    const other = await insertOrder(db.dataSource, { studyInstanceUid: studyUid });
    expect(await acquirer.acquire({ orderId: other, studyInstanceUid: studyUid })).toEqual({
      status: 'failed',
      reason: expect.stringMatching(/QIDO-RS answered with Content-Encoding gzip/),
    });
    await client.close();
    const web = new DicomWebClient({ baseUrl: base });
    await expect(web.retrieveStudy(studyUid, join(dataDir, 'gzip'))).rejects.toMatchObject({
      code: 'pacs_error',
      message: expect.stringMatching(/WADO-RS answered with Content-Encoding gzip/),
    });
    expect(readdirSync(join(dataDir, 'gzip'))).toEqual([]);
    await web.close();
  });

  it('more parts than DICOMWEB_MAX_INSTANCES: cut off, nothing kept', async () => {
    wado = { parts: 5, partBytes: 1024 };
    const client = new DicomWebClient({ baseUrl: base, maxInstances: 3 });
    const dir = join(dataDir, 'many');
    await expect(client.retrieveStudy(studyUid, dir)).rejects.toMatchObject({
      code: 'too_large',
      message: expect.stringMatching(/more than 3 instances/),
    });
    expect(readdirSync(dir)).toEqual([]);
    await client.close();
  });

  it('a QIDO-RS count of 100,000 instances fails the order without a retrieve', async () => {
    qidoCount = 100_000;
    const { client, acquirer } = pacsAcquirer();
    const orderId = await insertOrder(db.dataSource, { studyInstanceUid: studyUid });
    const result = await acquirer.acquire({ orderId, studyInstanceUid: studyUid });
    expect(result).toMatchObject({
      status: 'failed',
      reason: expect.stringMatching(/100000 instances in the PACS, more than the limit of 10000/),
    });
    expect(wadoRequests).toBe(0);
    await client.close();
  });

  it.each([
    ['a null entry', () => '[null]'],
    [
      'a UID as a bare string',
      () => JSON.stringify([{ '0020000D': { vr: 'UI', Value: studyUid } }]),
    ],
    [
      'an accession as a bare string',
      () =>
        JSON.stringify([
          {
            '0020000D': { vr: 'UI', Value: [studyUid] },
            '00080050': { vr: 'SH', Value: 'ACC-Q1' },
          },
        ]),
    ],
  ])('a QIDO-RS answer with %s fails clearly, nothing retrieved', async (_label, body) => {
    // Before: a TypeError out of acquire() (the job failed with it, again and again), or
    // `"Value": "2.25…"` read as the Study Instance UID "2".
    qidoBody = body();
    const { client, acquirer } = pacsAcquirer();
    const orderId = await insertOrder(db.dataSource, { accessionNumber: 'ACC-Q1' });
    await expect(acquirer.acquire({ orderId, accessionNumber: 'ACC-Q1' })).resolves.toMatchObject({
      status: 'failed',
      reason: expect.stringMatching(/^QIDO-RS answer is not DICOM JSON/),
    });
    expect(wadoRequests).toBe(0);
    await client.close();
  });

  it('a PACS answering the Issuer of Accession Number: a study of another issuer is no candidate, named as such', async () => {
    // A PACS shared by two RIS that number exams alike (dcm4chee answers 0008,0051 to
    // includefield): ACC-SHARED of RIS_B is not the order's ACC-SHARED of RIS_A.
    const ours = generateUid();
    const theirs = generateUid();
    const answer = (uid: string, ns: string) => ({
      '0020000D': { vr: 'UI', Value: [uid] },
      '00080050': { vr: 'SH', Value: ['ACC-SHARED'] },
      '00080051': { vr: 'SQ', Value: [{ '00400031': { vr: 'UT', Value: [ns] } }] },
      '00201208': { vr: 'IS', Value: [1] },
    });
    const { client, acquirer } = pacsAcquirer(60);
    const request = (orderId: string) => ({
      orderId,
      accessionNumber: 'ACC-SHARED',
      accessionIssuer: { namespace: 'RIS_A' },
    });
    // only the other issuer's study: not in the PACS yet, and the timeline says why
    qidoBody = JSON.stringify([answer(theirs, 'RIS_B')]);
    const first = await insertOrder(db.dataSource, { accessionNumber: 'ACC-SHARED' });
    expect(await acquirer.acquire(request(first))).toMatchObject({
      status: 'waiting',
      reason: 'the study is not in the PACS yet',
    });
    const notes = (await db.dataSource.query(
      `SELECT summary FROM audit_events WHERE order_id = $1 AND kind = 'study.retrieve-problem'`,
      [first],
    )) as Array<{ summary: string }>;
    expect(notes.map((n) => n.summary).join()).toMatch(/issued by another authority/);
    // both: the order's own study is the one waited for, not "matches 2 studies"
    qidoBody = JSON.stringify([answer(theirs, 'RIS_B'), answer(ours, 'RIS_A')]);
    const second = await insertOrder(db.dataSource, { accessionNumber: 'ACC-SHARED' });
    expect(await acquirer.acquire(request(second))).toMatchObject({ status: 'waiting' });
    const [row] = (await db.dataSource.query(
      `SELECT study_instance_uid FROM study_acquisitions WHERE order_id = $1`,
      [second],
    )) as Array<{ study_instance_uid: string }>;
    expect(row!.study_instance_uid).toBe(ours);
    expect(wadoRequests).toBe(0);
    await client.close();
  });

  it('a QIDO-RS answer with numbers as strings, PN as an object and attributes left out is read', async () => {
    // Shapes PACS send (PS3.18 F.2: IS as a string is allowed, PN is an object); the absent
    // series count and Issuer of Patient ID are simply unknown.
    qidoBody = JSON.stringify([
      {
        '0020000D': { vr: 'UI', Value: [studyUid] },
        '00080050': { vr: 'SH', Value: ['ACC-Q2'] },
        '00100010': { vr: 'PN', Value: [{ Alphabetic: 'Doe^Jane' }] },
        '00100020': { vr: 'LO', Value: ['PID-Q2'] },
        '00201208': { vr: 'IS', Value: ['7'] },
      },
    ]);
    const client = new DicomWebClient({ baseUrl: base });
    expect(await client.findStudies({ accessionNumber: 'ACC-Q2' })).toEqual([
      {
        studyInstanceUid: studyUid,
        accessionNumber: 'ACC-Q2',
        patientId: 'PID-Q2',
        instanceCount: 7,
      },
    ]);
    await client.close();
  });

  it('a WADO-RS answer that ends without its close delimiter is a broken-off retrieve: the order waits', async () => {
    // The body stops after a part (a server cut off mid-answer, a proxy ending a chunked or
    // close-delimited body early): whether the last part is whole is unknown. Before: failed
    // for good ("multipart body: the body ended inside a part"), while the same answer cut by
    // a reset connection waited and was retried.
    wado = { parts: 2, partBytes: 1024 };
    wadoWithoutClose = true;
    qidoCount = 2;
    const { client, acquirer } = pacsAcquirer();
    const orderId = await insertOrder(db.dataSource, { studyInstanceUid: studyUid });
    const request = { orderId, studyInstanceUid: studyUid };
    expect(await acquirer.acquire(request)).toMatchObject({ status: 'waiting' });
    expect(await acquirer.acquire(request)).toMatchObject({
      status: 'waiting',
      reason: 'WADO-RS retrieve broke off: multipart body: the body ended inside a part',
    });
    expect(wadoRequests).toBe(1);
    expect(existsSync(new StudyStoragePaths(dataDir).pulledDir(orderId))).toBe(false);
    const notes = (await db.dataSource.query(
      `SELECT kind FROM audit_events WHERE order_id = $1 AND kind IN ('study.retrieve-problem', 'study.failed')`,
      [orderId],
    )) as Array<{ kind: string }>;
    expect(notes.map((n) => n.kind)).toEqual(['study.retrieve-problem']);
    await client.close();
  });

  it.each([
    ['sends fewer instances than its QIDO-RS count', 200],
    ['answers 206 Partial Content', 206],
  ])('a PACS that %s: nothing packaged, the order waits and asks again', async (_label, status) => {
    // PS3.18 §10.4.3: 206 when the origin server could return only some instances (nearline
    // storage, a codec it lacks). Before: the parts that came were validated, packaged and
    // uploaded as the whole study.
    wado = { parts: 2, partBytes: 1024 };
    wadoStatus = status;
    qidoCount = 3;
    wadoInstances = [1, 2].map(() => rawInstance({ studyInstanceUid: studyUid }).bytes);
    const { client, acquirer } = pacsAcquirer();
    const orderId = await insertOrder(db.dataSource, { studyInstanceUid: studyUid });
    const request = { orderId, studyInstanceUid: studyUid };
    expect(await acquirer.acquire(request)).toMatchObject({ status: 'waiting' });
    const second = await acquirer.acquire(request);
    expect(second).toMatchObject({
      status: 'waiting',
      reason:
        status === 206
          ? 'WADO-RS answered 206 Partial Content: the PACS could not send every instance'
          : 'the PACS counts 3 instance(s) but sent 2; asked again after the quiet period',
    });
    expect(existsSync(new StudyStoragePaths(dataDir).pulledDir(orderId))).toBe(false);
    expect(existsSync(new StudyStoragePaths(dataDir).packageFile(orderId))).toBe(false);
    const kinds = (await db.dataSource.query(
      `SELECT kind FROM audit_events WHERE order_id = $1 AND kind LIKE 'study.%'`,
      [orderId],
    )) as Array<{ kind: string }>;
    expect(kinds.map((k) => k.kind)).toEqual(['study.retrieve-problem']);
    // Asked again: a 206 at once (the lifecycle calls back after 30 s), a short answer after
    // the quiet period has run again on the PACS's count.
    expect(await acquirer.acquire(request)).toMatchObject({ status: 'waiting' });
    expect(wadoRequests).toBe(status === 206 ? 2 : 1);
    await client.close();
  });
});
