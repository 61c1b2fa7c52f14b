import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { promisify } from 'node:util';
import { freePort } from '../../src/persistence/embedded-postgres';
import { StudyStoragePaths } from '../../src/studies/study-storage.paths';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { createMrBrainStudy, shortPixelData } from '../helpers/dicom-factory';
import { insertOrder, stowToAdapter } from '../studies/study-test-support';

jest.setTimeout(180_000);
const run = promisify(execFile);

interface RefusedEntry {
  failureReason: number;
  reason: string;
  sopInstanceUid?: string;
  sizeBytes?: number;
  sha256?: string;
  notKept?: string;
}
type DicomJson = Record<string, { Value: Array<Record<string, { Value: unknown[] }>> }>;

/**
 * Pushed instances that match no order are held, each a file and a row, for
 * STUDY_UNMATCHED_HOLD_MINUTES. One sender token (or calling AE) pushing 10,000 tiny valid
 * instances a request, again and again, held them all: nothing bounded the file slots and rows.
 * Now at most STUDY_MAX_HELD_UNMATCHED_PER_SENDER per sender and _TOTAL in all are held; past
 * either, a new unmatched instance is refused A700, and an instance that matches an order, or
 * that replaces a held one, is always taken.
 */
describe('hostile: unmatched instances held at once', () => {
  let adapter: TestAdapter;
  let port: number;
  let dir: string;
  let paths: StudyStoragePaths;
  const AE = 'ADAPTER-HELD';
  const PER_SENDER = 4;
  const TOTAL = 7;

  beforeAll(async () => {
    port = await freePort();
    adapter = await startTestAdapter({
      DICOM_SCP_PORT: String(port),
      DICOM_SCP_AE_TITLE: AE,
      STUDY_MAX_HELD_UNMATCHED_PER_SENDER: String(PER_SENDER),
      STUDY_MAX_HELD_UNMATCHED_TOTAL: String(TOTAL),
      JOBS_ENABLED: 'false',
    });
    dir = mkdtempSync(join(tmpdir(), 'held-unmatched-'));
    paths = new StudyStoragePaths(adapter.dataDir);
  });
  afterAll(async () => {
    await adapter?.close();
    if (adapter) rmSync(adapter.dataDir, { recursive: true, force: true });
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const held = async (): Promise<Record<string, number>> => {
    const rows = (await adapter.dataSource.query(
      `SELECT sender, count(*)::int AS n FROM study_instances
        WHERE order_id IS NULL AND hold_until > now() GROUP BY sender`,
    )) as Array<{ sender: string; n: number }>;
    // The STOW-RS token's actor is `sender#<token hash>`.
    return Object.fromEntries(
      rows.map((r) => [r.sender.startsWith('sender#') ? 'sender' : r.sender, r.n]),
    );
  };
  const instanceFiles = () => {
    const root = join(paths.instanceFile('x', 'y', 'z'), '..', '..');
    try {
      return readdirSync(root, { recursive: true }).length;
    } catch {
      return 0;
    }
  };
  const lastReceived = async (source: string): Promise<RefusedEntry[]> => {
    const [row] = (await adapter.dataSource.query(
      `SELECT detail FROM audit_events WHERE kind = 'study.received' AND detail->>'source' = $1
        ORDER BY id DESC LIMIT 1`,
      [source],
    )) as Array<{ detail: { refused: RefusedEntry[] } }>;
    return row!.detail.refused;
  };
  const failed = (json: unknown) =>
    ((json as DicomJson)['00081198']?.Value ?? []).map((f) => ({
      sop: f['00081155']!.Value[0],
      reason: f['00081197']!.Value[0],
    }));

  it('a STOW-RS sender holds STUDY_MAX_HELD_UNMATCHED_PER_SENDER; the rest are refused A700 (202, then 409) and audited', async () => {
    const study = createMrBrainStudy({ series: [{ slices: 6 }] });
    const filesBefore = instanceFiles();
    const res = await stowToAdapter(adapter.httpUrl, study);
    expect(res.status).toBe(202);
    const refusedSops = failed(res.json);
    expect(refusedSops).toHaveLength(2);
    for (const f of refusedSops) expect(f.reason).toBe(0xa700);
    expect(await held()).toEqual({ sender: PER_SENDER });
    // Each held one is a file (and its study's directory); the refused ones left none.
    expect(instanceFiles() - filesBefore).toBe(PER_SENDER + 1);
    const audit = await lastReceived('stow');
    expect(audit).toHaveLength(2);
    for (const r of audit) {
      expect(r.failureReason).toBe(0xa700);
      expect(r.reason).toMatch(
        /^held unmatched instances at the limit: 4 from this sender \(STUDY_MAX_HELD_UNMATCHED_PER_SENDER\)/,
      );
      expect(r.sha256).toMatch(/^[0-9a-f]{64}$/);
    }
    expect(audit.map((r) => r.sopInstanceUid).sort()).toEqual(refusedSops.map((f) => f.sop).sort());

    // All new and unmatched: 409, every one A700.
    const again = await stowToAdapter(
      adapter.httpUrl,
      createMrBrainStudy({ series: [{ slices: 2 }] }),
    );
    expect(again.status).toBe(409);
    expect(failed(again.json).map((f) => f.reason)).toEqual([0xa700, 0xa700]);
    expect(await held()).toEqual({ sender: PER_SENDER });
  });

  it('at the limit, instances that match an order, and resends of held ones, are still taken', async () => {
    const ordered = createMrBrainStudy({ series: [{ slices: 3 }] });
    const orderId = await insertOrder(adapter.dataSource, {
      studyInstanceUid: ordered[0]!.studyInstanceUid,
    });
    const res = await stowToAdapter(adapter.httpUrl, ordered);
    expect(res.status).toBe(200);
    const matched = (await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM study_instances WHERE order_id = $1`,
      [orderId],
    )) as Array<{ n: number }>;
    expect(matched[0]!.n).toBe(3);

    // A resend of a held instance replaces its row: it adds nothing, and is taken.
    const [row] = (await adapter.dataSource.query(
      `SELECT file_path FROM study_instances WHERE order_id IS NULL LIMIT 1`,
    )) as Array<{ file_path: string }>;
    const resend = await stowToAdapter(adapter.httpUrl, [readFileSync(row!.file_path)]);
    expect(resend.status).toBe(200);
    expect(await held()).toEqual({ sender: PER_SENDER });
  });

  it('a C-STORE calling AE counts apart; the total STUDY_MAX_HELD_UNMATCHED_TOTAL answers A700', async () => {
    const study = createMrBrainStudy({ series: [{ slices: 5 }] });
    const files = study.map((inst, i) => {
      const file = join(dir, `cstore-${i}.dcm`);
      writeFileSync(file, inst.bytes);
      return file;
    });
    const result = await run('storescu', [
      '-v',
      '--no-halt',
      '-aet',
      'MODALITY-A',
      '-aec',
      AE,
      '127.0.0.1',
      String(port),
      ...files,
    ]).catch((e: { stdout: string; stderr: string }) => e);
    const log = `${result.stdout}${result.stderr}`;
    // 4 held for the STOW-RS sender, 3 more places in all: the 4th and 5th are refused.
    expect(log.match(/Received Store Response \(Success\)/g)).toHaveLength(3);
    expect(log.match(/Received Store Response \(Refused: OutOfResources/g)).toHaveLength(2);
    expect(await held()).toEqual({ sender: PER_SENDER, 'dicom:MODALITY-A': TOTAL - PER_SENDER });
    // The association's two refusals are one audit entry, written before its release was answered.
    const audit = await lastReceived('c-store');
    expect(audit).toHaveLength(2);
    const withRefusals = (await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM audit_events WHERE kind = 'study.received'
        AND detail->>'source' = 'c-store' AND jsonb_array_length(detail->'refused') > 0`,
    )) as Array<{ n: number }>;
    expect(withRefusals[0]!.n).toBe(1);
    expect(audit[0]!.reason).toMatch(
      /^held unmatched instances at the limit: 7 from all senders \(STUDY_MAX_HELD_UNMATCHED_TOTAL\)/,
    );
  });

  it('refused data sets of an association that aborts are audited as one entry when it closes', async () => {
    const files = createMrBrainStudy({ series: [{ slices: 3 }] }).map((inst, i) => {
      const file = join(dir, `short-${i}.dcm`);
      writeFileSync(file, shortPixelData(inst.bytes, 100 + i));
      return file;
    });
    const before = (await adapter.dataSource.query(
      `SELECT coalesce(max(id), 0)::bigint AS id FROM audit_events`,
    )) as Array<{ id: string }>;
    // The SCP closes the connection on storescu's A-ABORT (-ta 2 bounds the wait should it
    // not); the entry is written when the connection closes.
    await run('storescu', [
      '--no-halt',
      '--abort',
      '-ta',
      '2',
      '-aet',
      'MODALITY-B',
      '-aec',
      AE,
      '127.0.0.1',
      String(port),
      ...files,
    ]).catch(() => undefined);
    let rows: Array<{ detail: { refused: RefusedEntry[] } }> = [];
    for (let i = 0; i < 50 && rows.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 100));
      rows = (await adapter.dataSource.query(
        `SELECT detail FROM audit_events WHERE kind = 'study.received' AND id > $1
            AND actor = 'dicom:MODALITY-B'`,
        [before[0]!.id],
      )) as typeof rows;
    }
    expect(rows).toHaveLength(1);
    expect(rows[0]!.detail.refused.map((r) => r.reason)).toEqual([
      expect.stringMatching(/^pixel data incomplete/),
      expect.stringMatching(/^pixel data incomplete/),
      expect.stringMatching(/^pixel data incomplete/),
    ]);
  });

  it('a hold that is over frees its place, before the sweep deletes it', async () => {
    await adapter.dataSource.query(
      `UPDATE study_instances SET hold_until = now() - interval '1 minute'
        WHERE order_id IS NULL AND sender LIKE 'sender#%'`,
    );
    const res = await stowToAdapter(
      adapter.httpUrl,
      createMrBrainStudy({ series: [{ slices: 2 }] }),
    );
    expect(res.status).toBe(200);
  });
});
