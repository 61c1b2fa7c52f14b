import { existsSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { request } from 'undici';
import pino from 'pino';
import { DefaultStudyAcquirer } from '../../src/studies/study-acquirer.service';
import { StudyStoragePaths } from '../../src/studies/study-storage.paths';
import { StowService } from '../../src/studies/stow.service';
import { STUDY_ACQUIRER, type StudyAcquirer } from '../../src/domain/study-acquirer.port';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import {
  createMrBrainStudy,
  generateUid,
  IMPLICIT_VR_LITTLE_ENDIAN,
  notDicomBytes,
  shortPixelData,
  truncatePixelData,
} from '../helpers/dicom-factory';
import { insertOrder, multipartRelated, readZip, sha256 } from './study-test-support';
import { rawInstance } from '../helpers/raw-dicom';
import { inflateRawSync } from 'node:zlib';

type DicomJson = Record<
  string,
  { vr: string; Value?: Array<Record<string, { Value: unknown[] }>> }
>;

/** STOW-RS (PS3.18 §10.5) into the running adapter: storage, validation, matching, holding. */
describe('STOW-RS endpoint POST /dicomweb/studies', () => {
  let adapter: TestAdapter;
  const MAX_BYTES = 8 * 1024 * 1024;

  beforeAll(async () => {
    adapter = await startTestAdapter({
      STUDY_QUIET_PERIOD_SECONDS: '1',
      STUDY_UNMATCHED_HOLD_MINUTES: '60',
      STOW_MAX_REQUEST_BYTES: String(MAX_BYTES),
      STOW_MAX_INSTANCES: '20',
      JOBS_ENABLED: 'false',
    });
  });
  afterAll(async () => {
    await adapter?.close();
    if (adapter) rmSync(adapter.dataDir, { recursive: true, force: true });
  });

  const stow = async (
    body: Buffer,
    contentType: string,
    options: { path?: string; token?: string | null; accept?: string } = {},
  ) => {
    const res = await request(`${adapter.httpUrl}${options.path ?? '/dicomweb/studies'}`, {
      method: 'POST',
      headers: {
        'content-type': contentType,
        accept: options.accept ?? 'application/dicom+json',
        ...(options.token === null
          ? {}
          : { authorization: `Bearer ${options.token ?? TEST_TOKENS.sender}` }),
      },
      body,
    });
    const text = await res.body.text();
    return {
      status: res.statusCode,
      contentType: String(res.headers['content-type']),
      json: text ? (JSON.parse(text) as DicomJson) : {},
    };
  };

  /**
   * Sends a body the server may stop reading: node:http with an error listener, so the
   * EPIPE/ECONNRESET of the unread rest cannot escape the test.
   */
  const postUnread = (body: Buffer, contentType: string, withLength: boolean) =>
    new Promise<{ status: number; connection?: string }>((resolve, reject) => {
      const req = httpRequest(`${adapter.httpUrl}/dicomweb/studies`, {
        method: 'POST',
        headers: {
          'content-type': contentType,
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          ...(withLength ? { 'content-length': String(body.length) } : {}),
        },
      });
      let answered = false;
      req.on('response', (res) => {
        answered = true;
        res.resume();
        resolve({ status: res.statusCode!, connection: res.headers.connection });
      });
      req.on('error', (err) => (answered ? undefined : reject(err)));
      let at = 0;
      const pump = (): void => {
        while (at < body.length && !req.destroyed && !answered) {
          const chunk = body.subarray(at, at + 256 * 1024);
          at += chunk.length;
          if (!req.write(chunk)) {
            req.once('drain', pump);
            return;
          }
        }
        if (answered) req.destroy();
        else if (!req.destroyed) req.end();
      };
      pump();
    });

  const items = (json: DicomJson, tag: '00081199' | '00081198') =>
    (json[tag]?.Value ?? []).map((item) => ({
      sopClassUid: item['00081150']?.Value[0],
      sopInstanceUid: item['00081155']?.Value[0],
      failureReason: item['00081197']?.Value[0],
    }));

  it('stores valid instances and refuses the others with PS3.18 failure reasons (202)', async () => {
    const study = createMrBrainStudy({
      series: [
        { slices: 2, seriesDescription: 'T1' },
        { slices: 2, seriesDescription: 'FLAIR', transferSyntaxUid: IMPLICIT_VR_LITTLE_ENDIAN },
      ],
    });
    const truncated = createMrBrainStudy({ series: [{ slices: 1 }] })[0]!;
    const short = createMrBrainStudy({ series: [{ slices: 1 }] })[0]!;
    const { body, contentType } = multipartRelated([
      { data: study[0]!.bytes },
      { data: notDicomBytes() },
      { data: study[1]!.bytes },
      { data: truncatePixelData(truncated.bytes, 100) },
      { data: study[2]!.bytes },
      { data: shortPixelData(short.bytes, 64) },
      { data: study[3]!.bytes },
    ]);
    const res = await stow(body, contentType);
    expect(res.status).toBe(202);
    expect(res.contentType).toMatch(/^application\/dicom\+json/);
    expect(items(res.json, '00081199')).toEqual(
      study.map((i) => ({
        sopClassUid: '1.2.840.10008.5.1.4.1.1.4',
        sopInstanceUid: i.sopInstanceUid,
        failureReason: undefined,
      })),
    );
    expect(items(res.json, '00081198')).toEqual([
      { sopClassUid: undefined, sopInstanceUid: undefined, failureReason: 0xc000 },
      {
        sopClassUid: '1.2.840.10008.5.1.4.1.1.4',
        sopInstanceUid: truncated.sopInstanceUid,
        failureReason: 0xa900,
      },
      {
        sopClassUid: '1.2.840.10008.5.1.4.1.1.4',
        sopInstanceUid: short.sopInstanceUid,
        failureReason: 0xa900,
      },
    ]);

    // Stored byte for byte on disk, recorded, unmatched (no order yet), held.
    const rows = (await adapter.dataSource.query(
      `SELECT sop_instance_uid, file_path, order_id, hold_until > now() AS held, source
         FROM study_instances WHERE study_instance_uid = $1`,
      [study[0]!.studyInstanceUid],
    )) as Array<{
      sop_instance_uid: string;
      file_path: string;
      order_id: string | null;
      held: boolean;
      source: string;
    }>;
    expect(rows).toHaveLength(4);
    for (const r of rows) {
      expect(r).toMatchObject({ order_id: null, held: true, source: 'stow' });
      const original = study.find((i) => i.sopInstanceUid === r.sop_instance_uid)!;
      expect(sha256(await readFile(r.file_path))).toBe(sha256(original.bytes));
    }
    const [event] = (await adapter.dataSource.query(
      `SELECT severity, actor, detail FROM audit_events WHERE kind = 'study.received'
        AND detail->'studies' ? $1`,
      [study[0]!.studyInstanceUid],
    )) as Array<{
      severity: string;
      actor: string;
      detail: { stored: number; refused: Array<{ reason: string; keptAs?: string }> };
    }>;
    expect(event).toMatchObject({ severity: 'warning', actor: expect.stringMatching(/^sender#/) });
    expect(event!.detail.stored).toBe(4);
    expect(event!.detail.refused.map((r) => r.reason)).toEqual([
      'not a DICOM Part 10 file (no DICM prefix)',
      'pixel data truncated: 2048 bytes declared, 100 present',
      'pixel data incomplete: 64 bytes, rows × columns × frames × samples needs 2048',
    ]);
    // Bad input loses nothing (DESIGN.md §5): each refused part is kept byte for byte, named
    // in the audit entry (they used to be deleted at once). The hold sweeps them later.
    const paths = new StudyStoragePaths(adapter.dataDir);
    const kept = event!.detail.refused.map((r) => readFileSync(paths.refusedFile(r.keptAs!)));
    expect(kept.map(sha256)).toEqual(
      [
        notDicomBytes(),
        truncatePixelData(truncated.bytes, 100),
        shortPixelData(short.bytes, 64),
      ].map(sha256),
    );
  });

  it('answers 409 when nothing could be stored, and 200 when everything was', async () => {
    const none = multipartRelated([{ data: notDicomBytes() }]);
    const refused = await stow(none.body, none.contentType);
    expect(refused.status).toBe(409);
    expect(items(refused.json, '00081198')).toEqual([
      { sopClassUid: undefined, sopInstanceUid: undefined, failureReason: 0xc000 },
    ]);
    expect(refused.json['00081199']).toBeUndefined();

    const study = createMrBrainStudy({ series: [{ slices: 2 }] });
    const all = multipartRelated(study.map((i) => ({ data: i.bytes })));
    const ok = await stow(all.body, all.contentType);
    expect(ok.status).toBe(200);
    expect(items(ok.json, '00081199')).toHaveLength(2);
    expect(ok.json['00081198']).toBeUndefined();
  });

  it('replaces an instance sent again, removing the earlier file if it was filed elsewhere', async () => {
    const [inst] = createMrBrainStudy({ series: [{ slices: 1 }] });
    let part = multipartRelated([{ data: inst!.bytes }]);
    expect((await stow(part.body, part.contentType)).status).toBe(200);
    const before = (await adapter.dataSource.query(
      `SELECT file_path FROM study_instances WHERE sop_instance_uid = $1`,
      [inst!.sopInstanceUid],
    )) as Array<{ file_path: string }>;
    // The same SOP Instance, corrected to another Study Instance UID (same length).
    const oldUid = inst!.studyInstanceUid;
    const newUid = `${oldUid.slice(0, -1)}${oldUid.endsWith('7') ? '8' : '7'}`;
    const bytes = Buffer.from(inst!.bytes);
    for (let at = bytes.indexOf(oldUid); at >= 0; at = bytes.indexOf(oldUid, at + 1))
      bytes.write(newUid, at, 'latin1');
    part = multipartRelated([{ data: bytes }]);
    expect((await stow(part.body, part.contentType)).status).toBe(200);
    const after = (await adapter.dataSource.query(
      `SELECT file_path, study_instance_uid FROM study_instances WHERE sop_instance_uid = $1`,
      [inst!.sopInstanceUid],
    )) as Array<{ file_path: string; study_instance_uid: string }>;
    expect(after).toHaveLength(1);
    expect(after[0]!.study_instance_uid).toBe(newUid);
    expect(existsSync(after[0]!.file_path)).toBe(true);
    expect(existsSync(before[0]!.file_path)).toBe(false);
  });

  it('leaves no file behind when the database refuses to record the instances, and keeps an earlier copy', async () => {
    // A file moved into place whose row was never written is PHI on disk that nothing lists,
    // matches or expires. A real refusal of the write: a trigger on study_instances.
    await adapter.dataSource.query(`
      CREATE FUNCTION refuse_instance() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'instance table refuses writes (test)'; END $$;
      CREATE TRIGGER refuse_instance BEFORE INSERT OR UPDATE ON study_instances
        FOR EACH ROW WHEN (NEW.accession_number IN ('ACC-REFUSED-1', 'ACC-REFUSED-2'))
        EXECUTE FUNCTION refuse_instance();`);
    try {
      const fresh = createMrBrainStudy({
        study: { accessionNumber: 'ACC-REFUSED-1' },
        series: [{ slices: 2 }],
      });
      const part = multipartRelated(fresh.map((i) => ({ data: i.bytes })));
      const answer = await stow(part.body, part.contentType);
      expect(answer.status).toBeGreaterThanOrEqual(500);
      const dir = join(adapter.dataDir, 'studies', 'instances', fresh[0]!.studyInstanceUid);
      expect(existsSync(dir) ? readdirSync(dir) : []).toEqual([]);

      // The same SOP Instance stored before, sent again under an accession the database
      // now refuses: the earlier copy its row names is still there.
      const [kept] = createMrBrainStudy({
        study: { accessionNumber: 'ACC-KEPT-0001' },
        series: [{ slices: 1 }],
      });
      let again = multipartRelated([{ data: kept!.bytes }]);
      expect((await stow(again.body, again.contentType)).status).toBe(200);
      const [row] = (await adapter.dataSource.query(
        `SELECT file_path FROM study_instances WHERE sop_instance_uid = $1`,
        [kept!.sopInstanceUid],
      )) as Array<{ file_path: string }>;
      // the same SOP Instance, its accession corrected (same length, so the bytes stay valid)
      const relabelled = Buffer.from(kept!.bytes);
      relabelled.write('ACC-REFUSED-2', relabelled.indexOf('ACC-KEPT-0001'), 'latin1');
      again = multipartRelated([{ data: relabelled }]);
      expect((await stow(again.body, again.contentType)).status).toBeGreaterThanOrEqual(500);
      expect(readFileSync(row!.file_path).equals(kept!.bytes)).toBe(true);
      expect(readdirSync(join(row!.file_path, '..'))).toHaveLength(1);
    } finally {
      await adapter.dataSource.query(
        `DROP TRIGGER refuse_instance ON study_instances; DROP FUNCTION refuse_instance();`,
      );
    }
  });

  it('two copies of one SOP Instance sent at once: the stored file and its row come from the same copy', async () => {
    // A modality's resend racing its first send (or a C-STORE and a STOW-RS of the same
    // instance). The first copy's database write is slow (a real trigger, as a busy database
    // is); the second copy is moved into place and committed meanwhile. Whichever copy wins,
    // the row's header (its accession, what matching used) must describe the bytes on disk.
    await adapter.dataSource.query(`
      CREATE FUNCTION slow_instance() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(0.8); RETURN NEW; END $$;
      CREATE TRIGGER slow_instance BEFORE INSERT OR UPDATE ON study_instances
        FOR EACH ROW WHEN (NEW.accession_number = 'ACC-RACE-SLOW')
        EXECUTE FUNCTION slow_instance();`);
    try {
      const [inst] = createMrBrainStudy({
        study: { accessionNumber: 'ACC-RACE-SLOW' },
        series: [{ slices: 1 }],
      });
      const second = Buffer.from(inst!.bytes);
      second.write('ACC-RACE-FAST', second.indexOf('ACC-RACE-SLOW'), 'latin1');
      const first = multipartRelated([{ data: inst!.bytes }]);
      const other = multipartRelated([{ data: second }]);
      const slow = stow(first.body, first.contentType);
      await new Promise((r) => setTimeout(r, 300));
      const fast = await stow(other.body, other.contentType);
      expect(fast.status).toBe(200);
      expect((await slow).status).toBe(200);
      const [row] = (await adapter.dataSource.query(
        `SELECT file_path, accession_number FROM study_instances WHERE sop_instance_uid = $1`,
        [inst!.sopInstanceUid],
      )) as Array<{ file_path: string; accession_number: string }>;
      const onDisk = readFileSync(row!.file_path);
      const expected = row!.accession_number === 'ACC-RACE-SLOW' ? inst!.bytes : second;
      expect(onDisk.indexOf(row!.accession_number)).toBeGreaterThan(0);
      expect(onDisk.equals(expected)).toBe(true);
      // one copy kept, the other removed
      expect(readdirSync(join(row!.file_path, '..'))).toHaveLength(1);
    } finally {
      await adapter.dataSource.query(
        `DROP TRIGGER slow_instance ON study_instances; DROP FUNCTION slow_instance();`,
      );
    }
  });

  it('refuses instances of another study when the path names one', async () => {
    const target = createMrBrainStudy({ series: [{ slices: 1 }] });
    const other = createMrBrainStudy({ series: [{ slices: 1 }] });
    const { body, contentType } = multipartRelated([
      { data: target[0]!.bytes },
      { data: other[0]!.bytes },
    ]);
    const res = await stow(body, contentType, {
      path: `/dicomweb/studies/${target[0]!.studyInstanceUid}`,
    });
    expect(res.status).toBe(202);
    expect(items(res.json, '00081199').map((i) => i.sopInstanceUid)).toEqual([
      target[0]!.sopInstanceUid,
    ]);
    expect(items(res.json, '00081198')).toEqual([
      expect.objectContaining({ sopInstanceUid: other[0]!.sopInstanceUid, failureReason: 0xa900 }),
    ]);
  });

  it('takes the Content-Type shapes DICOMweb clients send (quoting, case, parameters)', async () => {
    // Shapes seen in the wild: unquoted type (dcm4che's curl example, DICOMcloud issue #12),
    // the transfer-syntax parameter inside the quoted type, upper-case names, a boundary with
    // the RFC 2046 specials and a space, a start parameter, part types with transfer-syntax.
    const shapes = [
      (b: string) => `multipart/related;type=application/dicom;boundary=${b}`,
      (b: string) =>
        `multipart/related; type="application/dicom; transfer-syntax=1.2.840.10008.1.2.1"; boundary="${b}"`,
      (b: string) => `Multipart/Related; TYPE="Application/DICOM"; Boundary="${b}"`,
      (b: string) =>
        `multipart/related; start="<part1@example>"; type="application/dicom"; boundary="${b}"`,
    ];
    for (const [n, shape] of shapes.entries()) {
      const [instance] = createMrBrainStudy({ series: [{ slices: 1 }] });
      // A token where the boundary is unquoted (RFC 2045 §5.1), the specials where quoted.
      const boundary = n === 0 ? 'DICOMwebBoundary-0' : `x'()+_,-./:=? ${n}`;
      const { body } = multipartRelated(
        [
          {
            data: instance!.bytes,
            contentType: 'application/dicom; transfer-syntax=1.2.840.10008.1.2.1',
          },
        ],
        boundary,
      );
      const res = await stow(body, shape(boundary));
      expect({ n, status: res.status }).toEqual({ n, status: 200 });
      expect(items(res.json, '00081199').map((i) => i.sopInstanceUid)).toEqual([
        instance!.sopInstanceUid,
      ]);
    }
  });

  it('stores a deflated instance (PS3.5 A.5) inflated to explicit VR little endian; a corrupt one is C000, a deflate bomb A700', async () => {
    // Modelled on what `dcmconv +td` writes: the data set deflated, no zlib header. It was
    // refused C122 for its (legal) transfer syntax.
    const deflated = rawInstance({ accession: 'DEFL-1', patientId: 'P-DEFL', deflated: {} });
    const metaEnd = 144 + deflated.bytes.readUInt32LE(140);
    const dataSet = inflateRawSync(deflated.bytes.subarray(metaEnd));
    const corrupt = rawInstance({ accession: 'DEFL-2', deflated: {} });
    corrupt.bytes.fill(0xff, corrupt.bytes.length - 40);
    // 9 MiB of zeros deflate to a few KiB, past the 8 MiB request limit once inflated.
    const bomb = rawInstance({ accession: 'DEFL-3', deflated: { extra: Buffer.alloc(9 << 20) } });
    expect(bomb.bytes.length).toBeLessThan(64 * 1024);
    const { body, contentType } = multipartRelated(
      [deflated, corrupt, bomb].map((i) => ({ data: i.bytes })),
    );
    const res = await stow(body, contentType);
    expect(res.status).toBe(202);
    expect(items(res.json, '00081199').map((i) => i.sopInstanceUid)).toEqual([
      deflated.sopInstanceUid,
    ]);
    expect(items(res.json, '00081198').map((i) => i.failureReason)).toEqual([0xc000, 0xa700]);
    const [row] = (await adapter.dataSource.query(
      `SELECT file_path, transfer_syntax_uid FROM study_instances WHERE sop_instance_uid = $1`,
      [deflated.sopInstanceUid],
    )) as Array<{ file_path: string; transfer_syntax_uid: string }>;
    expect(row!.transfer_syntax_uid).toBe('1.2.840.10008.1.2.1');
    const stored = await readFile(row!.file_path);
    // The same data set, byte for byte, behind File Meta Information naming the new syntax.
    expect(stored.subarray(stored.length - dataSet.length).equals(dataSet)).toBe(true);
    expect(stored.toString('latin1', 0, 400)).toContain('1.2.840.10008.1.2.1\0');
    expect(stored.toString('latin1', 0, 400)).not.toContain('1.2.840.10008.1.2.1.99');
  });

  it('deflated instances of one request inflate within STOW_MAX_REQUEST_BYTES together, not each', async () => {
    // Three of 5 MiB each once inflated, a few KiB each as sent: each was held to the 8 MiB
    // limit on its own, so a 40 MB request of such parts stored 40 GiB (the limit is 4 GiB).
    const parts = [1, 2, 3].map((n) =>
      rawInstance({ accession: `DEFL-SUM-${n}`, deflated: { extra: Buffer.alloc(5 << 20) } }),
    );
    const { body, contentType } = multipartRelated(parts.map((i) => ({ data: i.bytes })));
    expect(body.length).toBeLessThan(256 * 1024);
    const res = await stow(body, contentType);
    expect(res.status).toBe(202);
    expect(items(res.json, '00081199').map((i) => i.sopInstanceUid)).toEqual([
      parts[0]!.sopInstanceUid,
    ]);
    expect(items(res.json, '00081198').map((i) => i.failureReason)).toEqual([0xa700, 0xa700]);
  });

  it('checks credentials, media type, multipart form and size before storing anything', async () => {
    const { body, contentType } = multipartRelated([
      { data: createMrBrainStudy({ series: [{ slices: 1 }] })[0]!.bytes },
    ]);
    expect((await stow(body, contentType, { token: null })).status).toBe(401);
    expect((await stow(body, contentType, { token: TEST_TOKENS.analyst })).status).toBe(403);
    expect((await stow(body, contentType, { accept: 'application/dicom+xml' })).status).toBe(406);
    expect((await stow(body, 'application/dicom')).status).toBe(415);
    expect(
      (await stow(body, contentType.replace('application/dicom', 'application/dicom+json'))).status,
    ).toBe(415);
    expect((await stow(body, 'multipart/related; type="application/dicom"')).status).toBe(400);
    // The closing delimiter is missing: the body ends inside a part.
    expect((await stow(body.subarray(0, body.length - 30), contentType)).status).toBe(400);
    // Too large: refused from the Content-Length before reading; without one (chunked), once
    // the limit is passed while reading. Either way the connection closes after the answer.
    const big = multipartRelated([{ data: Buffer.alloc(MAX_BYTES + 1) }]);
    expect(await postUnread(big.body, big.contentType, true)).toEqual({
      status: 413,
      connection: 'close',
    });
    expect(await postUnread(big.body, big.contentType, false)).toEqual({
      status: 413,
      connection: 'close',
    });
    // Nothing half-received is left behind.
    expect(readdirSync(join(adapter.dataDir, 'studies', 'incoming'))).toEqual([]);
    expect(
      (await stow(body, contentType, { path: '/dicomweb/studies/..%2F..%2Fetc' })).status,
    ).toBe(400);
  });

  it('a request of more parts than STOW_MAX_INSTANCES is 413; the parts refused before it are audited, not left unnamed', async () => {
    // 25 one-byte parts: before, each was a file kept 24 h under refused/ and an entry of the
    // answer and the audit event; 240 KB of body made 20,000 files, 25 s of work and an
    // 800 KB answer, and nothing bounded it below STOW_MAX_REQUEST_BYTES (4 GiB).
    const { body, contentType } = multipartRelated(
      Array.from({ length: 25 }, () => ({ data: Buffer.from('x') })),
    );
    const before = (await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM audit_events WHERE kind = 'study.received'`,
    )) as Array<{ n: number }>;
    const res = await request(`${adapter.httpUrl}/dicomweb/studies`, {
      method: 'POST',
      headers: { 'content-type': contentType, authorization: `Bearer ${TEST_TOKENS.sender}` },
      body,
    });
    const problem = (await res.body.json()) as { detail?: string };
    expect(res.statusCode).toBe(413);
    expect(problem.detail).toMatch(/more than 20 parts \(STOW_MAX_INSTANCES\)/);
    const entries = (await adapter.dataSource.query(
      `SELECT summary, detail FROM audit_events WHERE kind = 'study.received' ORDER BY id OFFSET $1`,
      [before[0]!.n],
    )) as Array<{ summary: string; detail: { refused: Array<{ keptAs: string }> } }>;
    expect(entries).toHaveLength(1);
    expect(entries[0]!.summary).toMatch(/request refused: .*STOW_MAX_INSTANCES/);
    expect(entries[0]!.detail.refused).toHaveLength(20);
    for (const r of entries[0]!.detail.refused)
      expect(existsSync(join(adapter.dataDir, 'studies', 'refused', `${r.keptAs}.dcm`))).toBe(true);
    expect(readdirSync(join(adapter.dataDir, 'studies', 'incoming'))).toEqual([]);
  });

  it('matches pushed instances to an order by accession number; acquire() packages them after the quiet period', async () => {
    const orderId = await insertOrder(adapter.dataSource, { accessionNumber: 'STOW-ACC-77' });
    const study = createMrBrainStudy({
      study: { accessionNumber: 'STOW-ACC-77' },
      series: [{ slices: 3, seriesDescription: 'T1' }],
    });
    const { body, contentType } = multipartRelated(study.map((i) => ({ data: i.bytes })));
    expect((await stow(body, contentType)).status).toBe(200);

    const rows = (await adapter.dataSource.query(
      `SELECT order_id, hold_until FROM study_instances WHERE study_instance_uid = $1`,
      [study[0]!.studyInstanceUid],
    )) as Array<{ order_id: string; hold_until: Date | null }>;
    expect(rows).toEqual(Array(3).fill({ order_id: orderId, hold_until: null }));
    const matched = (await adapter.dataSource.query(
      `SELECT summary FROM audit_events WHERE order_id = $1 AND kind = 'study.matched'`,
      [orderId],
    )) as Array<{ summary: string }>;
    expect(matched).toEqual([
      { summary: '3 received instance(s) matched to the order by accession' },
    ]);
    // the order is told at once (not at its next scheduled try): an acquire job, committed with the match
    const told = (await adapter.dataSource.query(
      `SELECT (SELECT count(*) FROM job_outbox WHERE task = 'order.acquire-study' AND job_key = $1)
            + (SELECT count(*) FROM graphile_worker.jobs WHERE task_identifier = 'order.acquire-study' AND key = $1) AS n`,
      [`acquire:${orderId}`],
    )) as Array<{ n: string }>;
    expect(Number(told[0]!.n)).toBe(1);

    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    const first = await acquirer.acquire({ orderId, accessionNumber: 'STOW-ACC-77' });
    expect(first).toMatchObject({ status: 'waiting' });
    await new Promise((r) => setTimeout(r, 1100));
    const ready = await acquirer.acquire({ orderId, accessionNumber: 'STOW-ACC-77' });
    if (ready.status !== 'ready') throw new Error(`expected ready: ${JSON.stringify(ready)}`);
    expect(ready.study).toMatchObject({ source: 'stow', instanceCount: 3, seriesCount: 1 });
    const zip = await readZip(ready.study.packagePath);
    expect([...zip.values()].map(sha256).sort()).toEqual(study.map((i) => sha256(i.bytes)).sort());

    // Another replica without the received files (DATA_DIR not shared) waits instead of failing.
    const [one] = (await adapter.dataSource.query(
      `SELECT file_path FROM study_instances WHERE order_id = $1 LIMIT 1`,
      [orderId],
    )) as Array<{ file_path: string }>;
    const moved = `${one!.file_path}.elsewhere`;
    renameSync(one!.file_path, moved);
    rmSync(ready.study.packagePath);
    expect(await acquirer.acquire({ orderId, accessionNumber: 'STOW-ACC-77' })).toMatchObject({
      status: 'waiting',
      reason: "1 received instance file(s) are not on this replica's disk (is DATA_DIR shared?)",
    });
    renameSync(moved, one!.file_path);

    await acquirer.release(orderId);
    expect(existsSync(ready.study.packagePath)).toBe(false);
    const left = (await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM study_instances WHERE order_id = $1`,
      [orderId],
    )) as Array<{ n: number }>;
    expect(left[0]!.n).toBe(0);
  });

  it('an order by accession with held instances whose accession differs only by case or leading zeros: not used, and the wait says why', async () => {
    // A modality keyed the accession in lower case, another RIS pads it with zeros: the
    // instances are held, never claimed (identifiers match exactly), and the order waited
    // with "no instances of this study have been received yet" until it expired.
    const lower = createMrBrainStudy({
      study: { accessionNumber: 'stow-acc-nm1' },
      series: [{ slices: 2 }],
    });
    const zeros = createMrBrainStudy({
      study: { accessionNumber: '000778899' },
      series: [{ slices: 1 }],
    });
    const { body, contentType } = multipartRelated(
      [...lower, ...zeros].map((i) => ({ data: i.bytes })),
    );
    expect((await stow(body, contentType)).status).toBe(200);
    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);

    const byCase = await insertOrder(adapter.dataSource, { accessionNumber: 'STOW-ACC-NM1' });
    const waitingCase = await acquirer.acquire({
      orderId: byCase,
      accessionNumber: 'STOW-ACC-NM1',
    });
    expect(waitingCase).toMatchObject({ status: 'waiting' });
    if (waitingCase.status !== 'waiting') throw new Error('expected waiting');
    expect(waitingCase.reason).toContain(
      '2 held instance(s) of 1 study have an accession number that differs from the order’s only by case',
    );
    expect(waitingCase.reason).not.toContain('stow-acc-nm1');

    const byZeros = await insertOrder(adapter.dataSource, { accessionNumber: '778899' });
    const waitingZeros = await acquirer.acquire({ orderId: byZeros, accessionNumber: '778899' });
    if (waitingZeros.status !== 'waiting') throw new Error('expected waiting');
    expect(waitingZeros.reason).toContain('only by leading-zeros');

    // on the order's timeline once, however often the order asks again
    await acquirer.acquire({ orderId: byCase, accessionNumber: 'STOW-ACC-NM1' });
    const notes = (await adapter.dataSource.query(
      `SELECT summary FROM audit_events WHERE order_id = $1 AND kind = 'study.retrieve-problem'`,
      [byCase],
    )) as Array<{ summary: string }>;
    expect(notes).toHaveLength(1);
    // and nothing was claimed
    const claimed = (await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM study_instances WHERE order_id = ANY($1::uuid[])`,
      [[byCase, byZeros]],
    )) as Array<{ n: number }>;
    expect(claimed[0]!.n).toBe(0);
  });

  it('holds unmatched instances: an order arriving later claims them; unclaimed ones expire', async () => {
    const early = createMrBrainStudy({ series: [{ slices: 2 }] });
    const orphan = createMrBrainStudy({ series: [{ slices: 1 }] });
    const { body, contentType } = multipartRelated(
      [...early, ...orphan].map((i) => ({ data: i.bytes })),
    );
    expect((await stow(body, contentType)).status).toBe(200);

    // The order comes after its study (RIS slower than the modality).
    const uid = early[0]!.studyInstanceUid;
    const orderId = await insertOrder(adapter.dataSource, { studyInstanceUid: uid });
    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    expect(await acquirer.acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
      status: 'waiting',
    });
    const claimed = (await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM study_instances WHERE order_id = $1`,
      [orderId],
    )) as Array<{ n: number }>;
    expect(claimed[0]!.n).toBe(2);

    // An hour and a minute later (the configured hold is 60 minutes), the orphan goes.
    const [orphanRow] = (await adapter.dataSource.query(
      `SELECT file_path FROM study_instances WHERE sop_instance_uid = $1`,
      [orphan[0]!.sopInstanceUid],
    )) as Array<{ file_path: string }>;
    expect(existsSync(orphanRow!.file_path)).toBe(true);
    const later = new DefaultStudyAcquirer({
      dataSource: adapter.dataSource,
      paths: new StudyStoragePaths(adapter.dataDir),
      logger: pino({ level: 'silent' }),
      quietPeriodSeconds: 1,
      now: () => new Date(Date.now() + 61 * 60_000),
    });
    // A part left behind by a connection that broke off mid-instance goes too.
    const leftover = join(adapter.dataDir, 'studies', 'incoming', 'broken-off.part');
    writeFileSync(leftover, 'half an instance');
    expect(await later.expireUnmatched()).toBeGreaterThanOrEqual(1);
    expect(existsSync(leftover)).toBe(false);
    // Refused parts kept for the audit go after the same hold.
    const paths = new StudyStoragePaths(adapter.dataDir);
    expect(readdirSync(paths.refusedDir).length).toBeGreaterThan(0);
    const laterStow = new StowService({
      dataSource: adapter.dataSource,
      paths,
      logger: pino({ level: 'silent' }),
      maxRequestBytes: MAX_BYTES,
      unmatchedHoldMinutes: 60,
      now: () => new Date(Date.now() + 61 * 60_000),
    });
    expect(await laterStow.expireRefused()).toBeGreaterThan(0);
    expect(readdirSync(paths.refusedDir)).toEqual([]);
    expect(existsSync(orphanRow!.file_path)).toBe(false);
    const gone = (await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM study_instances WHERE sop_instance_uid = $1`,
      [orphan[0]!.sopInstanceUid],
    )) as Array<{ n: number }>;
    expect(gone[0]!.n).toBe(0);
    // The claimed instances stay.
    const kept = (await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM study_instances WHERE order_id = $1`,
      [orderId],
    )) as Array<{ n: number }>;
    expect(kept[0]!.n).toBe(2);
    const expired = (await adapter.dataSource.query(
      `SELECT detail FROM audit_events WHERE kind = 'study.expired' AND detail->'studies' ? $1`,
      [orphan[0]!.studyInstanceUid],
    )) as Array<{ detail: { instances: number } }>;
    expect(expired).toHaveLength(1);
  });

  it('fails when instances matched by accession belong to another study than the order later names', async () => {
    const orderId = await insertOrder(adapter.dataSource, { accessionNumber: 'STOW-ACC-88' });
    const study = createMrBrainStudy({
      study: { accessionNumber: 'STOW-ACC-88' },
      series: [{ slices: 1 }],
    });
    const { body, contentType } = multipartRelated(study.map((i) => ({ data: i.bytes })));
    expect((await stow(body, contentType)).status).toBe(200);
    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    const other = generateUid();
    expect(
      await acquirer.acquire({ orderId, studyInstanceUid: other, accessionNumber: 'STOW-ACC-88' }),
    ).toEqual({
      status: 'failed',
      reason: 'the received instances belong to another study than the order names',
    });
  });

  it('keeps waiting while pushed instances keep arriving', async () => {
    const uid = generateUid();
    const orderId = await insertOrder(adapter.dataSource, { studyInstanceUid: uid });
    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    const series = (n: number, slices: number) =>
      createMrBrainStudy({
        study: { studyInstanceUid: uid },
        series: [{ slices, seriesNumber: n, seriesDescription: `S${n}` }],
      });
    const s1 = series(1, 2);
    let part = multipartRelated(s1.map((i) => ({ data: i.bytes })));
    expect((await stow(part.body, part.contentType)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 700));
    const s2 = series(2, 1);
    part = multipartRelated(s2.map((i) => ({ data: i.bytes })));
    expect((await stow(part.body, part.contentType)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 700));
    // 1.4 s after the first push but only 0.7 s after the last: still waiting.
    expect(await acquirer.acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
      status: 'waiting',
      reason: '3 instance(s) received; waiting for the study to be complete',
    });
    await new Promise((r) => setTimeout(r, 400));
    const ready = await acquirer.acquire({ orderId, studyInstanceUid: uid });
    if (ready.status !== 'ready') throw new Error(`expected ready: ${JSON.stringify(ready)}`);
    expect(ready.study).toMatchObject({ instanceCount: 3, seriesCount: 2, source: 'stow' });

    // The modality resends a corrected instance: the package is stale, the wait starts again.
    part = multipartRelated([{ data: s2[0]!.bytes }]);
    expect((await stow(part.body, part.contentType)).status).toBe(200);
    expect(await acquirer.acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
      status: 'waiting',
    });
    await new Promise((r) => setTimeout(r, 1100));
    const again = await acquirer.acquire({ orderId, studyInstanceUid: uid });
    if (again.status !== 'ready') throw new Error(`expected ready: ${JSON.stringify(again)}`);
    expect(again.study.instanceCount).toBe(3);
    expect(Date.parse(again.study.packagedAt!)).toBeGreaterThan(
      Date.parse(ready.study.packagedAt!),
    );
  });
});
