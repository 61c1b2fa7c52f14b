import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  constants,
  Dataset,
  requests,
  responses,
  Scp,
  Server,
  type association as dimseAssociation,
} from 'dcmjs-dimse';
import pino from 'pino';
import { freePort } from '../../src/persistence/embedded-postgres';
import { CStoreScpListener } from '../../src/studies/cstore-scp.listener';
import { DicomWebClient } from '../../src/studies/dicomweb.client';
import { DimseClient } from '../../src/studies/dimse.client';
import { DimsePacs } from '../../src/studies/dimse-pull';
import { StowService } from '../../src/studies/stow.service';
import { DefaultStudyAcquirer } from '../../src/studies/study-acquirer.service';
import { StudyStoragePaths } from '../../src/studies/study-storage.paths';
import type { StudyAcquisition } from '../../src/domain/study-acquirer.port';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import {
  createMrBrainStudy,
  generateUid,
  replicateInstance,
  shortPixelData,
  type DicomInstance,
} from '../helpers/dicom-factory';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import { insertOrder, readZip } from './study-test-support';
import { JPEG_2000_LOSSLESS, rawInstance } from '../helpers/raw-dicom';

/** The data set after the File Meta Information (PS3.10 §7.1): what C-STORE carries. */
function dataSetOf(part10: Buffer): Buffer {
  const groupLength = part10.readUInt32LE(132 + 8);
  return part10.subarray(132 + 12 + groupLength);
}

function transferSyntaxOf(part10: Buffer): string {
  const at = part10.indexOf(Buffer.from([0x02, 0x00, 0x10, 0x00]), 132);
  const length = part10.readUInt16LE(at + 6);
  return part10
    .subarray(at + 8, at + 8 + length)
    .toString('latin1')
    .replace(/\0+$/, '');
}

function expectReady(result: StudyAcquisition) {
  if (result.status !== 'ready') throw new Error(`expected ready: ${JSON.stringify(result)}`);
  return result.study;
}

/**
 * Pulling a study from a PACS that speaks only DIMSE (a real Orthanc over its DICOM port):
 * C-FIND, the quiet period, C-GET and C-MOVE (to our own C-STORE SCP, on "another replica"
 * sharing DATA_DIR), and the ways a retrieve goes wrong.
 */
describe('study acquisition from a PACS over DIMSE', () => {
  const AE = 'IMAGING-ADAPTER';
  const logger = pino({ level: 'silent' });
  let db: TestDatabase;
  let dataDir: string;
  let paths: StudyStoragePaths;
  let scpPort: number;
  let otherReplicaScpPort: number;
  let listeners: CStoreScpListener[];
  let orthanc: RunningOrthanc;
  let clock: number;

  const client = (pacs: RunningOrthanc, overrides: Partial<{ calledAe: string }> = {}) =>
    new DimseClient({
      host: '127.0.0.1',
      port: pacs.dicomPort,
      calledAeTitle: overrides.calledAe ?? pacs.aet,
      callingAeTitle: AE,
      timeoutMs: 5000,
      retrieveTimeoutMs: 60_000,
    });

  const acquirer = (
    pacs: RunningOrthanc,
    retrieve: 'move' | 'get',
    limits: { maxInstances?: number; maxBytes?: number; port?: number } = {},
    dicomWeb?: DicomWebClient,
  ) =>
    new DefaultStudyAcquirer({
      dataSource: db.dataSource,
      paths,
      logger,
      quietPeriodSeconds: 60,
      now: () => new Date(clock),
      dicomWeb,
      dimse: new DimsePacs({
        client: new DimseClient({
          host: '127.0.0.1',
          port: limits.port ?? pacs.dicomPort,
          calledAeTitle: pacs.aet,
          callingAeTitle: AE,
          timeoutMs: 5000,
          retrieveTimeoutMs: 60_000,
          maxBytes: limits.maxBytes,
        }),
        retrieve,
        paths,
        maxInstances: limits.maxInstances ?? 10_000,
        maxBytes: limits.maxBytes ?? 4 * 1024 ** 3,
      }),
    });

  /** First call starts the quiet period; the clock moves past it; the second retrieves. */
  const acquireAfterQuiet = async (
    a: DefaultStudyAcquirer,
    request: { orderId: string; studyInstanceUid?: string; accessionNumber?: string },
  ) => {
    const first = await a.acquire(request);
    expect(first).toMatchObject({ status: 'waiting', reason: expect.stringMatching(/settle/) });
    clock += 61_000;
    return a.acquire(request);
  };

  const store = async (pacs: RunningOrthanc, instances: DicomInstance[]) => {
    for (const i of instances) await pacs.store(i.bytes);
  };

  const auditOf = async (orderId: string, kind: string) =>
    (await db.dataSource.query(
      `SELECT summary, detail FROM audit_events WHERE order_id = $1 AND kind = $2 ORDER BY id`,
      [orderId, kind],
    )) as Array<{ summary: string; detail: Record<string, unknown> }>;

  beforeAll(async () => {
    [scpPort, otherReplicaScpPort] = await Promise.all([freePort(), freePort()]);
    db = await createTestDatabase();
    dataDir = mkdtempSync(join(tmpdir(), 'studies-dimse-'));
    paths = new StudyStoragePaths(dataDir);
    const stow = new StowService({
      dataSource: db.dataSource,
      paths,
      logger,
      maxRequestBytes: 1024 ** 3,
      unmatchedHoldMinutes: 60,
    });
    // Two replicas' SCPs sharing DATA_DIR; the PACS knows our AE at the second one.
    listeners = [scpPort, otherReplicaScpPort].map(
      (port) =>
        new CStoreScpListener({
          port,
          aeTitle: AE,
          // PACS_DIMSE_AE_TITLE: Orthanc's own title (test/helpers/orthanc.ts), the calling AE
          // of its move sub-operations.
          moveSourceAeTitle: 'TESTPACS',
          stow,
          paths,
          logger,
        }),
    );
    for (const l of listeners) l.start();
    orthanc = await startOrthanc({
      modalities: { [AE]: { host: '127.0.0.1', port: otherReplicaScpPort } },
    });
  });
  afterAll(async () => {
    for (const l of listeners ?? []) l.stop();
    await orthanc?.stop();
    await db?.drop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });
  beforeEach(() => {
    clock = Date.parse('2026-03-15T10:30:00Z');
  });

  it('finds a study with a study-root C-FIND by UID and by accession, with its instance count', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'CFIND-ACC-1' },
      series: [{ slices: 2 }, { slices: 3 }],
    });
    await store(orthanc, study);
    const uid = study[0]!.studyInstanceUid;
    const c = client(orthanc);
    expect(await c.findStudies({ studyInstanceUid: uid })).toEqual([
      {
        studyInstanceUid: uid,
        accessionNumber: 'CFIND-ACC-1',
        patientId: 'SBX-000123',
        instanceCount: 5,
        seriesCount: 2,
      },
    ]);
    expect(
      (await c.findStudies({ accessionNumber: 'CFIND-ACC-1' })).map((s) => s.studyInstanceUid),
    ).toEqual([uid]);
    expect(await c.findStudies({ studyInstanceUid: generateUid() })).toEqual([]);
    // Matching characters are never sent (they would match other patients' studies).
    await expect(c.findStudies({ accessionNumber: 'CFIND-*' })).rejects.toThrow(
      /matching characters/,
    );
    await expect(c.findStudies({ accessionNumber: 'CFIND-AC?-1' })).rejects.toThrow(
      /matching characters/,
    );
  });

  it('finds a study by an accession beyond ASCII, stored in ISO_IR 100 or ISO_IR 192, and never its ASCII look-alike', async () => {
    // A German RIS numbers exams by site (`MÜNCHEN-…`, sent in 8859/1); one modality wrote
    // the accession from the worklist in Latin-1, another in UTF-8. (Orthanc answers C-FIND in
    // its DefaultEncoding, Latin-1 here: a letter Latin-1 lacks, `Ł`, would come back lost
    // and the study refused as another's, never taken.)
    const latin1 = rawInstance({
      charset: 'ISO_IR 100',
      accession: 'MÜNCHEN-4711',
      patientId: 'PID-CF-1',
    });
    const utf8 = rawInstance({
      charset: 'ISO_IR 192',
      accession: Buffer.from('KÖLN-4711', 'utf8').toString('latin1'),
      patientId: 'PID-CF-2',
    });
    const lookAlike = rawInstance({
      charset: 'ISO_IR 100',
      accession: 'MUNCHEN-4711',
      patientId: 'PID-CF-3',
    });
    for (const i of [latin1, utf8, lookAlike]) await orthanc.store(i.bytes);
    const c = client(orthanc);
    const found = async (accession: string) =>
      (await c.findStudies({ accessionNumber: accession }))
        .filter((s) => s.accessionNumber === accession)
        .map((s) => s.studyInstanceUid);
    expect(await found('MÜNCHEN-4711')).toEqual([latin1.studyInstanceUid]);
    expect(await found('KÖLN-4711')).toEqual([utf8.studyInstanceUid]);
    expect(await found('MUNCHEN-4711')).toEqual([lookAlike.studyInstanceUid]);
    // Whatever the PACS's own matching answers, the acquirer uses only the order's study.
    const orderId = await insertOrder(db.dataSource, { accessionNumber: 'MÜNCHEN-4711' });
    const result = await acquireAfterQuiet(acquirer(orthanc, 'get'), {
      orderId,
      accessionNumber: 'MÜNCHEN-4711',
    });
    expect(expectReady(result).studyInstanceUid).toBe(latin1.studyInstanceUid);
  });

  it('retrieves with C-GET after the quiet period and packages every instance unchanged', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'CGET-ACC-1' },
      series: [{ slices: 2 }, { slices: 2 }],
    });
    await store(orthanc, study);
    const orderId = await insertOrder(db.dataSource, { accessionNumber: 'CGET-ACC-1' });
    const a = acquirer(orthanc, 'get');
    const packaged = expectReady(
      await acquireAfterQuiet(a, { orderId, accessionNumber: 'CGET-ACC-1' }),
    );
    expect(packaged).toMatchObject({
      source: 'dimse',
      instanceCount: 4,
      seriesCount: 2,
      studyInstanceUid: study[0]!.studyInstanceUid,
    });
    const zip = await readZip(packaged.packagePath);
    expect(zip.size).toBe(4);
    for (const original of study) {
      const entry = zip.get(`DICOM/${original.seriesInstanceUid}/${original.sopInstanceUid}.dcm`)!;
      expect(entry).toBeDefined();
      // Orthanc picks the stored syntax (explicit VR little endian) among those we propose:
      // the data set arrives, and is packaged, byte for byte as stored.
      expect(transferSyntaxOf(entry)).toBe(transferSyntaxOf(original.bytes));
      expect(dataSetOf(entry).equals(dataSetOf(original.bytes))).toBe(true);
    }
    const [event] = await auditOf(orderId, 'study.packaged');
    expect(event!.detail).toMatchObject({ source: 'dimse', retrieve: 'C-GET', completed: 4 });
    // A later call answers the package again without a new retrieve.
    expect(expectReady(await a.acquire({ orderId, accessionNumber: 'CGET-ACC-1' }))).toMatchObject({
      packagePath: packaged.packagePath,
    });
  });

  it('retrieves with C-MOVE: the sub-operations reach another replica’s SCP and land in the shared store', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'CMOVE-ACC-1' },
      series: [{ slices: 3 }],
    });
    await store(orthanc, study);
    const uid = study[0]!.studyInstanceUid;
    const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
    const packaged = expectReady(
      await acquireAfterQuiet(acquirer(orthanc, 'move'), { orderId, studyInstanceUid: uid }),
    );
    expect(packaged).toMatchObject({ source: 'dimse', instanceCount: 3 });
    const zip = await readZip(packaged.packagePath);
    for (const original of study) {
      const entry = zip.get(`DICOM/${original.seriesInstanceUid}/${original.sopInstanceUid}.dcm`)!;
      // Orthanc sends as stored (explicit VR little endian), our SCP keeps the bytes.
      expect(dataSetOf(entry).equals(dataSetOf(original.bytes))).toBe(true);
    }
    const [event] = await auditOf(orderId, 'study.packaged');
    expect(event!.detail).toMatchObject({ retrieve: 'C-MOVE', completed: 3 });
    // Our own move's sub-operations are not pushed instances: no rows, nothing left over.
    const rows = (await db.dataSource.query(
      `SELECT count(*)::int AS n FROM study_instances WHERE study_instance_uid = $1`,
      [uid],
    )) as Array<{ n: number }>;
    expect(rows[0]!.n).toBe(0);
    expect(readdirSync(paths.movedDir(uid))).toEqual([]);
  });

  it('retrieves a JPEG 2000 study with C-GET in the syntax the PACS holds, byte for byte (the PACS cannot decompress it)', async () => {
    // Before: C-GET proposed the native syntaxes only; a PACS holding compressed images it
    // has no codec for (Orthanc 1.10: JPEG 2000) failed every sub-operation (0xC000).
    // Ultrasound: not among the classes proposed when a PACS does not say which it holds,
    // so this passes only with the study's own SOP Classes in Study (C-FIND).
    const instance = rawInstance({
      accession: 'CGET-J2K-1',
      patientId: 'SBX-000123',
      jpeg2000: true,
      sopClassUid: '1.2.840.10008.5.1.4.1.1.6.1',
    });
    await orthanc.store(instance.bytes);
    const orderId = await insertOrder(db.dataSource, { accessionNumber: 'CGET-J2K-1' });
    const packaged = expectReady(
      await acquireAfterQuiet(acquirer(orthanc, 'get'), {
        orderId,
        accessionNumber: 'CGET-J2K-1',
      }),
    );
    expect(packaged).toMatchObject({ source: 'dimse', instanceCount: 1 });
    const [entry] = [...(await readZip(packaged.packagePath)).values()];
    expect(transferSyntaxOf(entry!)).toBe(JPEG_2000_LOSSLESS);
    expect(dataSetOf(entry!).equals(dataSetOf(instance.bytes))).toBe(true);
  });

  it('retrieves a JPEG 2000 study with C-MOVE in the syntax the PACS holds, byte for byte (the PACS cannot decompress it)', async () => {
    // The way for a PACS that keeps compressed images it has no codec for: its C-STORE
    // sub-operations propose the stored syntax, which our SCP accepts. (C-GET proposes the
    // native syntaxes only, and such a PACS fails every sub-operation: docs/studies.md.)
    const instance = rawInstance({
      accession: 'CMOVE-J2K-1',
      patientId: 'SBX-000123',
      jpeg2000: true,
    });
    await orthanc.store(instance.bytes);
    const orderId = await insertOrder(db.dataSource, { accessionNumber: 'CMOVE-J2K-1' });
    const packaged = expectReady(
      await acquireAfterQuiet(acquirer(orthanc, 'move'), {
        orderId,
        accessionNumber: 'CMOVE-J2K-1',
      }),
    );
    expect(packaged).toMatchObject({ source: 'dimse', instanceCount: 1 });
    const [entry] = [...(await readZip(packaged.packagePath)).values()];
    expect(transferSyntaxOf(entry!)).toBe(JPEG_2000_LOSSLESS);
    expect(dataSetOf(entry!).equals(dataSetOf(instance.bytes))).toBe(true);
  });

  it('C-MOVE of a study holding an instance our SCP refuses: failed at once naming it, as C-GET; the refused bytes kept for the audit', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'CMOVE-BAD-1' },
      series: [{ slices: 3 }],
    });
    // the PACS holds the second instance with its pixel data cut to 100 bytes (consistent
    // lengths: a PACS stores it, our check refuses it A900)
    const bad = { ...study[1]!, bytes: shortPixelData(study[1]!.bytes, 100) };
    await store(orthanc, [study[0]!, bad, study[2]!]);
    const uid = study[0]!.studyInstanceUid;
    for (const retrieve of ['get', 'move'] as const) {
      const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
      const result = await acquireAfterQuiet(acquirer(orthanc, retrieve), {
        orderId,
        studyInstanceUid: uid,
      });
      // before: C-MOVE waited 30 s ("C-MOVE answered 0xC000 (unable to process)": Orthanc stops
      // at the first refused sub-operation; others answer B000) and moved again until the
      // study deadline, the refused bytes deleted and their reason told nobody
      expect({ retrieve, result }).toMatchObject({
        retrieve,
        result: { status: 'failed', reason: expect.stringMatching(/pixel data incomplete/) },
      });
      expect(existsSync(paths.packageFile(orderId))).toBe(false);
    }
    const received = (await db.dataSource.query(
      `SELECT detail FROM audit_events WHERE kind = 'study.received' ORDER BY id`,
    )) as Array<{ detail: { refused: Array<{ sopInstanceUid?: string; keptAs?: string }> } }>;
    const refused = received
      .flatMap((e) => e.detail.refused)
      .find((r) => r.sopInstanceUid === study[1]!.sopInstanceUid);
    expect(refused?.keptAs).toBeDefined();
    expect(existsSync(paths.refusedFile(refused!.keptAs!))).toBe(true);
    expect(readdirSync(paths.movedDir(uid))).toEqual([]);
  });

  it('with DICOMweb and DIMSE both configured: DICOMweb first, DIMSE when DICOMweb is down or lacks the study', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'BOTH-ACC-1' },
      series: [{ slices: 2 }],
    });
    await store(orthanc, study);
    const web = new DicomWebClient({ baseUrl: orthanc.dicomWebUrl });
    const down = new DicomWebClient({ baseUrl: `http://127.0.0.1:${await freePort()}/dicom-web` });
    const empty = await startOrthanc();
    const emptyWeb = new DicomWebClient({ baseUrl: empty.dicomWebUrl });
    try {
      const cases: Array<[DicomWebClient, string]> = [
        [web, 'dicomweb'],
        [down, 'dimse'],
        [emptyWeb, 'dimse'],
      ];
      for (const [client, source] of cases) {
        const orderId = await insertOrder(db.dataSource, { accessionNumber: 'BOTH-ACC-1' });
        const packaged = expectReady(
          await acquireAfterQuiet(acquirer(orthanc, 'get', {}, client), {
            orderId,
            accessionNumber: 'BOTH-ACC-1',
          }),
        );
        expect(packaged).toMatchObject({ source, instanceCount: 2 });
      }
    } finally {
      await Promise.all([web.close(), down.close(), emptyWeb.close()]);
      await empty.stop();
    }
  });

  it('reads every match of a PACS that answers 0xFF01 (optional keys not supported)', async () => {
    // A minimal PACS of our own (dcmjs-dimse as SCP): two pending 0xFF01 answers, then 0x0000.
    const port = await freePort();
    class PickyPacs extends Scp {
      override associationRequested(association: dimseAssociation.Association): void {
        for (const { id } of association.getPresentationContexts())
          association
            .getPresentationContext(id)
            .setResult(constants.PresentationContextResult.Accept, '1.2.840.10008.1.2');
        this.sendAssociationAccept();
      }
      override associationReleaseRequested(): void {
        this.sendAssociationReleaseResponse();
      }
      override cFindRequest(
        request: requests.CFindRequest,
        callback: (r: responses.CFindResponse[]) => void,
      ): void {
        const answers = ['2.25.1', '2.25.2'].map((uid) => {
          const r = responses.CFindResponse.fromRequest(request);
          r.setDataset(
            new Dataset({ StudyInstanceUID: uid, AccessionNumber: 'PICKY-1', PatientID: 'P1' }),
          );
          r.setStatus(0xff01);
          return r;
        });
        const last = responses.CFindResponse.fromRequest(request);
        last.setStatus(constants.Status.Success);
        // The final answer comes later, as from a PACS still searching.
        callback(answers);
        setTimeout(() => this.sendResponse(request, last), 300);
      }
    }
    const server = new Server(PickyPacs);
    server.listen(port);
    try {
      const found = await client({ ...orthanc, dicomPort: port }).findStudies({
        accessionNumber: 'PICKY-1',
      });
      expect(found).toEqual([
        { studyInstanceUid: '2.25.1', accessionNumber: 'PICKY-1', patientId: 'P1' },
        { studyInstanceUid: '2.25.2', accessionNumber: 'PICKY-1', patientId: 'P1' },
      ]);
    } finally {
      server.close();
    }
  });

  it('C-GET: a sub-operation whose data set is another instance than its C-STORE request names fails the order, as our SCP refuses it', async () => {
    // A PACS (or a router behind it) that rewrites UIDs in the data set only: the C-STORE
    // request names one instance, the data set is another. Our SCP answers such a store A900
    // (as DCMTK's storescp does); the C-GET path wrote the request's UID into the File Meta
    // Information we put in front of the data set, and packaged an instance whose
    // MediaStorageSOPInstanceUID is not its SOP Instance UID (any value the PACS sent).
    const port = await freePort();
    const study = createMrBrainStudy({
      study: { accessionNumber: 'CGET-REWRITE-1' },
      series: [{ slices: 1 }],
    });
    const uid = study[0]!.studyInstanceUid;
    const file = join(dataDir, 'cget-rewrite.dcm');
    writeFileSync(file, study[0]!.bytes);
    class RewritingPacs extends Scp {
      override associationRequested(association: dimseAssociation.Association): void {
        for (const { id } of association.getPresentationContexts()) {
          const context = association.getPresentationContext(id);
          const syntaxes = context.getTransferSyntaxUids();
          // explicit VR little endian where offered (the file's), implicit for the queries
          const syntax = ['1.2.840.10008.1.2.1', '1.2.840.10008.1.2'].find((ts) =>
            syntaxes.includes(ts),
          );
          if (syntax) context.setResult(constants.PresentationContextResult.Accept, syntax);
          else
            context.setResult(
              constants.PresentationContextResult.RejectTransferSyntaxesNotSupported,
            );
        }
        this.sendAssociationAccept();
      }
      override associationReleaseRequested(): void {
        this.sendAssociationReleaseResponse();
      }
      override cFindRequest(
        request: requests.CFindRequest,
        callback: (r: responses.CFindResponse[]) => void,
      ): void {
        const answer = responses.CFindResponse.fromRequest(request);
        answer.setDataset(
          new Dataset({
            StudyInstanceUID: uid,
            AccessionNumber: 'CGET-REWRITE-1',
            NumberOfStudyRelatedInstances: '1',
          }),
        );
        answer.setStatus(constants.Status.Pending);
        const last = responses.CFindResponse.fromRequest(request);
        last.setStatus(constants.Status.Success);
        callback([answer, last]);
      }
      override cGetRequest(
        request: requests.CGetRequest,
        callback: (r: responses.CGetResponse[]) => void,
      ): void {
        const subOperation = new requests.CStoreRequest(file);
        subOperation.getCommandDataset().setElement('AffectedSOPInstanceUID', '2.25.999');
        subOperation.on('response', () => {
          const done = responses.CGetResponse.fromRequest(request);
          done.setStatus(constants.Status.Success);
          done.setCompleted(1);
          done.setRemaining(0);
          done.setFailures(0);
          done.setWarnings(0);
          callback([done]);
        });
        this.sendRequests(subOperation);
      }
    }
    const server = new Server(RewritingPacs);
    server.listen(port);
    try {
      const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
      const result = await acquireAfterQuiet(acquirer(orthanc, 'get', { port }), {
        orderId,
        studyInstanceUid: uid,
      });
      expect(result).toEqual({
        status: 'failed',
        reason: expect.stringMatching(
          /instance 1: the data set is another SOP Class or Instance than the C-STORE request names/,
        ),
      });
      expect(existsSync(paths.packageFile(orderId))).toBe(false);
      expect(existsSync(paths.pulledDir(orderId))).toBe(false);
    } finally {
      server.close();
    }
  });

  it('asked by Study Instance UID, a PACS that answers other studies too: those are no candidates, the asked one is used', async () => {
    // A PACS that does not match on StudyInstanceUID (it answers every study of the accession,
    // or all it has): before, the order failed "the accession number matches 3 studies"
    // though it has no accession and its study was among them.
    const port = await freePort();
    const asked = '2.25.7001';
    class LoosePacs extends Scp {
      override associationRequested(association: dimseAssociation.Association): void {
        for (const { id } of association.getPresentationContexts())
          association
            .getPresentationContext(id)
            .setResult(constants.PresentationContextResult.Accept, '1.2.840.10008.1.2');
        this.sendAssociationAccept();
      }
      override associationReleaseRequested(): void {
        this.sendAssociationReleaseResponse();
      }
      override cFindRequest(
        request: requests.CFindRequest,
        callback: (r: responses.CFindResponse[]) => void,
      ): void {
        const answers = ['2.25.7000', asked, '2.25.7002'].map((uid) => {
          const r = responses.CFindResponse.fromRequest(request);
          r.setDataset(
            new Dataset({
              StudyInstanceUID: uid,
              AccessionNumber: 'LOOSE-1',
              PatientID: 'P1',
              NumberOfStudyRelatedInstances: '3',
            }),
          );
          r.setStatus(constants.Status.Pending);
          return r;
        });
        const last = responses.CFindResponse.fromRequest(request);
        last.setStatus(constants.Status.Success);
        callback([...answers, last]);
      }
    }
    const server = new Server(LoosePacs);
    server.listen(port);
    try {
      const orderId = await insertOrder(db.dataSource, { studyInstanceUid: asked });
      const a = acquirer(orthanc, 'get', { port });
      expect(await a.acquire({ orderId, studyInstanceUid: asked })).toMatchObject({
        status: 'waiting',
        reason: '3 instance(s) in the PACS; waiting for the count to settle',
      });
      const notes = await auditOf(orderId, 'study.failed');
      expect(notes).toEqual([]);
    } finally {
      server.close();
    }
  });

  it('a PACS that answers one study twice (two archives behind it, or series-level answers) finds one study; differing answers are ambiguous', async () => {
    const port = await freePort();
    let answers: Array<Record<string, string>> = [];
    class TwicePacs extends Scp {
      override associationRequested(association: dimseAssociation.Association): void {
        for (const { id } of association.getPresentationContexts())
          association
            .getPresentationContext(id)
            .setResult(constants.PresentationContextResult.Accept, '1.2.840.10008.1.2');
        this.sendAssociationAccept();
      }
      override associationReleaseRequested(): void {
        this.sendAssociationReleaseResponse();
      }
      override cFindRequest(
        request: requests.CFindRequest,
        callback: (r: responses.CFindResponse[]) => void,
      ): void {
        const pending = answers.map((a) => {
          const r = responses.CFindResponse.fromRequest(request);
          r.setDataset(new Dataset(a));
          r.setStatus(constants.Status.Pending);
          return r;
        });
        const last = responses.CFindResponse.fromRequest(request);
        last.setStatus(constants.Status.Success);
        callback([...pending, last]);
      }
    }
    const server = new Server(TwicePacs);
    server.listen(port);
    try {
      const uid = '2.25.7101';
      const answer = {
        StudyInstanceUID: uid,
        AccessionNumber: 'TWICE-1',
        PatientID: 'P1',
        NumberOfStudyRelatedInstances: '4',
      };
      answers = [answer, { ...answer }];
      for (const request of [{ studyInstanceUid: uid }, { accessionNumber: 'TWICE-1' }]) {
        const orderId = await insertOrder(db.dataSource, request);
        // before: failed, "the accession number matches 2 studies in the PACS"
        expect(
          await acquirer(orthanc, 'get', { port }).acquire({ orderId, ...request }),
        ).toMatchObject({
          status: 'waiting',
          reason: '4 instance(s) in the PACS; waiting for the count to settle',
        });
      }
      // the two answers disagree (count, patient): which is the study is not known
      answers = [answer, { ...answer, NumberOfStudyRelatedInstances: '5', PatientID: 'P2' }];
      const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
      expect(
        await acquirer(orthanc, 'get', { port }).acquire({ orderId, studyInstanceUid: uid }),
      ).toMatchObject({
        status: 'failed',
        reason: expect.stringMatching(/answered the study 2 times, with different/),
      });
    } finally {
      server.close();
    }
  });

  it('never retrieves a study whose accession or patient differ from the order', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'OTHER-ACC-9' },
      series: [{ slices: 1 }],
    });
    await store(orthanc, study);
    const uid = study[0]!.studyInstanceUid;
    const orderId = await insertOrder(db.dataSource, {
      studyInstanceUid: uid,
      accessionNumber: 'MY-ACC-1',
    });
    const result = await acquirer(orthanc, 'get').acquire({
      orderId,
      studyInstanceUid: uid,
      accessionNumber: 'MY-ACC-1',
    });
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
    expect(existsSync(paths.pulledDir(orderId))).toBe(false);
  });

  it('waits with a PHI-free reason when the PACS does not know our AE as a move destination', async () => {
    // A second PACS without our AE in its DicomModalities.
    const stranger = await startOrthanc();
    try {
      const study = createMrBrainStudy({ series: [{ slices: 2 }] });
      await store(stranger, study);
      const uid = study[0]!.studyInstanceUid;
      const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
      const a = acquirer(stranger, 'move');
      const result = await acquireAfterQuiet(a, { orderId, studyInstanceUid: uid });
      // PS3.4 C.4.2.1.5: 0xA801 move destination unknown; Orthanc 1.10 answers 0xC000.
      expect(result).toMatchObject({
        status: 'waiting',
        reason: expect.stringMatching(/^C-MOVE answered 0x(A801|C000) /),
        retryAfterMs: 30_000,
      });
      expect(existsSync(paths.packageFile(orderId))).toBe(false);
      // The analyst sees it on the order's timeline, once per distinct reason.
      clock += 31_000;
      expect(await a.acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
        status: 'waiting',
      });
      const events = await auditOf(orderId, 'study.retrieve-problem');
      expect(events).toHaveLength(1);
      expect(events[0]!.summary).toMatch(/C-MOVE answered 0x(A801|C000)/);
      expect(JSON.stringify(events)).not.toMatch(/SBX-000123|Sandbox/);
    } finally {
      await stranger.stop();
    }
  });

  it('waits when the PACS is unreachable or rejects the association', async () => {
    const orderId = await insertOrder(db.dataSource, { accessionNumber: 'DOWN-ACC-1' });
    const closedPort = await freePort();
    const down = await acquirer(orthanc, 'get', { port: closedPort }).acquire({
      orderId,
      accessionNumber: 'DOWN-ACC-1',
    });
    expect(down).toMatchObject({
      status: 'waiting',
      reason: expect.stringMatching(/PACS unreachable/),
    });
    // Our own SCP plays a PACS that does not answer to the AE title we call: rejected.
    const rejected = await client({ ...orthanc, dicomPort: scpPort }, { calledAe: 'NOT-THEM' })
      .findStudies({ accessionNumber: 'DOWN-ACC-1' })
      .catch((e: Error & { transient?: boolean }) => e);
    expect(rejected).toMatchObject({
      message: expect.stringMatching(/rejected the association .*called AE title not recognized/),
      transient: true,
    });
  });

  it('refuses a study with more instances or bytes than the limits, without packaging any', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'BIG-ACC-1' },
      series: [{ slices: 4 }],
    });
    await store(orthanc, study);
    const orderId = await insertOrder(db.dataSource, { accessionNumber: 'BIG-ACC-1' });
    // Known from the C-FIND count: refused before the quiet period, nothing retrieved.
    const tooMany = await acquirer(orthanc, 'get', { maxInstances: 3 }).acquire({
      orderId,
      accessionNumber: 'BIG-ACC-1',
    });
    expect(tooMany).toMatchObject({
      status: 'failed',
      reason: expect.stringMatching(/limit of 3/),
    });

    const orderId2 = await insertOrder(db.dataSource, { accessionNumber: 'BIG-ACC-1' });
    const tooBig = await acquireAfterQuiet(acquirer(orthanc, 'get', { maxBytes: 5000 }), {
      orderId: orderId2,
      accessionNumber: 'BIG-ACC-1',
    });
    expect(tooBig).toMatchObject({
      status: 'failed',
      reason: expect.stringMatching(/larger than 5000 bytes/),
    });
    expect(existsSync(paths.pulledDir(orderId2))).toBe(false);

    // C-MOVE: the instances reach our SCP; past the limit nothing is packaged or left over.
    const orderId3 = await insertOrder(db.dataSource, { accessionNumber: 'BIG-ACC-1' });
    const movedTooBig = await acquireAfterQuiet(acquirer(orthanc, 'move', { maxBytes: 5000 }), {
      orderId: orderId3,
      accessionNumber: 'BIG-ACC-1',
    });
    expect(movedTooBig).toMatchObject({
      status: 'failed',
      reason: expect.stringMatching(/larger than 5000 bytes/),
    });
    expect(existsSync(paths.pulledDir(orderId3))).toBe(false);
    expect(readdirSync(paths.movedDir(study[0]!.studyInstanceUid))).toEqual([]);
  });

  it('sweeps what a broken-off move left once its study folder has been idle for an hour', async () => {
    const idle = generateUid();
    const busy = generateUid();
    for (const uid of [idle, busy]) {
      mkdirSync(paths.movedDir(uid), { recursive: true });
      writeFileSync(paths.movedFile(uid, generateUid(), generateUid()), 'x');
    }
    const hourAgo = new Date(Date.now() - 61 * 60_000);
    for (const name of readdirSync(paths.movedDir(idle)))
      utimesSync(join(paths.movedDir(idle), name), hourAgo, hourAgo);
    clock = Date.now();
    await acquirer(orthanc, 'get').expireUnmatched();
    expect(existsSync(paths.movedDir(idle))).toBe(false);
    expect(readdirSync(paths.movedDir(busy))).toHaveLength(1);
  });

  describe('a PACS that dies mid-transfer', () => {
    // 160 instances of 512 KiB: long enough a transfer to be cut short on a busy machine.
    const bigStudy = () =>
      replicateInstance(
        createMrBrainStudy({
          study: { accessionNumber: `DIES-${generateUid().slice(-8)}` },
          series: [{ slices: 1, rows: 512, columns: 512 }],
        })[0]!,
        160,
      );

    /** Kills the PACS as soon as the first instance of the retrieve is on our disk. */
    /** Waits for the first instance of the retrieve on our disk. */
    const firstFile = async (dir: string) => {
      for (let i = 0; i < 20_000; i++) {
        if (existsSync(dir) && readdirSync(dir).length > 0) return;
        await sleep(2);
      }
      throw new Error('no instance arrived');
    };

    it.each(['get', 'move'] as const)(
      'C-%s: waits, keeps nothing of the partial study, and holds the lease meanwhile',
      async (retrieve) => {
        const pacs = await startOrthanc({
          modalities: { [AE]: { host: '127.0.0.1', port: scpPort } },
        });
        try {
          const study = bigStudy();
          await store(pacs, study);
          const uid = study[0]!.studyInstanceUid;
          const orderId = await insertOrder(db.dataSource, { studyInstanceUid: uid });
          const a = acquirer(pacs, retrieve);
          expect(await a.acquire({ orderId, studyInstanceUid: uid })).toMatchObject({
            status: 'waiting',
          });
          clock += 61_000;
          const pending = a.acquire({ orderId, studyInstanceUid: uid });
          const watched = retrieve === 'get' ? paths.pulledDir(orderId) : paths.movedDir(uid);
          const [result] = await Promise.all([
            pending,
            (async () => {
              await firstFile(watched);
              // Another replica asking mid-transfer is told to come back: one retrieve at a
              // time (one UPDATE that finds the lease taken; the transfer goes on meanwhile).
              expect(
                await acquirer(pacs, retrieve).acquire({ orderId, studyInstanceUid: uid }),
              ).toMatchObject({
                status: 'waiting',
                reason: expect.stringMatching(/another worker/),
              });
              pacs.kill();
            })(),
          ]);
          expect(result).toMatchObject({
            status: 'waiting',
            reason: expect.stringMatching(
              /^PACS (unreachable or )?connection lost during C-(GET|MOVE)/,
            ),
          });
          expect(existsSync(paths.packageFile(orderId))).toBe(false);
          const left = existsSync(watched) ? readdirSync(watched) : [];
          expect(left).toEqual([]);
        } finally {
          await pacs.stop();
        }
      },
      60_000,
    );
  });
});
