import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, relative, sep } from 'node:path';
import { promisify } from 'node:util';
import pino from 'pino';
import { freePort } from '../../src/persistence/embedded-postgres';
import { DicomWebClient } from '../../src/studies/dicomweb.client';
import { DefaultStudyAcquirer } from '../../src/studies/study-acquirer.service';
import { StudyStoragePaths } from '../../src/studies/study-storage.paths';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { createMrBrainSeries, generateUid, type DicomInstance } from '../helpers/dicom-factory';
import { insertOrder, multipartRelated } from './study-test-support';

const run = promisify(execFile);

/** A marker no real file has: any file or directory named with it escaped somewhere. */
const MARK = `hx${process.pid}z`;

/**
 * Hostile UID values, written into the file as they are (the UID's bytes replaced in place,
 * padded with NUL as UI values are). dcmjs drops the characters a UID may not hold when it
 * decodes one, so `../../x` would read as `....`: the checks must see the raw value.
 */
const HOSTILE = [
  `../../../../../../tmp/${MARK}`,
  `/tmp/${MARK}`,
  `1.2.3/../../../${MARK}`,
  '..',
  '.',
  '1..2',
  `1.2.3\\..\\..\\${MARK}`,
  `C:\\${MARK}`,
];

type Which = 'sopInstanceUid' | 'studyInstanceUid' | 'seriesInstanceUid';

/** The instance with one of its UIDs replaced by `value` (NUL-padded to the same length). */
function withUid(instance: DicomInstance, which: Which, value: string): Buffer {
  const original = Buffer.from(instance[which]);
  if (value.length > original.length) throw new Error(`hostile value longer than ${which}`);
  const hostile = Buffer.concat([
    Buffer.from(value, 'latin1'),
    Buffer.alloc(original.length - value.length),
  ]);
  const bytes = Buffer.from(instance.bytes);
  let replaced = 0;
  for (let at = bytes.indexOf(original); at >= 0; at = bytes.indexOf(original, at + 1)) {
    hostile.copy(bytes, at);
    replaced++;
  }
  if (replaced === 0) throw new Error(`${which} not found in the instance`);
  return bytes;
}

/**
 * An instance whose Study Instance UID is well-formed but 66 characters long (PS3.5 allows
 * 64): spliced into the data set, with the element's length, since dcmjs cuts long values.
 */
function tooLong(): Buffer {
  const [inst] = createMrBrainSeries({ series: { slices: 1 } });
  const bytes = inst!.bytes;
  const original = Buffer.from(inst!.studyInstanceUid);
  // (0020,000D) UI, explicit VR little endian: tag, "UI", 16-bit length, value.
  const header = Buffer.from([0x20, 0x00, 0x0d, 0x00, 0x55, 0x49]);
  const at = bytes.indexOf(header);
  const length = bytes.readUInt16LE(at + 6);
  expect(bytes.subarray(at + 8, at + 8 + original.length).equals(original)).toBe(true);
  const long = Buffer.from(`1.2.${'9'.repeat(62)}`);
  const lengthField = Buffer.alloc(2);
  lengthField.writeUInt16LE(long.length);
  return Buffer.concat([
    bytes.subarray(0, at + 6),
    lengthField,
    long,
    bytes.subarray(at + 8 + length),
  ]);
}

/** Every hostile instance: each value in each of the three UIDs. */
function hostileInstances(): Array<{ label: string; bytes: Buffer }> {
  const out: Array<{ label: string; bytes: Buffer }> = [];
  for (const which of ['sopInstanceUid', 'studyInstanceUid', 'seriesInstanceUid'] as const) {
    for (const value of HOSTILE) {
      const [inst] = createMrBrainSeries({ series: { slices: 1 } });
      out.push({ label: `${which}=${JSON.stringify(value)}`, bytes: withUid(inst!, which, value) });
    }
  }
  out.push({ label: 'study UID of 66 characters', bytes: tooLong() });
  return out;
}

/** Every file under `dir`, relative to it. */
function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(dir, p));
    }
  };
  walk(dir);
  return out.sort();
}

/** Files named with the marker in the study store's tree or at the top of the temp directory. */
function escapedFiles(dataDir: string): string[] {
  const found = readdirSync(tmpdir())
    .filter((name) => name.includes(MARK))
    .map((name) => join(tmpdir(), name));
  for (const f of filesUnder(dataDir)) if (f.includes(MARK)) found.push(join(dataDir, f));
  return found;
}

/**
 * Hostile UIDs at every inbound DICOM path of the adapter — STOW-RS, the C-STORE SCP and
 * the DICOMweb pull from a PACS — never name a file outside the study store: instances
 * whose SOP, Study or Series Instance UID is not a UID (traversal, separators, dot-only,
 * empty components, several values, over 64 characters) are refused, nothing of them is
 * kept, and no file appears anywhere else.
 */
describe('hostile UIDs at the inbound DICOM paths', () => {
  let adapter: TestAdapter;
  let scpPort: number;
  let dir: string;
  const AE = 'ADAPTER-HOSTILE';

  beforeAll(async () => {
    scpPort = await freePort();
    adapter = await startTestAdapter({
      DICOM_SCP_PORT: String(scpPort),
      DICOM_SCP_AE_TITLE: AE,
      STUDY_QUIET_PERIOD_SECONDS: '1',
      JOBS_ENABLED: 'false',
    });
    dir = mkdtempSync(join(tmpdir(), 'hostile-uids-'));
  });
  afterAll(async () => {
    await adapter?.close();
    if (adapter) rmSync(adapter.dataDir, { recursive: true, force: true });
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const storedInstances = async () =>
    (await adapter.dataSource.query(
      `SELECT sop_instance_uid, study_instance_uid, file_path FROM study_instances`,
    )) as Array<{ sop_instance_uid: string; study_instance_uid: string; file_path: string }>;

  it('STOW-RS refuses them all, keeps the valid one, and writes nothing elsewhere', async () => {
    const [valid] = createMrBrainSeries({ series: { slices: 1 } });
    const hostile = hostileInstances();
    const { body, contentType } = multipartRelated([
      { data: valid!.bytes },
      ...hostile.map((h) => ({ data: h.bytes })),
    ]);
    const res = await fetch(`${adapter.httpUrl}/dicomweb/studies`, {
      method: 'POST',
      headers: {
        'content-type': contentType,
        accept: 'application/dicom+json',
        authorization: `Bearer ${TEST_TOKENS.sender}`,
      },
      body,
    });
    expect(res.status).toBe(202);
    const json = (await res.json()) as Record<string, { Value?: unknown[] }>;
    expect(json['00081199']?.Value).toHaveLength(1);
    expect(json['00081198']?.Value).toHaveLength(hostile.length);

    const paths = new StudyStoragePaths(adapter.dataDir);
    const filed = filesUnder(join(paths.root, 'instances'));
    expect(filed).toHaveLength(1);
    expect(filed[0]!.startsWith(join(valid!.studyInstanceUid, `${valid!.sopInstanceUid}.`))).toBe(
      true,
    );
    expect(filesUnder(paths.incomingDir)).toEqual([]);
    const rows = await storedInstances();
    expect(rows.map((r) => r.sop_instance_uid)).toEqual([valid!.sopInstanceUid]);
    for (const r of rows) expect(r.file_path.startsWith(paths.root + sep)).toBe(true);
    expect(escapedFiles(adapter.dataDir)).toEqual([]);
  });

  it('a refused instance is named in the STOW-RS answer and the audit log by its UIDs only when they are UIDs', async () => {
    // The raw values were echoed: into the FailedSOPSequence as UI values (`../../<script>`,
    // an escape sequence and a BEL, seen on a running adapter) and into the audit entry an
    // analyst reads. A UI value holds digits and dots (PS3.5 §9.1); the entry's reason says
    // which UID was not one, and the bytes are kept (keptAs) for whoever needs the value.
    const values = [...HOSTILE, `1.2.3\u001b[2J\u0007`, `<script>${MARK}</script>`];
    const parts = values.map((value) => {
      const [inst] = createMrBrainSeries({ series: { slices: 1 } });
      return { data: withUid(inst!, 'sopInstanceUid', value) };
    });
    const { body, contentType } = multipartRelated(parts);
    const res = await fetch(`${adapter.httpUrl}/dicomweb/studies`, {
      method: 'POST',
      headers: {
        'content-type': contentType,
        accept: 'application/dicom+json',
        authorization: `Bearer ${TEST_TOKENS.sender}`,
      },
      body,
    });
    expect(res.status).toBe(409);
    const json = (await res.json()) as Record<string, { Value?: Array<Record<string, unknown>> }>;
    const failed = json['00081198']!.Value!;
    expect(failed).toHaveLength(values.length);
    const uidValues = (item: Record<string, unknown>) =>
      ['00081150', '00081155'].flatMap(
        (tag) => ((item[tag] as { Value?: unknown[] } | undefined)?.Value ?? []) as unknown[],
      );
    const notUids = failed.flatMap(uidValues).filter((v) => !/^[0-9]+(\.[0-9]+)*$/.test(String(v)));
    expect(notUids).toEqual([]);
    const [entry] = (await adapter.dataSource.query(
      `SELECT detail FROM audit_events WHERE kind = 'study.received' ORDER BY id DESC LIMIT 1`,
    )) as Array<{ detail: { refused: Array<{ sopInstanceUid?: string; reason: string }> } }>;
    expect(entry!.detail.refused).toHaveLength(values.length);
    for (const r of entry!.detail.refused) {
      expect(r.reason).toBe('missing or invalid SOP Instance UID');
      expect(r.sopInstanceUid).toBeUndefined();
    }
  });

  it('STOW-RS refuses a study path that is not a UID', async () => {
    const [valid] = createMrBrainSeries({ series: { slices: 1 } });
    const { body, contentType } = multipartRelated([{ data: valid!.bytes }]);
    // Raw paths, as a hostile client sends them (fetch would normalise the dots away).
    const post = (path: string) =>
      new Promise<number>((resolveStatus, reject) => {
        const req = httpRequest(`${adapter.httpUrl}${path}`, {
          method: 'POST',
          headers: {
            'content-type': contentType,
            authorization: `Bearer ${TEST_TOKENS.sender}`,
          },
        });
        req.on('response', (r) => {
          r.resume();
          resolveStatus(r.statusCode!);
        });
        req.on('error', reject);
        req.end(body);
      });
    for (const path of [
      '/dicomweb/studies/..',
      '/dicomweb/studies/1..2',
      `/dicomweb/studies/..%2F..%2F${MARK}`,
      `/dicomweb/studies/1.2.${'3'.repeat(70)}`,
    ])
      // 400 from the route's check; a dot-only segment may not even reach the route (404).
      expect([path, [400, 404].includes(await post(path))]).toEqual([path, true]);
    expect((await storedInstances()).map((r) => r.sop_instance_uid)).not.toContain(
      valid!.sopInstanceUid,
    );
  });

  it('the C-STORE SCP refuses them all and writes nothing elsewhere', async () => {
    const before = (await storedInstances()).length;
    const hostile = hostileInstances();
    const outcomes: string[] = [];
    for (const [i, h] of hostile.entries()) {
      const file = join(dir, `hostile-${i}.dcm`);
      writeFileSync(file, h.bytes);
      const result = await run('storescu', ['-v', '-aec', AE, '127.0.0.1', String(scpPort), file])
        .then((r) => `${r.stdout}${r.stderr}`)
        .catch((e: { stdout: string; stderr: string }) => `${e.stdout}${e.stderr}`);
      const response = /Received Store Response \(([^)]*)\)/.exec(result)?.[1];
      outcomes.push(`${h.label}: ${response ?? 'no response'}`);
    }
    // Each one answered A900 (DCMTK: "DataSetDoesNotMatchSOPClass", PS3.4 Table B.2-1).
    expect(outcomes).toEqual(hostile.map((h) => `${h.label}: Error: DataSetDoesNotMatchSOPClass`));
    expect((await storedInstances()).length).toBe(before);
    const paths = new StudyStoragePaths(adapter.dataDir);
    expect(filesUnder(paths.incomingDir)).toEqual([]);
    expect(escapedFiles(adapter.dataDir)).toEqual([]);
  });
});

/** A PACS answering with hostile data: QIDO names the study, WADO returns the parts. */
describe('hostile UIDs from a PACS (DICOMweb pull)', () => {
  let db: TestDatabase;
  let dataDir: string;
  let pacs: Server;
  let base = '';
  let qido: unknown[] = [];
  let wado: Buffer[] = [];
  const requests: string[] = [];
  let clock = Date.parse('2026-11-21T10:00:00Z');

  beforeAll(async () => {
    db = await createTestDatabase();
    dataDir = mkdtempSync(join(tmpdir(), 'hostile-pacs-'));
    pacs = createServer((req, res) => {
      requests.push(req.url ?? '');
      if (req.url?.startsWith('/dicom-web/studies?')) {
        res.writeHead(200, { 'content-type': 'application/dicom+json' }).end(JSON.stringify(qido));
        return;
      }
      const { body, contentType } = multipartRelated(wado.map((data) => ({ data })));
      res.writeHead(200, { 'content-type': contentType }).end(body);
    });
    await new Promise<void>((r) => pacs.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(pacs.address() as AddressInfo).port}/dicom-web`;
  });
  afterAll(async () => {
    await new Promise((r) => pacs?.close(r));
    await db?.drop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  const acquirer = () =>
    new DefaultStudyAcquirer({
      dataSource: db.dataSource,
      paths: new StudyStoragePaths(dataDir),
      logger: pino({ level: 'silent' }),
      dicomWeb: new DicomWebClient({ baseUrl: base }),
      quietPeriodSeconds: 1,
      now: () => new Date(clock),
    });
  /** A QIDO answer as a PACS gives it for an accession query: the accession it was asked for. */
  const qidoStudy = (uid: string, count: number, accession: string) => ({
    '0020000D': { vr: 'UI', Value: [uid] },
    '00080050': { vr: 'SH', Value: [accession] },
    '00201208': { vr: 'IS', Value: [count] },
    '00201206': { vr: 'IS', Value: [1] },
  });
  /** Two calls: the first sees the count, the second (after the quiet period) retrieves. */
  const acquireTwice = async (request: { orderId: string; accessionNumber: string }) => {
    const a = acquirer();
    const first = await a.acquire(request);
    expect(first.status).toBe('waiting');
    clock += 2_000;
    return a.acquire(request);
  };

  it('refuses retrieved instances with hostile UIDs: no package, nothing kept, nothing elsewhere', async () => {
    const studyUid = generateUid();
    const series = createMrBrainSeries({
      study: { studyInstanceUid: studyUid },
      series: { slices: 3 },
    });
    wado = [
      series[0]!.bytes,
      withUid(series[1]!, 'sopInstanceUid', `../../../../tmp/${MARK}`),
      withUid(series[2]!, 'seriesInstanceUid', '..'),
    ];
    qido = [qidoStudy(studyUid, 3, 'HOSTILE-1')];
    const orderId = await insertOrder(db.dataSource, { accessionNumber: 'HOSTILE-1' });
    expect(await acquireTwice({ orderId, accessionNumber: 'HOSTILE-1' })).toEqual({
      status: 'failed',
      reason:
        '2 of 3 retrieved instance(s) are not valid DICOM: instance 2: missing or invalid SOP Instance UID; instance 3: missing or invalid Series Instance UID',
    });
    const paths = new StudyStoragePaths(dataDir);
    expect(filesUnder(paths.root)).toEqual([]);
    expect(escapedFiles(dataDir)).toEqual([]);
  });

  it('refuses a Study Instance UID from QIDO that is not a UID before retrieving anything', async () => {
    for (const [i, hostile] of ['..', `../../${MARK}`, '1..2'].entries()) {
      requests.length = 0;
      qido = [qidoStudy(hostile, 1, `HOSTILE-Q${i}`)];
      wado = [createMrBrainSeries({ series: { slices: 1 } })[0]!.bytes];
      const orderId = await insertOrder(db.dataSource, { accessionNumber: `HOSTILE-Q${i}` });
      expect(await acquirer().acquire({ orderId, accessionNumber: `HOSTILE-Q${i}` })).toEqual({
        status: 'failed',
        reason: 'the PACS answered a Study Instance UID that is not a UID',
      });
      // QIDO only: no WADO-RS request was built from the hostile value.
      expect(requests.every((u) => u.startsWith('/dicom-web/studies?'))).toBe(true);
    }
    expect(filesUnder(new StudyStoragePaths(dataDir).root)).toEqual([]);
    expect(escapedFiles(dataDir)).toEqual([]);
  });
});

/**
 * A PACS whose QIDO-RS answer keeps a UID's padding: PS3.5 §9.1 pads a UI value of odd length
 * with one trailing NUL, and a PACS that converts its stored bytes to DICOM JSON without
 * removing it answers `"1.2.3\u0000"`. That is the UID 1.2.3, not a hostile value.
 */
describe('a PACS answering padded UIDs (DICOMweb pull)', () => {
  let db: TestDatabase;
  let dataDir: string;
  let pacs: Server;
  let base = '';
  let qido: unknown[] = [];
  let wado: Buffer[] = [];
  const requests: string[] = [];
  let clock = Date.parse('2026-11-21T10:00:00Z');

  beforeAll(async () => {
    db = await createTestDatabase();
    dataDir = mkdtempSync(join(tmpdir(), 'padded-pacs-'));
    pacs = createServer((req, res) => {
      requests.push(req.url ?? '');
      if (req.url?.startsWith('/dicom-web/studies?')) {
        res.writeHead(200, { 'content-type': 'application/dicom+json' }).end(JSON.stringify(qido));
        return;
      }
      const { body, contentType } = multipartRelated(wado.map((data) => ({ data })));
      res.writeHead(200, { 'content-type': contentType }).end(body);
    });
    await new Promise<void>((r) => pacs.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(pacs.address() as AddressInfo).port}/dicom-web`;
  });
  afterAll(async () => {
    await new Promise((r) => pacs?.close(r));
    await db?.drop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it.each([
    ['accession number', false],
    ['Study Instance UID', true],
  ])('an order found by %s gets its study: the trailing NUL is padding', async (_label, byUid) => {
    // a UID of odd length, as PS3.5 pads it
    let studyUid = generateUid();
    if (studyUid.length % 2 === 0) studyUid = `${studyUid}7`;
    const accession = `PADDED-${byUid ? 'U' : 'A'}`;
    const series = createMrBrainSeries({
      study: { studyInstanceUid: studyUid, accessionNumber: accession },
      series: { slices: 2 },
    });
    wado = series.map((s) => s.bytes);
    qido = [
      {
        '0020000D': { vr: 'UI', Value: [`${studyUid}\u0000`] },
        '00080050': { vr: 'SH', Value: [accession] },
        '00201208': { vr: 'IS', Value: [2] },
      },
    ];
    const orderId = await insertOrder(db.dataSource, {
      accessionNumber: accession,
      ...(byUid ? { studyInstanceUid: studyUid } : {}),
    });
    const request = byUid
      ? { orderId, studyInstanceUid: studyUid }
      : { orderId, accessionNumber: accession };
    const acquirer = new DefaultStudyAcquirer({
      dataSource: db.dataSource,
      paths: new StudyStoragePaths(dataDir),
      logger: pino({ level: 'silent' }),
      dicomWeb: new DicomWebClient({ baseUrl: base }),
      quietPeriodSeconds: 1,
      now: () => new Date(clock),
    });
    requests.length = 0;
    expect(await acquirer.acquire(request)).toMatchObject({ status: 'waiting' });
    clock += 2_000;
    // before: failed, "the PACS answered a Study Instance UID that is not a UID" (by
    // accession), or waiting for ever as if the PACS had answered another study (by UID)
    expect(await acquirer.acquire(request)).toMatchObject({
      status: 'ready',
      study: { studyInstanceUid: studyUid, instanceCount: 2 },
    });
    // the WADO-RS path names the UID without its padding
    expect(requests.filter((u) => !u.includes('?'))).toEqual([`/dicom-web/studies/${studyUid}`]);
  });
});
