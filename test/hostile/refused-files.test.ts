import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { promisify } from 'node:util';
import { freePort } from '../../src/persistence/embedded-postgres';
import { StudyStoragePaths } from '../../src/studies/study-storage.paths';
import type { StowService } from '../../src/studies/stow.service';
import { STOW_SERVICE } from '../../src/studies/studies.tokens';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { createMrBrainStudy, shortPixelData } from '../helpers/dicom-factory';
import { sha256, stowToAdapter } from '../studies/study-test-support';

jest.setTimeout(180_000);
const run = promisify(execFile);

interface RefusedEntry {
  reason: string;
  keptAs?: string;
  sizeBytes?: number;
  sha256?: string;
  notKept?: string;
  sopInstanceUid?: string;
}

/**
 * Refused instances are kept byte for byte for the audit log: each was a file for 24 h, and
 * six 0.8 MB STOW-RS requests of tiny refused parts left 60,002 of them (inodes, which the
 * DATA_DIR_MIN_FREE_BYTES check does not count). What one request or association, and all of
 * them together, may leave under refused/ is bounded; the rest are audited without their bytes.
 */
describe('hostile: refused instances kept on disk', () => {
  let adapter: TestAdapter;
  let port: number;
  let dir: string;
  let paths: StudyStoragePaths;
  const AE = 'ADAPTER-REFUSED';
  const PER_REQUEST = 3;
  const TOTAL = 8;

  beforeAll(async () => {
    port = await freePort();
    adapter = await startTestAdapter({
      DICOM_SCP_PORT: String(port),
      DICOM_SCP_AE_TITLE: AE,
      STUDY_UNMATCHED_HOLD_MINUTES: '60',
      STOW_MAX_KEPT_REFUSED: String(PER_REQUEST),
      STOW_MAX_KEPT_REFUSED_TOTAL: String(TOTAL),
      JOBS_ENABLED: 'false',
    });
    dir = mkdtempSync(join(tmpdir(), 'refused-files-'));
    paths = new StudyStoragePaths(adapter.dataDir);
  });
  afterAll(async () => {
    await adapter?.close();
    if (adapter) rmSync(adapter.dataDir, { recursive: true, force: true });
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const refusedFiles = () => {
    try {
      return readdirSync(paths.refusedDir).length;
    } catch {
      return 0;
    }
  };
  const lastReceived = async (): Promise<RefusedEntry[]> => {
    const [row] = (await adapter.dataSource.query(
      `SELECT detail FROM audit_events WHERE kind = 'study.received' ORDER BY id DESC LIMIT 1`,
    )) as Array<{ detail: { refused: RefusedEntry[] } }>;
    return row!.detail.refused;
  };
  /** A request of `n` distinct tiny parts that are no DICOM, and one valid instance. */
  const floodRequest = (n: number, tag: string) => {
    const [valid] = createMrBrainStudy({ series: [{ slices: 1 }] });
    const parts = Array.from({ length: n }, (_, i) => Buffer.from(`${tag}-${i}`));
    return { valid: valid!, parts, send: () => stowToAdapter(adapter.httpUrl, [...parts, valid!]) };
  };

  it('one C-STORE association keeps STOW_MAX_KEPT_REFUSED refused data sets; the others are audited by size and hash', async () => {
    const files: string[] = [];
    const sent: Buffer[] = [];
    for (let i = 0; i < 5; i++) {
      const [inst] = createMrBrainStudy({ series: [{ slices: 1 }] });
      const file = join(dir, `short-${i}.dcm`);
      const bytes = shortPixelData(inst!.bytes, 100 + i);
      writeFileSync(file, bytes);
      files.push(file);
      sent.push(bytes);
    }
    const before = refusedFiles();
    // One association, five refused stores: each still gets its own failure status.
    const result = await run('storescu', [
      '-v',
      '--no-halt',
      '-aec',
      AE,
      '127.0.0.1',
      String(port),
      ...files,
    ]).catch((e: { stdout: string; stderr: string }) => e);
    const log = `${result.stdout}${result.stderr}`;
    expect(
      log.match(/Received Store Response \(Error: DataSetDoesNotMatchSOPClass\)/g),
    ).toHaveLength(5);
    expect(refusedFiles() - before).toBe(PER_REQUEST);
    const events = (await adapter.dataSource.query(
      `SELECT detail FROM audit_events WHERE kind = 'study.received' AND detail->>'source' = 'c-store' ORDER BY id`,
    )) as Array<{ detail: { refused: RefusedEntry[] } }>;
    // One audit entry for the association's refusals (each store was an entry of its own).
    expect(events).toHaveLength(1);
    const refused = events.flatMap((e) => e.detail.refused);
    expect(refused).toHaveLength(5);
    expect(refused.filter((r) => r.keptAs)).toHaveLength(PER_REQUEST);
    for (const r of refused) {
      expect(r.reason).toMatch(/^pixel data incomplete/);
      expect(r.sha256).toMatch(/^[0-9a-f]{64}$/);
      expect(r.sizeBytes).toBeGreaterThan(0);
      if (r.keptAs) {
        const kept = readFileSync(paths.refusedFile(r.keptAs));
        expect(sha256(kept)).toBe(r.sha256);
        expect(kept.length).toBe(r.sizeBytes);
      } else {
        expect(r.notKept).toMatch(/STOW_MAX_KEPT_REFUSED\)/);
      }
    }

    // A second association has a tally of its own.
    await run('storescu', ['-aec', AE, '127.0.0.1', String(port), files[0]!]).catch(
      () => undefined,
    );
    expect(refusedFiles() - before).toBe(PER_REQUEST + 1);
  });

  it('a STOW-RS request of thousands of tiny refused parts leaves STOW_MAX_KEPT_REFUSED files; all are answered and audited', async () => {
    const before = refusedFiles();
    const { parts, valid, send } = floodRequest(2000, 'a');
    const res = await send();
    expect(res.status).toBe(202);
    // Every part still has its own failure in the answer and its own audit entry.
    const failed = (res.json as Record<string, { Value: unknown[] }>)['00081198']!.Value;
    expect(failed).toHaveLength(2000);
    const refused = await lastReceived();
    expect(refused).toHaveLength(2000);
    // Files before/after: before, 2000 more; now the per-request limit, and only while the
    // total has room (4 of 8 were kept by the C-STORE test).
    const kept = refused.filter((r) => r.keptAs);
    expect(kept).toHaveLength(PER_REQUEST);
    expect(refusedFiles() - before).toBe(PER_REQUEST);
    refused.forEach((r, i) => {
      expect(r.reason).toMatch(/^not a DICOM Part 10 file/);
      expect(r.sizeBytes).toBe(parts[i]!.length);
      expect(r.sha256).toBe(sha256(parts[i]!));
      if (r.keptAs) expect(readFileSync(paths.refusedFile(r.keptAs)).equals(parts[i]!)).toBe(true);
      else expect(r.notKept).toMatch(/more than 3 refused in one request.*STOW_MAX_KEPT_REFUSED\)/);
    });
    const stored = (await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM study_instances WHERE sop_instance_uid = $1`,
      [valid.sopInstanceUid],
    )) as Array<{ n: number }>;
    expect(stored[0]!.n).toBe(1);
    expect(readdirSync(paths.incomingDir)).toEqual([]);
  });

  it('many requests together leave no more than STOW_MAX_KEPT_REFUSED_TOTAL files; expiry frees room again', async () => {
    // Six requests at once, as an attacker with one sender token would send them.
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, k) => floodRequest(500, `b${k}`).send()),
    );
    for (const a of answers) expect(a.status).toBe(202);
    expect(refusedFiles()).toBe(TOTAL);
    const refused = await lastReceived();
    expect(refused.every((r) => r.sha256 && r.sizeBytes !== undefined)).toBe(true);
    expect(
      refused.some((r) =>
        /8 refused files already kept \(STOW_MAX_KEPT_REFUSED_TOTAL\)/.test(r.notKept ?? ''),
      ),
    ).toBe(true);

    // Once the hold is over, the sweep deletes them and refused parts are kept again.
    const old = new Date(Date.now() - 2 * 60 * 60_000);
    for (const name of readdirSync(paths.refusedDir))
      utimesSync(join(paths.refusedDir, name), old, old);
    const stow = adapter.app.get<StowService>(STOW_SERVICE);
    expect(await stow.expireRefused()).toBe(TOTAL);
    expect(refusedFiles()).toBe(0);
    expect((await floodRequest(10, 'c').send()).status).toBe(202);
    expect(refusedFiles()).toBe(PER_REQUEST);
  });
});
