import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { DicomWebClient } from '../../src/studies/dicomweb.client';
import { DefaultStudyAcquirer } from '../../src/studies/study-acquirer.service';
import { StudyStoragePaths } from '../../src/studies/study-storage.paths';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { createMrBrainStudy, generateUid, type DicomInstance } from '../helpers/dicom-factory';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import { rawInstance } from '../helpers/raw-dicom';
import { insertOrder, readZip, sha256 } from './study-test-support';

/** Pulling a study from a real PACS (Orthanc + DICOMweb plugin): QIDO-RS, quiet period, WADO-RS. */
describe('study acquisition from a PACS over DICOMweb', () => {
  let orthanc: RunningOrthanc;
  let db: TestDatabase;
  let dataDir: string;
  let client: DicomWebClient;
  let clock: number;
  const logger = pino({ level: 'silent' });

  const acquirer = (
    quietPeriodSeconds = 60,
    identityMatch?: ReadonlyArray<'accession-number' | 'patient-id'>,
  ) =>
    new DefaultStudyAcquirer({
      dataSource: db.dataSource,
      paths: new StudyStoragePaths(dataDir),
      logger,
      dicomWeb: client,
      quietPeriodSeconds,
      identityMatch,
      now: () => new Date(clock),
    });

  const store = async (instances: DicomInstance[]) => {
    for (const i of instances) await orthanc.store(i.bytes);
  };

  beforeAll(async () => {
    [orthanc, db] = await Promise.all([startOrthanc(), createTestDatabase()]);
    dataDir = mkdtempSync(join(tmpdir(), 'studies-pull-'));
    client = new DicomWebClient({ baseUrl: orthanc.dicomWebUrl });
  });
  afterAll(async () => {
    await orthanc?.stop();
    await db?.drop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });
  beforeEach(() => {
    clock = Date.parse('2026-03-15T10:30:00Z');
  });

  it('finds a study with QIDO-RS by Study Instance UID and by accession number, with its count', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'QIDO-ACC-1' },
      series: [
        { slices: 2, seriesDescription: 'T1' },
        { slices: 3, seriesDescription: 'FLAIR' },
      ],
    });
    await store(study);
    const uid = study[0]!.studyInstanceUid;

    const byUid = await client.findStudies({ studyInstanceUid: uid });
    expect(byUid).toEqual([
      {
        studyInstanceUid: uid,
        accessionNumber: 'QIDO-ACC-1',
        patientId: 'SBX-000123',
        instanceCount: 5,
        seriesCount: 2,
      },
    ]);
    const byAccession = await client.findStudies({ accessionNumber: 'QIDO-ACC-1' });
    expect(byAccession.map((s) => s.studyInstanceUid)).toEqual([uid]);
    expect(await client.findStudies({ studyInstanceUid: generateUid() })).toEqual([]);
    expect(await client.findStudies({ accessionNumber: 'NO-SUCH-ACC' })).toEqual([]);
  });

  it('streams a WADO-RS retrieve to disk, one file per instance, byte for byte', async () => {
    const study = createMrBrainStudy({
      series: [{ slices: 4, rows: 64, columns: 64 }],
    });
    await store(study);
    const dir = join(dataDir, 'wado-check');
    const files = await client.retrieveStudy(study[0]!.studyInstanceUid, dir);
    expect(files).toHaveLength(4);
    const got = new Set(await Promise.all(files.map(async (f) => sha256(await readFile(f.path)))));
    expect(got).toEqual(new Set(study.map((i) => sha256(i.bytes))));
    for (const f of files) {
      expect(f.contentType).toMatch(/^application\/dicom/);
      expect((await stat(f.path)).size).toBe(f.sizeBytes);
    }
  });

  it('waits while instances keep arriving, then retrieves, validates and packages the study', async () => {
    const uid = generateUid();
    const first = createMrBrainStudy({
      study: { studyInstanceUid: uid, accessionNumber: 'PULL-ACC-2' },
      series: [{ slices: 3, seriesDescription: 'T1 MPRAGE' }],
    });
    await store(first);
    const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
    const a = acquirer(60);

    // First sighting: 3 instances; the quiet period starts.
    const r1 = await a.acquire({ orderId, studyInstanceUid: uid });
    expect(r1).toMatchObject({ status: 'waiting', retryAfterMs: 60_000 });

    // 40 s later the modality sends a second series: the count changed, the wait starts over.
    clock += 40_000;
    const second = createMrBrainStudy({
      study: { studyInstanceUid: uid, accessionNumber: 'PULL-ACC-2' },
      series: [{ slices: 2, seriesDescription: 'AX FLAIR', seriesNumber: 3 }],
    });
    await store(second);
    const r2 = await a.acquire({ orderId, studyInstanceUid: uid });
    expect(r2).toMatchObject({ status: 'waiting', retryAfterMs: 60_000 });

    // The persisted state lets a fresh acquirer (another replica) continue.
    clock += 30_000;
    const r3 = await acquirer(60).acquire({ orderId, studyInstanceUid: uid });
    expect(r3).toMatchObject({ status: 'waiting', retryAfterMs: 30_000 });
    const [row] = (await db.dataSource.query(
      `SELECT observed_count, state FROM study_acquisitions WHERE order_id = $1`,
      [orderId],
    )) as Array<{ observed_count: number; state: string }>;
    expect(row).toEqual({ observed_count: 5, state: 'waiting' });

    clock += 30_000;
    const sidecar = { order_id: 'up-123', products: ['brain-volumetry'] };
    const r4 = await acquirer(60).acquire({ orderId, studyInstanceUid: uid, sidecar });
    if (r4.status !== 'ready') throw new Error(`expected ready, got ${JSON.stringify(r4)}`);
    const s = r4.study;
    expect(s).toMatchObject({
      studyInstanceUid: uid,
      instanceCount: 5,
      seriesCount: 2,
      source: 'dicomweb',
      attributes: {
        accessionNumber: 'PULL-ACC-2',
        patientId: 'SBX-000123',
        patientName: 'Sandbox^Patient',
        modalities: ['MR'],
      },
      otherPackages: [],
    });
    expect(s.packagePath).toBe(join(dataDir, 'studies', 'packages', `${orderId}.zip`));
    expect((await stat(s.packagePath)).size).toBe(s.sizeBytes);

    // The ZIP holds every instance unchanged, under safe names, plus the sidecar.
    const zip = await readZip(s.packagePath);
    expect(JSON.parse(zip.get('metadata.json')!.toString())).toEqual(sidecar);
    const dicomEntries = [...zip.keys()].filter((n) => n !== 'metadata.json');
    expect(dicomEntries).toHaveLength(5);
    for (const name of dicomEntries) expect(name).toMatch(/^DICOM\/[0-9.]+\/[0-9.]+\.dcm$/);
    expect(new Set(dicomEntries.map((n) => sha256(zip.get(n)!)))).toEqual(
      new Set([...first, ...second].map((i) => sha256(i.bytes))),
    );
    expect(new Set(s.instances.map((i) => i.sopInstanceUid))).toEqual(
      new Set([...first, ...second].map((i) => i.sopInstanceUid)),
    );

    // Asking again returns the same package without pulling again.
    const again = await acquirer(60).acquire({ orderId, studyInstanceUid: uid, sidecar });
    expect(again).toMatchObject({ status: 'ready', study: { packagedAt: s.packagedAt } });

    const audit = (await db.dataSource.query(
      `SELECT kind, detail FROM audit_events WHERE order_id = $1 ORDER BY id`,
      [orderId],
    )) as Array<{ kind: string; detail: Record<string, unknown> }>;
    expect(audit.map((e) => e.kind)).toEqual(['study.packaged']);
    expect(audit[0]!.detail).toMatchObject({ source: 'dicomweb', instances: 5, qidoCount: 5 });

    // Release deletes the package and the pulled files.
    await a.release(orderId);
    await expect(stat(s.packagePath)).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(stat(join(dataDir, 'studies', 'pulled', orderId))).rejects.toMatchObject({
      code: 'ENOENT',
    });
    expect(await a.packagesOfStudy(uid)).toEqual([]);
  });

  it('packages a study the PACS keeps compressed (JPEG, JPEG-LS, RLE) byte for byte', async () => {
    // Under `transfer-syntax=*` Orthanc sends what it stores: encapsulated pixel data, each
    // item of which the instance check now reads (offset table, fragments, delimiter).
    const study = createMrBrainStudy({ series: [{ slices: 3, rows: 128, columns: 128 }] });
    const compressed = study.map((inst, i) => {
      const tool = ['dcmcjpeg', 'dcmcjpls', 'dcmcrle'][i]!;
      const source = join(dataDir, `${inst.sopInstanceUid}.in.dcm`);
      const out = join(dataDir, `${inst.sopInstanceUid}.${tool}.dcm`);
      writeFileSync(source, inst.bytes);
      execFileSync(tool, [source, out]);
      return readFileSync(out);
    });
    for (const bytes of compressed) await orthanc.store(bytes);
    const uid = study[0]!.studyInstanceUid;
    const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
    let result = await acquirer(0).acquire({ orderId, studyInstanceUid: uid });
    for (let i = 0; i < 3 && result.status === 'waiting'; i++) {
      clock += 1_000;
      result = await acquirer(0).acquire({ orderId, studyInstanceUid: uid });
    }
    if (result.status !== 'ready') throw new Error(`expected ready, got ${JSON.stringify(result)}`);
    expect(result.study).toMatchObject({ instanceCount: 3, source: 'dicomweb' });
    const zip = await readZip(result.study.packagePath);
    const got = [...zip.entries()].filter(([n]) => n !== 'metadata.json').map(([, b]) => sha256(b));
    expect(new Set(got)).toEqual(new Set(compressed.map((b) => sha256(b))));
  });

  it('inflates an instance the PACS keeps deflated (PS3.5 A.5) and packages it, as STOW-RS does', async () => {
    // A PACS returns what it stores under `transfer-syntax=*`: an instance a modality (or
    // `dcmconv +td`) sent deflated came back deflated, and the whole study was refused as
    // "not valid DICOM" though the same instance pushed by STOW-RS was taken.
    const uid = generateUid();
    const deflated = rawInstance({
      studyInstanceUid: uid,
      accession: 'PULL-DEFL-1',
      patientId: 'SBX-000123',
      patientName: 'Sandbox^Patient',
      deflated: {},
    });
    const plain = rawInstance({
      studyInstanceUid: uid,
      accession: 'PULL-DEFL-1',
      patientId: 'SBX-000123',
      patientName: 'Sandbox^Patient',
    });
    await orthanc.store(deflated.bytes);
    await orthanc.store(plain.bytes);
    const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
    let result = await acquirer(0).acquire({ orderId, studyInstanceUid: uid });
    for (let i = 0; i < 3 && result.status === 'waiting'; i++) {
      clock += 1_000;
      result = await acquirer(0).acquire({ orderId, studyInstanceUid: uid });
    }
    if (result.status !== 'ready') throw new Error(`expected ready, got ${JSON.stringify(result)}`);
    expect(result.study).toMatchObject({ instanceCount: 2, source: 'dicomweb' });
    const zip = await readZip(result.study.packagePath);
    const entries = [...zip.entries()].filter(([name]) => name !== 'metadata.json');
    const inflated = entries.find(([name]) => name.endsWith(`${deflated.sopInstanceUid}.dcm`))![1];
    // Explicit VR Little Endian now, the data set the same as the plain instance's layout
    expect(inflated.includes(Buffer.from('1.2.840.10008.1.2.1\0'))).toBe(true);
    expect(inflated.includes(Buffer.from('1.2.840.10008.1.2.1.99'))).toBe(false);
    expect(inflated.includes(Buffer.from('PULL-DEFL-1'))).toBe(true);
    expect(sha256(entries.find(([name]) => name.endsWith(`${plain.sopInstanceUid}.dcm`))![1])).toBe(
      sha256(plain.bytes),
    );
  });

  it('finds the study by accession number when the order has no Study Instance UID', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'PULL-ACC-3' },
      series: [{ slices: 2 }],
    });
    await store(study);
    const orderId = await insertOrder(db.dataSource, { accessionNumber: 'PULL-ACC-3' });
    // A site whose RIS and PACS do not share a patient ID domain requires the accession only
    // (STUDY_IDENTITY_MATCH=accession-number); the default refuses (test/hostile/study-identity).
    const a = acquirer(1, ['accession-number']);
    expect((await a.acquire({ orderId, accessionNumber: 'PULL-ACC-3' })).status).toBe('waiting');
    clock += 1_000;
    // The RIS knows the patient under another ID than the images carry: packaged, but flagged.
    const ready = await a.acquire({
      orderId,
      accessionNumber: 'PULL-ACC-3',
      patientId: 'RIS-778899',
    });
    expect(ready).toMatchObject({
      status: 'ready',
      study: { studyInstanceUid: study[0]!.studyInstanceUid, instanceCount: 2 },
    });
    const [packaged] = (await db.dataSource.query(
      `SELECT severity, summary, detail->'patientIdDiffers' AS differs FROM audit_events
        WHERE order_id = $1 AND kind = 'study.packaged'`,
      [orderId],
    )) as Array<{ severity: string; summary: string; differs: boolean }>;
    expect(packaged).toMatchObject({ severity: 'warning', differs: true });
    expect(packaged!.summary).toMatch(/Patient ID in the images differs/);
  });

  it('tells the lifecycle about another unreleased package of the same study', async () => {
    const study = createMrBrainStudy({ series: [{ slices: 1 }] });
    await store(study);
    const uid = study[0]!.studyInstanceUid;
    const first = await insertOrder(db.dataSource, { studyInstanceUid: uid });
    const second = await insertOrder(db.dataSource, { studyInstanceUid: uid });
    const a = acquirer(1);
    for (const id of [first, second]) await a.acquire({ orderId: id, studyInstanceUid: uid });
    clock += 1_000;
    const r1 = await a.acquire({ orderId: first, studyInstanceUid: uid });
    clock += 1_000;
    const r2 = await a.acquire({ orderId: second, studyInstanceUid: uid });
    expect(r1).toMatchObject({ status: 'ready', study: { otherPackages: [] } });
    if (r2.status !== 'ready') throw new Error('expected ready');
    expect(r2.study.otherPackages).toEqual([
      expect.objectContaining({ orderId: first, studyInstanceUid: uid }),
    ]);
    expect((await a.packagesOfStudy(uid)).map((p) => p.orderId)).toEqual([second, first]);
  });

  it('fails clearly when an accession number matches two studies, and waits for a study not there yet', async () => {
    for (let i = 0; i < 2; i++) {
      await store(
        createMrBrainStudy({ study: { accessionNumber: 'DUP-ACC' }, series: [{ slices: 1 }] }),
      );
    }
    const dup = await insertOrder(db.dataSource, { accessionNumber: 'DUP-ACC' });
    expect(await acquirer(1).acquire({ orderId: dup, accessionNumber: 'DUP-ACC' })).toEqual({
      status: 'failed',
      reason: 'the accession number matches 2 studies in the PACS',
    });
    const [event] = (await db.dataSource.query(
      `SELECT kind, severity FROM audit_events WHERE order_id = $1`,
      [dup],
    )) as Array<{ kind: string; severity: string }>;
    expect(event).toEqual({ kind: 'study.failed', severity: 'error' });

    const missing = await insertOrder(db.dataSource, { studyInstanceUid: generateUid() });
    expect(
      await acquirer(1).acquire({ orderId: missing, studyInstanceUid: generateUid() }),
    ).toMatchObject({ status: 'waiting', reason: 'the study is not in the PACS yet' });
  });

  it('lets one worker at a time acquire an order (the lease), whichever replica it runs on', async () => {
    const study = createMrBrainStudy({ series: [{ slices: 1 }] });
    await store(study);
    const uid = study[0]!.studyInstanceUid;
    const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
    // A first call records the order's acquisition row; then another worker holds the lease
    // (as a replica mid-retrieve would): this worker must step back, whatever the timing.
    expect(await acquirer(1).acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
      status: 'waiting',
      reason: '1 instance(s) in the PACS; waiting for the count to settle',
    });
    await db.dataSource.query(
      `UPDATE study_acquisitions SET lease_until = now() + interval '1 minute' WHERE order_id = $1`,
      [orderId],
    );
    expect(await acquirer(1).acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
      status: 'waiting',
      reason: 'another worker is acquiring this study',
    });
    await db.dataSource.query(
      `UPDATE study_acquisitions SET lease_until = NULL WHERE order_id = $1`,
      [orderId],
    );
    expect(await acquirer(1).acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
      status: 'waiting',
    });
    // The lease is given back when the call ends.
    const [row] = (await db.dataSource.query(
      `SELECT lease_until FROM study_acquisitions WHERE order_id = $1`,
      [orderId],
    )) as Array<{ lease_until: Date | null }>;
    expect(row!.lease_until).toBeNull();
  });

  it("keeps another replica's live lease when this worker's clock runs ahead of the database's", async () => {
    const study = createMrBrainStudy({ series: [{ slices: 1 }] });
    await store(study);
    const uid = study[0]!.studyInstanceUid;
    const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
    expect(await acquirer(1).acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
      status: 'waiting',
    });
    // A replica mid-retrieve holds the lease for another minute of the database's clock; this
    // host's clock stepped 5 minutes ahead (NTP, a resumed VM): the lease is still held.
    await db.dataSource.query(
      `UPDATE study_acquisitions SET lease_until = now() + interval '1 minute' WHERE order_id = $1`,
      [orderId],
    );
    clock = Date.now() + 5 * 60_000;
    expect(await acquirer(1).acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
      status: 'waiting',
      reason: 'another worker is acquiring this study',
    });
  });

  it('sends its bearer token to the PACS, and waits (not fails) while the PACS refuses it', async () => {
    const seen: Array<string | undefined> = [];
    const pacs = createServer((req, res) => {
      seen.push(req.headers.authorization);
      if (req.headers.authorization !== 'Bearer pacs-secret') res.writeHead(401).end();
      else res.writeHead(200, { 'content-type': 'application/dicom+json' }).end('[]');
    });
    await new Promise<void>((r) => pacs.listen(0, '127.0.0.1', r));
    try {
      const base = `http://127.0.0.1:${(pacs.address() as AddressInfo).port}`;
      const withToken = (token: string) =>
        new DefaultStudyAcquirer({
          dataSource: db.dataSource,
          paths: new StudyStoragePaths(dataDir),
          logger,
          dicomWeb: new DicomWebClient({ baseUrl: base, token }),
          quietPeriodSeconds: 1,
        });
      const uid = generateUid();
      const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
      expect(await withToken('stale').acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
        status: 'waiting',
        reason: 'PACS answered HTTP 401',
      });
      expect(
        await withToken('pacs-secret').acquire({ orderId, studyInstanceUid: uid }),
      ).toMatchObject({ status: 'waiting', reason: 'the study is not in the PACS yet' });
      expect(seen).toEqual(['Bearer stale', 'Bearer pacs-secret']);
    } finally {
      pacs.close();
    }
  });

  it('answers waiting, not failed, when the PACS is down', async () => {
    const down = new DefaultStudyAcquirer({
      dataSource: db.dataSource,
      paths: new StudyStoragePaths(dataDir),
      logger,
      dicomWeb: new DicomWebClient({ baseUrl: 'http://127.0.0.1:9/dicom-web', timeoutMs: 2000 }),
      quietPeriodSeconds: 1,
    });
    const uid = generateUid();
    const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
    expect(await down.acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
      status: 'waiting',
      reason: expect.stringContaining('PACS unreachable'),
    });
  });
});

/**
 * A PACS that offers only its default transfer syntax (no `transfer-syntax=*`), as some
 * archives do: a loopback HTTP peer that answers 406 to `*` and serves the parts otherwise.
 */
describe('WADO-RS against a PACS without transfer-syntax=*', () => {
  it('falls back to the default transfer syntax after a 406', async () => {
    const instances = createMrBrainStudy({ series: [{ slices: 2 }] });
    const accepts: string[] = [];
    const server = createServer((req, res) => {
      const accept = String(req.headers.accept);
      accepts.push(accept);
      if (accept.includes('transfer-syntax=*')) {
        res.writeHead(406).end();
        return;
      }
      const boundary = 'pacs-default-ts';
      res.writeHead(200, {
        'content-type': `multipart/related; type="application/dicom"; boundary=${boundary}`,
      });
      for (const i of instances) {
        res.write(
          `--${boundary}\r\nContent-Type: application/dicom; transfer-syntax=1.2.840.10008.1.2.1\r\n\r\n`,
        );
        res.write(i.bytes);
        res.write('\r\n');
      }
      res.end(`--${boundary}--\r\n`);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const dir = mkdtempSync(join(tmpdir(), 'wado-406-'));
    try {
      const { port } = server.address() as AddressInfo;
      const client = new DicomWebClient({ baseUrl: `http://127.0.0.1:${port}/dicom-web/` });
      const files = await client.retrieveStudy(instances[0]!.studyInstanceUid, dir);
      expect(accepts).toEqual([
        'multipart/related; type="application/dicom"; transfer-syntax=*',
        'multipart/related; type="application/dicom"',
      ]);
      expect(await Promise.all(files.map(async (f) => sha256(await readFile(f.path))))).toEqual(
        instances.map((i) => sha256(i.bytes)),
      );
    } finally {
      server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
