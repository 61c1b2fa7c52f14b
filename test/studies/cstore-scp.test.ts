import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../src/persistence/embedded-postgres';
import { STUDY_ACQUIRER, type StudyAcquirer } from '../../src/domain/study-acquirer.port';
import { StudyStoragePaths } from '../../src/studies/study-storage.paths';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { createMrBrainStudy, shortPixelData } from '../helpers/dicom-factory';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import { insertOrder, readZip } from './study-test-support';

const run = promisify(execFile);

/** The data set after the File Meta Information (PS3.10 §7.1): what C-STORE carries. */
function dataSetOf(part10: Buffer): Buffer {
  const groupLength = part10.readUInt32LE(132 + 8);
  return part10.subarray(132 + 12 + groupLength);
}

/** The C-STORE SCP, fed by a real PACS (Orthanc routing over DIMSE) and DCMTK's tools. */
describe('DICOM C-STORE SCP', () => {
  let orthanc: RunningOrthanc;
  let adapter: TestAdapter;
  let port: number;
  let dir: string;
  const AE = 'ADAPTER-TEST';

  beforeAll(async () => {
    port = await freePort();
    [orthanc, adapter] = await Promise.all([
      startOrthanc(),
      startTestAdapter({
        DICOM_SCP_PORT: String(port),
        DICOM_SCP_AE_TITLE: AE,
        STUDY_QUIET_PERIOD_SECONDS: '1',
        JOBS_ENABLED: 'false',
      }),
    ]);
    dir = mkdtempSync(join(tmpdir(), 'cstore-'));
    // Orthanc learns where to send (its REST API, as an admin would configure it).
    const res = await fetch(`${orthanc.url}/modalities/adapter`, {
      method: 'PUT',
      body: JSON.stringify({ AET: AE, Host: '127.0.0.1', Port: port }),
    });
    expect(res.ok).toBe(true);
  });
  afterAll(async () => {
    await adapter?.close();
    await orthanc?.stop();
    if (adapter) rmSync(adapter.dataDir, { recursive: true, force: true });
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('answers C-ECHO for its AE title and refuses an association to another one', async () => {
    await expect(run('echoscu', ['-aec', AE, '127.0.0.1', String(port)])).resolves.toBeDefined();
    await expect(run('echoscu', ['-aec', 'NOT-US', '127.0.0.1', String(port)])).rejects.toThrow();
  });

  it('receives a study a PACS sends over DIMSE, matches it to its order, and packages it', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'DIMSE-ACC-1' },
      series: [
        { slices: 2, seriesDescription: 'T1' },
        { slices: 1, seriesDescription: 'FLAIR' },
      ],
    });
    const orderId = await insertOrder(adapter.dataSource, { accessionNumber: 'DIMSE-ACC-1' });
    let orthancStudy = '';
    for (const i of study) orthancStudy = (await orthanc.store(i.bytes)).ParentStudy;

    const sent = await fetch(`${orthanc.url}/modalities/adapter/store`, {
      method: 'POST',
      body: JSON.stringify({ Resources: [orthancStudy], Synchronous: true }),
    });
    expect(sent.status).toBe(200);

    const rows = (await adapter.dataSource.query(
      `SELECT sop_instance_uid, file_path, order_id, source, sender FROM study_instances
        WHERE study_instance_uid = $1`,
      [study[0]!.studyInstanceUid],
    )) as Array<{
      sop_instance_uid: string;
      file_path: string;
      order_id: string;
      source: string;
      sender: string;
    }>;
    expect(rows).toHaveLength(3);
    for (const r of rows) {
      expect(r).toMatchObject({ order_id: orderId, source: 'c-store', sender: 'dicom:TESTPACS' });
      // The data set is kept exactly as sent (explicit VR little endian, as stored).
      const original = study.find((i) => i.sopInstanceUid === r.sop_instance_uid)!;
      expect(dataSetOf(await readFile(r.file_path)).equals(dataSetOf(original.bytes))).toBe(true);
    }

    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    await new Promise((r) => setTimeout(r, 1100));
    const ready = await acquirer.acquire({ orderId, accessionNumber: 'DIMSE-ACC-1' });
    if (ready.status !== 'ready') throw new Error(`expected ready: ${JSON.stringify(ready)}`);
    expect(ready.study).toMatchObject({ source: 'c-store', instanceCount: 3, seriesCount: 2 });
    expect((await readZip(ready.study.packagePath)).size).toBe(3);
  });

  it('refuses an instance whose pixel data is incomplete, with status A900', async () => {
    const [inst] = createMrBrainStudy({ series: [{ slices: 1 }] });
    const file = join(dir, 'short.dcm');
    writeFileSync(file, shortPixelData(inst!.bytes, 100));
    // storescu reports the refusal in its log; the adapter records nothing but the refusal.
    const result = await run('storescu', ['-v', '-aec', AE, '127.0.0.1', String(port), file]).catch(
      (e: { stdout: string; stderr: string }) => e,
    );
    // DCMTK names status A900 "DataSetDoesNotMatchSOPClass" (PS3.4 Table B.2-1).
    expect(`${result.stdout}${result.stderr}`).toMatch(
      /Received Store Response \(Error: DataSetDoesNotMatchSOPClass\)/,
    );
    const rows = (await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM study_instances WHERE sop_instance_uid = $1`,
      [inst!.sopInstanceUid],
    )) as Array<{ n: number }>;
    expect(rows[0]!.n).toBe(0);
    const [event] = (await adapter.dataSource.query(
      `SELECT severity, detail FROM audit_events WHERE kind = 'study.received'
        AND detail->'refused' @> $1::jsonb`,
      [JSON.stringify([{ sopInstanceUid: inst!.sopInstanceUid }])],
    )) as Array<{
      severity: string;
      detail: { refused: Array<{ reason: string; keptAs?: string }> };
    }>;
    expect(event).toMatchObject({ severity: 'warning' });
    expect(event!.detail.refused[0]!.reason).toMatch(/^pixel data incomplete/);
    // The refused data set is kept for the audit, as received (it used to be deleted).
    const kept = await readFile(
      new StudyStoragePaths(adapter.dataDir).refusedFile(event!.detail.refused[0]!.keptAs!),
    );
    expect(dataSetOf(kept).equals(dataSetOf(readFileSync(file)))).toBe(true);
  });

  it('takes JPEG, JPEG-LS and RLE instances a modality sends compressed, stored as received', async () => {
    // DCMTK compresses the slices as a modality or router that stores compressed does, and
    // storescu proposes each in its own transfer syntax only; the instance check reads the
    // encapsulated pixel data's items (offset table, fragment, delimiter) in the data set as
    // it came over the association.
    const [a, b, c] = createMrBrainStudy({ series: [{ slices: 3, rows: 128, columns: 128 }] });
    const cases = [
      { inst: a!, tool: 'dcmcjpeg', propose: '-xs', syntax: '1.2.840.10008.1.2.4.70' },
      { inst: b!, tool: 'dcmcjpls', propose: '-xt', syntax: '1.2.840.10008.1.2.4.80' },
      { inst: c!, tool: 'dcmcrle', propose: '-xr', syntax: '1.2.840.10008.1.2.5' },
    ];
    for (const k of cases) {
      const source = join(dir, `${k.tool}-in.dcm`);
      const out = join(dir, `${k.tool}.dcm`);
      writeFileSync(source, k.inst.bytes);
      await run(k.tool, [source, out]);
      await run('storescu', ['-R', k.propose, '-aec', AE, '127.0.0.1', String(port), out]);
    }
    const rows = (await adapter.dataSource.query(
      `SELECT sop_instance_uid, transfer_syntax_uid FROM study_instances WHERE sop_instance_uid = ANY($1)`,
      [cases.map((k) => k.inst.sopInstanceUid)],
    )) as Array<{ sop_instance_uid: string; transfer_syntax_uid: string }>;
    expect(new Map(rows.map((r) => [r.sop_instance_uid, r.transfer_syntax_uid]))).toEqual(
      new Map(cases.map((k) => [k.inst.sopInstanceUid, k.syntax])),
    );
  });
});
