import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { promisify } from 'node:util';
import { freePort } from '../../src/persistence/embedded-postgres';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { createMrBrainStudy } from '../helpers/dicom-factory';

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
