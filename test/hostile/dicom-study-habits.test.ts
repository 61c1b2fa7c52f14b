import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../src/persistence/embedded-postgres';
import { STUDY_ACQUIRER, type StudyAcquirer } from '../../src/domain/study-acquirer.port';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { createMrBrainSeries, generateUid } from '../helpers/dicom-factory';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import { readZip, stowToAdapter } from '../studies/study-test-support';

jest.setTimeout(120_000);

const insertOrderIn = async (
  adapter: TestAdapter,
  accession: string,
  patientId: string,
  studyUid: string | null,
) =>
  (
    (await adapter.dataSource.query(
      `INSERT INTO orders (source, state, request, accession_number, patient_id, study_instance_uid)
       VALUES ('api', 'placed', '{}'::jsonb, $1, $2, $3) RETURNING id`,
      [accession, patientId, studyUid],
    )) as Array<{ id: string }>
  )[0]!.id;

describe('hostile: pushed studies as real sites send them', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false', STUDY_QUIET_PERIOD_SECONDS: '1' });
  });
  afterAll(async () => adapter?.close());

  const insertOrder = (accession: string, patientId: string, studyUid: string | null) =>
    insertOrderIn(adapter, accession, patientId, studyUid);

  const acquireUntilDone = async (req: Parameters<StudyAcquirer['acquire']>[0]) => {
    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    let result = await acquirer.acquire(req);
    for (let i = 0; i < 20 && result.status === 'waiting'; i++) {
      await new Promise((r) => setTimeout(r, 300));
      result = await acquirer.acquire(req);
    }
    return result;
  };

  it.each([
    ['held, unmatched', false],
    ['matched to the order of its own accession', true],
  ])(
    'a study whose second series carries another accession (%s): the order of the first never gets a part of it',
    async (_label, secondOrder) => {
      // Two requested procedures acquired as one study (IHE grouped procedures done wrongly,
      // or a merge at the modality): one Study Instance UID, a series per accession.
      const studyUid = generateUid();
      const tag = Math.random().toString(36).slice(2, 8).toUpperCase();
      const patient = { patientId: 'P-MIX', patientName: 'Mix^Pat' };
      const series = (accessionNumber: string, seriesNumber: number) =>
        createMrBrainSeries({
          patient,
          study: { studyInstanceUid: studyUid, accessionNumber },
          series: { slices: 2, seriesNumber },
        });
      const orderId = await insertOrder(`MIX-A-${tag}`, 'P-MIX', null);
      if (secondOrder) await insertOrder(`MIX-B-${tag}`, 'P-MIX', null);
      const instances = [...series(`MIX-A-${tag}`, 1), ...series(`MIX-B-${tag}`, 2)];
      const pushed = await stowToAdapter(
        adapter.httpUrl,
        instances.map((i) => i.bytes),
      );
      expect(pushed.status).toBe(200);
      const result = await acquireUntilDone({
        orderId,
        accessionNumber: `MIX-A-${tag}`,
        patientId: 'P-MIX',
      });
      // Before: ready, with 2 of the study's 4 instances packaged as the study.
      expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
      const events = (await adapter.dataSource.query(
        `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'study.identity-mismatch'`,
        [orderId],
      )) as Array<{ detail: { mismatches: Array<{ field: string }> } }>;
      expect(events.map((e) => e.detail.mismatches.map((x) => x.field))).toEqual([
        ['accession-number'],
      ]);
    },
  );

  it('a pushed study holding one SOP Instance UID in two series is packaged with both, as a pull brings it; an identical resend stays one', async () => {
    // What a pull keeps (moved files are named by series and SOP UID, see below). Pushed, the
    // second copy replaced the first (study_instances was UNIQUE on the SOP UID alone): 3 of
    // the 4 instances the modality sent were packaged.
    const studyUid = generateUid();
    const accession = `DUPP-${Math.random().toString(36).slice(2, 8).toUpperCase()}`;
    const study = { studyInstanceUid: studyUid, accessionNumber: accession };
    const patient = { patientId: 'P-DUPP', patientName: 'Dupp^Pat' };
    const first = createMrBrainSeries({ patient, study, series: { slices: 2, seriesNumber: 1 } });
    const second = createMrBrainSeries({ patient, study, series: { slices: 2, seriesNumber: 2 } });
    const dir = mkdtempSync(join(tmpdir(), 'dup-push-'));
    try {
      const file = join(dir, 'dup.dcm');
      writeFileSync(file, second[0]!.bytes);
      execFileSync('dcmodify', ['-nb', '-m', `SOPInstanceUID=${first[0]!.sopInstanceUid}`, file]);
      second[0] = {
        ...second[0]!,
        sopInstanceUid: first[0]!.sopInstanceUid,
        bytes: readFileSync(file),
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const all = [...first, ...second];
    expect(
      (
        await stowToAdapter(
          adapter.httpUrl,
          all.map((i) => i.bytes),
        )
      ).status,
    ).toBe(200);
    // The same instances again (a modality's retry): still one row each.
    expect(
      (
        await stowToAdapter(
          adapter.httpUrl,
          all.map((i) => i.bytes),
        )
      ).status,
    ).toBe(200);
    const rows = (await adapter.dataSource.query(
      `SELECT series_instance_uid, sop_instance_uid FROM study_instances WHERE study_instance_uid = $1`,
      [studyUid],
    )) as Array<{ series_instance_uid: string; sop_instance_uid: string }>;
    expect(rows).toHaveLength(4);
    const orderId = await insertOrder(accession, 'P-DUPP', studyUid);
    const result = await acquireUntilDone({
      orderId,
      studyInstanceUid: studyUid,
      accessionNumber: accession,
      patientId: 'P-DUPP',
    });
    expect(result).toMatchObject({ status: 'ready', study: { instanceCount: 4 } });
    const zip = await readZip((result as { study: { packagePath: string } }).study.packagePath);
    expect([...zip.keys()].filter((n) => n.startsWith('DICOM/')).sort()).toEqual(
      all.map((i) => `DICOM/${i.seriesInstanceUid}/${i.sopInstanceUid}.dcm`).sort(),
    );
  });

  it('a study pushed whole under one accession is still packaged whole', async () => {
    const studyUid = generateUid();
    const accession = `ONE-${Math.random().toString(36).slice(2, 8).toUpperCase()}`;
    const instances = [1, 2].flatMap((seriesNumber) =>
      createMrBrainSeries({
        patient: { patientId: 'P-ONE', patientName: 'One^Pat' },
        study: { studyInstanceUid: studyUid, accessionNumber: accession },
        series: { slices: 2, seriesNumber },
      }),
    );
    const orderId = await insertOrder(accession, 'P-ONE', null);
    expect(
      (
        await stowToAdapter(
          adapter.httpUrl,
          instances.map((i) => i.bytes),
        )
      ).status,
    ).toBe(200);
    const result = await acquireUntilDone({
      orderId,
      accessionNumber: accession,
      patientId: 'P-ONE',
    });
    expect(result).toMatchObject({ status: 'ready', study: { instanceCount: 4 } });
  });
});

/**
 * One SOP Instance UID on two instances of a study, in two series: what a modality that
 * derives UIDs from a clock, or a copy-and-edit tool, gives. A PACS keeps both (Orthanc files
 * an instance by patient, study, series and SOP UID); the retrieve must bring the study as the
 * PACS counts it, whichever way it retrieves.
 */
describe.each(['move', 'get'] as const)(
  'hostile: a PACS study holding one SOP Instance UID twice (C-%s)',
  (retrieve) => {
    const AE = 'IMAGING-ADAPTER';
    let orthanc: RunningOrthanc;
    let adapter: TestAdapter;
    let dir: string;
    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'dup-sop-'));
      const scpPort = await freePort();
      orthanc = await startOrthanc({ modalities: { [AE]: { host: '127.0.0.1', port: scpPort } } });
      adapter = await startTestAdapter({
        JOBS_ENABLED: 'false',
        STUDY_QUIET_PERIOD_SECONDS: '1',
        PACS_DIMSE_HOST: '127.0.0.1',
        PACS_DIMSE_PORT: String(orthanc.dicomPort),
        PACS_DIMSE_AE_TITLE: orthanc.aet,
        PACS_DIMSE_RETRIEVE: retrieve,
        DICOM_SCP_AE_TITLE: AE,
        ...(retrieve === 'move' ? { DICOM_SCP_PORT: String(scpPort) } : {}),
      });
    });
    afterAll(async () => {
      await adapter?.close();
      await orthanc?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('every instance the PACS sends is packaged: the order is not left waiting for one that was overwritten', async () => {
      const studyUid = generateUid();
      const accession = `DUP-${retrieve.toUpperCase()}-${Math.random().toString(36).slice(2, 7)}`;
      const study = { studyInstanceUid: studyUid, accessionNumber: accession };
      const patient = { patientId: 'P-DUP', patientName: 'Dup^Pat' };
      const first = createMrBrainSeries({ patient, study, series: { slices: 2, seriesNumber: 1 } });
      const second = createMrBrainSeries({
        patient,
        study,
        series: { slices: 2, seriesNumber: 2 },
      });
      // The second series' first image reuses the first series' first SOP Instance UID.
      const file = join(dir, 'dup.dcm');
      writeFileSync(file, second[0]!.bytes);
      execFileSync('dcmodify', ['-nb', '-m', `SOPInstanceUID=${first[0]!.sopInstanceUid}`, file]);
      second[0] = {
        ...second[0]!,
        sopInstanceUid: first[0]!.sopInstanceUid,
        bytes: readFileSync(file),
      };
      for (const i of [...first, ...second]) await orthanc.store(i.bytes);

      const orderId = await insertOrderIn(adapter, accession, 'P-DUP', studyUid);
      const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
      const req = {
        orderId,
        studyInstanceUid: studyUid,
        accessionNumber: accession,
        patientId: 'P-DUP',
      };
      let result = await acquirer.acquire(req);
      for (let i = 0; i < 8 && result.status === 'waiting'; i++) {
        await new Promise((r) => setTimeout(r, 1200));
        result = await acquirer.acquire(req);
      }
      // Before (C-MOVE): our SCP filed both under one name, 3 of 4 reached the store, and the
      // order waited, moving the study again every 30 s until its deadline ("is DATA_DIR
      // shared?"); C-GET packaged all 4.
      expect(result).toMatchObject({ status: 'ready', study: { instanceCount: 4 } });
      const zip = await readZip((result as { study: { packagePath: string } }).study.packagePath);
      const entries = [...zip.keys()].filter((n) => n.startsWith('DICOM/'));
      expect(entries.sort()).toEqual(
        [...first, ...second]
          .map((i) => `DICOM/${i.seriesInstanceUid}/${i.sopInstanceUid}.dcm`)
          .sort(),
      );
    });
  },
);
