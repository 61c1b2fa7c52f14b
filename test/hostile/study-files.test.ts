import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { promisify } from 'node:util';
import { freePort } from '../../src/persistence/embedded-postgres';
import { STUDY_ACQUIRER, type StudyAcquirer } from '../../src/domain/study-acquirer.port';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { createMrBrainStudy, type DicomInstance } from '../helpers/dicom-factory';
import { insertOrder, readZip, sha256, stowToAdapter } from '../studies/study-test-support';

jest.setTimeout(120_000);
const run = promisify(execFile);

/**
 * Issue #15 item 8: the C-STORE SCP listens only on DICOM_SCP_HOST (not every interface), and
 * study files and folders that hold PHI are readable by the adapter's user alone.
 */
function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(p, ...filesUnder(p));
    else out.push(p);
  }
  return out;
}

describe('hostile: the C-STORE SCP and the study store', () => {
  let adapter: TestAdapter;
  let port: number;
  let dir: string;
  const AE = 'ADAPTER-HOSTILE';

  beforeAll(async () => {
    port = await freePort();
    adapter = await startTestAdapter({
      DICOM_SCP_PORT: String(port),
      DICOM_SCP_HOST: '127.0.0.1',
      DICOM_SCP_AE_TITLE: AE,
      DICOM_SCP_CALLING_AE_TITLES: 'HOSTILE-PACS',
      JOBS_ENABLED: 'false',
    });
    dir = mkdtempSync(join(tmpdir(), 'hostile-files-'));
  });
  afterAll(async () => {
    await adapter?.close();
    if (adapter) rmSync(adapter.dataDir, { recursive: true, force: true });
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('listens on DICOM_SCP_HOST only', () => {
    const listening = execFileSync('ss', ['-ltnH', `sport = :${port}`], { encoding: 'utf8' });
    expect(listening).toContain(`127.0.0.1:${port}`);
    expect(listening).not.toMatch(/(0\.0\.0\.0|\*|\[::\]):\d+/);
  });

  it('refuses a calling AE not on the list, and stores what an allowed one sends with mode 0600 in 0700 folders', async () => {
    const study = createMrBrainStudy({
      study: { accessionNumber: 'FILES-1' },
      series: [{ slices: 2 }],
    });
    const files = study.map((inst, i) => {
      const f = join(dir, `${i}.dcm`);
      writeFileSync(f, inst.bytes);
      return f;
    });
    await expect(
      run('storescu', ['-aet', 'SOMEONE-ELSE', '-aec', AE, '127.0.0.1', String(port), ...files]),
    ).rejects.toThrow();
    await run('storescu', [
      '-aet',
      'HOSTILE-PACS',
      '-aec',
      AE,
      '127.0.0.1',
      String(port),
      ...files,
    ]);
    const stored = filesUnder(join(adapter.dataDir, 'studies'));
    const dicomFiles = stored.filter((p) => statSync(p).isFile());
    expect(dicomFiles.length).toBeGreaterThanOrEqual(2);
    for (const p of stored) {
      const mode = statSync(p).mode & 0o777;
      expect({ p, mode: mode.toString(8) }).toEqual({
        p,
        mode: statSync(p).isDirectory() ? '700' : '600',
      });
    }
  });
});

describe('hostile: a sender resends the study while the adapter packages it', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false', STUDY_QUIET_PERIOD_SECONDS: '1' });
  });
  afterAll(async () => {
    await adapter?.close();
    if (adapter) rmSync(adapter.dataDir, { recursive: true, force: true });
  });

  const stow = async (study: DicomInstance[]) =>
    (await stowToAdapter(adapter.httpUrl, study)).status;

  it('resends replacing the files being packaged: no exception, no failed order; the package holds the whole study once it is quiet', async () => {
    // A modality (or a router retrying on its own timeout) sends the study again while the
    // adapter zips it: each resent copy replaces the stored file and the earlier copy is
    // removed. The ZIP writer then met a removed file and the acquisition threw (ENOENT),
    // retried as a job error, as often as the resends kept coming.
    const study = createMrBrainStudy({
      study: { accessionNumber: 'RESEND-PKG-1' },
      series: [{ slices: 24, rows: 512, columns: 512 }],
    });
    const orderId = await insertOrder(adapter.dataSource, { accessionNumber: 'RESEND-PKG-1' });
    expect(await stow(study)).toBe(200);
    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    const req = { orderId, accessionNumber: 'RESEND-PKG-1' };
    await new Promise((r) => setTimeout(r, 1200));
    const outcomes: string[] = [];
    for (let round = 0; round < 4; round++) {
      let settled = false;
      const acquiring = acquirer.acquire(req).then(
        (r) => `${r.status}`,
        (e: Error) => `threw: ${e.message}`,
      );
      void acquiring.finally(() => (settled = true));
      // resend while it packages: last instances first, so the writer reaches a replaced one
      const reversed = [...study].reverse();
      while (!settled) {
        for (const inst of reversed) {
          if (settled) break;
          await stow([inst]);
        }
      }
      outcomes.push(await acquiring);
      await new Promise((r) => setTimeout(r, 1200));
    }
    expect(outcomes.filter((o) => o.startsWith('threw') || o === 'failed')).toEqual([]);
    // quiet now: the package is made of the copies last received, every instance once
    let result = await acquirer.acquire(req);
    for (let i = 0; i < 10 && result.status === 'waiting'; i++) {
      await new Promise((r) => setTimeout(r, 500));
      result = await acquirer.acquire(req);
    }
    expect(result).toMatchObject({ status: 'ready', study: { instanceCount: 24 } });
    const zip = await readZip((result as { study: { packagePath: string } }).study.packagePath);
    expect([...zip.keys()].filter((n) => n.endsWith('.dcm'))).toHaveLength(24);
    for (const inst of study)
      expect(sha256(zip.get(`DICOM/${inst.seriesInstanceUid}/${inst.sopInstanceUid}.dcm`)!)).toBe(
        sha256(inst.bytes),
      );
  });

  it('an instance received after the study was packaged, then released with it: the release says it was never in the package', async () => {
    // The lifecycle uploads the package it was given and releases the order's instances;
    // one that came in between (a late series) was deleted with them, and the timeline said
    // only "deleted": nobody learnt the upstream analysed the study without it.
    const study = createMrBrainStudy({
      study: { accessionNumber: 'LATE-PKG-1' },
      series: [{ slices: 2 }, { slices: 1 }],
    });
    const [late, ...first] = [...study].reverse();
    const orderId = await insertOrder(adapter.dataSource, { accessionNumber: 'LATE-PKG-1' });
    expect(await stow(first)).toBe(200);
    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    const req = { orderId, accessionNumber: 'LATE-PKG-1' };
    let result = await acquirer.acquire(req);
    for (let i = 0; i < 10 && result.status === 'waiting'; i++) {
      await new Promise((r) => setTimeout(r, 500));
      result = await acquirer.acquire(req);
    }
    expect(result).toMatchObject({ status: 'ready', study: { instanceCount: 2 } });
    expect(await stow([late!])).toBe(200); // matched to the order, after its package
    await acquirer.release(orderId);
    const [released] = (await adapter.dataSource.query(
      `SELECT severity, summary, detail FROM audit_events WHERE order_id = $1 AND kind = 'study.released'`,
      [orderId],
    )) as Array<{ severity: string; summary: string; detail: Record<string, unknown> }>;
    expect(released).toMatchObject({
      severity: 'warning',
      detail: { instances: 3, notInPackage: 1 },
    });
    expect(released!.summary).toMatch(/1 instance\(s\) received after the study was packaged/);
  });
});
