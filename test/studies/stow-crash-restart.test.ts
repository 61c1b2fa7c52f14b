import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
  copyFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { freePort } from '../../src/persistence/embedded-postgres';
import { STUDY_ACQUIRER, type StudyAcquirer } from '../../src/domain/study-acquirer.port';
import { spawnAdapter, waitHealthy } from '../helpers/adapter-process';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { createMrBrainStudy } from '../helpers/dicom-factory';
import { insertOrder, multipartRelated } from './study-test-support';

/**
 * STOW-RS receipt killed (kill -9) between a file moved into place and the commit of its row:
 * the adapter as a real process, its database write held by a real trigger while it dies.
 */
describe('STOW-RS receipt survives kill -9 between filing and commit', () => {
  let db: TestDatabase;
  let dataDir: string;
  let restarted: TestAdapter | undefined;

  beforeAll(async () => {
    db = await createTestDatabase();
    dataDir = mkdtempSync(join(tmpdir(), 'stow-crash-'));
  });
  afterAll(async () => {
    await restarted?.close();
    await db?.drop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const stow = async (url: string, bytes: Buffer) => {
    const part = multipartRelated([{ data: bytes }]);
    const res = await request(`${url}/dicomweb/studies`, {
      method: 'POST',
      headers: {
        'content-type': part.contentType,
        accept: 'application/dicom+json',
        authorization: `Bearer ${TEST_TOKENS.sender}`,
      },
      body: part.body,
    });
    await res.body.text();
    return res.statusCode;
  };

  const rowOf = async (sop: string) =>
    (
      (await db.dataSource.query(
        `SELECT file_path, accession_number FROM study_instances WHERE sop_instance_uid = $1`,
        [sop],
      )) as Array<{ file_path: string; accession_number: string }>
    )[0];

  const filesOf = (study: string) => {
    const dir = join(dataDir, 'studies', 'instances', study);
    return existsSync(dir) ? readdirSync(dir).map((n) => join(dir, n)) : [];
  };

  it('leaves the stored copy whole, sweeps the uncommitted file, and takes the resend', async () => {
    const httpPort = await freePort();
    const env = {
      DATABASE_URL: db.url,
      HTTP_PORT: String(httpPort),
      HTTP_HOST: '127.0.0.1',
      MLLP_PORT: String(await freePort()),
      MLLP_HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      JOBS_ENABLED: 'false',
      STUDY_UNMATCHED_HOLD_MINUTES: '600',
      API_TOKENS: Object.entries(TEST_TOKENS)
        .map(([role, token]) => `${role}:${token}`)
        .join(','),
    };
    const url = `http://127.0.0.1:${httpPort}`;
    const proc = spawnAdapter(env);
    await waitHealthy(url, 60_000, proc);
    // The database takes its time with one accession: the process dies inside that write.
    await db.dataSource.query(`
      CREATE FUNCTION slow_instance() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(5); RETURN NEW; END $$;
      CREATE TRIGGER slow_instance BEFORE INSERT OR UPDATE ON study_instances
        FOR EACH ROW WHEN (NEW.accession_number = 'ACC-CRASH-SLOW')
        EXECUTE FUNCTION slow_instance();`);

    // Stored before the crash: one instance; then its corrected resend and a new instance
    // are in flight when the process is killed.
    const [kept, fresh] = createMrBrainStudy({
      study: { accessionNumber: 'ACC-CRASH-0001' },
      series: [{ slices: 2 }],
    });
    const study = kept!.studyInstanceUid;
    expect(await stow(url, kept!.bytes)).toBe(200);
    const keptRow = await rowOf(kept!.sopInstanceUid);
    const corrected = Buffer.from(kept!.bytes);
    corrected.write('ACC-CRASH-SLOW', corrected.indexOf('ACC-CRASH-0001'), 'latin1');
    const freshSlow = Buffer.from(fresh!.bytes);
    freshSlow.write('ACC-CRASH-SLOW', freshSlow.indexOf('ACC-CRASH-0001'), 'latin1');
    const inFlight = [stow(url, corrected), stow(url, freshSlow)].map((p) =>
      p.catch(() => 'no answer'),
    );
    // killed once both copies are on disk (the earlier copy and two new files)
    const deadline = Date.now() + 10_000;
    while (filesOf(study).length < 3 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    proc.child.kill('SIGKILL');
    await proc.exited;
    expect(await Promise.all(inFlight)).toEqual(['no answer', 'no answer']);
    await db.dataSource.query(
      `DROP TRIGGER slow_instance ON study_instances; DROP FUNCTION slow_instance();`,
    );

    // What the row names is the copy it describes, whatever the crash left.
    const afterCrash = await rowOf(kept!.sopInstanceUid);
    expect(afterCrash!.accession_number).toBe('ACC-CRASH-0001');
    expect(readFileSync(afterCrash!.file_path).equals(kept!.bytes)).toBe(true);
    expect(await rowOf(fresh!.sopInstanceUid)).toBeUndefined();

    // An hour later, the restarted adapter's sweep removes every file no row names.
    const anHourAgo = new Date(Date.now() - 61 * 60_000);
    for (const f of filesOf(study)) utimesSync(f, anHourAgo, anHourAgo);
    restarted = await startTestAdapter({
      DATABASE_URL: db.url,
      DATA_DIR: dataDir,
      JOBS_ENABLED: 'false',
      STUDY_UNMATCHED_HOLD_MINUTES: '600',
    });
    await restarted.app
      .get<StudyAcquirer & { expireUnmatched(): Promise<number> }>(STUDY_ACQUIRER)
      .expireUnmatched();
    expect(filesOf(study)).toEqual([keptRow!.file_path]);

    // The sender had no answer: its resends are stored, each row over its own bytes.
    expect(await stow(restarted.httpUrl, corrected)).toBe(200);
    expect(await stow(restarted.httpUrl, freshSlow)).toBe(200);
    for (const [sop, bytes] of [
      [kept!.sopInstanceUid, corrected],
      [fresh!.sopInstanceUid, freshSlow],
    ] as const) {
      const row = await rowOf(sop);
      expect(row!.accession_number).toBe('ACC-CRASH-SLOW');
      expect(readFileSync(row!.file_path).equals(bytes)).toBe(true);
    }
    expect(filesOf(study)).toHaveLength(2);
  }, 120_000);

  it('keeps the files rows name by another path to DATA_DIR (the volume mounted elsewhere)', async () => {
    // One shared volume, reached by two paths (another mount point, a symlink): the rows
    // name the files by the path of the replica that stored them.
    const volume = mkdtempSync(join(tmpdir(), 'stow-volume-'));
    const real = join(volume, 'data');
    mkdirSync(real);
    const other = join(volume, 'mounted-here');
    symlinkSync(real, other);
    const opened: TestAdapter[] = [];
    try {
      const first = await startTestAdapter({
        DATABASE_URL: db.url,
        DATA_DIR: other,
        JOBS_ENABLED: 'false',
        STUDY_UNMATCHED_HOLD_MINUTES: '600',
      });
      opened.push(first);
      const [inst] = createMrBrainStudy({
        study: { accessionNumber: 'ACC-MOUNT-0001' },
        series: [{ slices: 1 }],
      });
      expect(await stow(first.httpUrl, inst!.bytes)).toBe(200);
      const dir = join(real, 'studies', 'instances', inst!.studyInstanceUid);
      const anHourAgo = new Date(Date.now() - 61 * 60_000);
      for (const f of readdirSync(dir)) utimesSync(join(dir, f), anHourAgo, anHourAgo);
      const second = await startTestAdapter({
        DATABASE_URL: db.url,
        DATA_DIR: real,
        JOBS_ENABLED: 'false',
        STUDY_UNMATCHED_HOLD_MINUTES: '600',
      });
      opened.push(second);
      await second.app
        .get<StudyAcquirer & { expireUnmatched(): Promise<number> }>(STUDY_ACQUIRER)
        .expireUnmatched();
      const row = await rowOf(inst!.sopInstanceUid);
      expect(readFileSync(row!.file_path).equals(inst!.bytes)).toBe(true);
    } finally {
      // each drops the spare database it made, not this file's
      for (const a of opened) await a.close();
      rmSync(volume, { recursive: true, force: true });
    }
  }, 60_000);

  it('sweeps the package and pulled files a release cut short left, and keeps those of live orders', async () => {
    // release() commits, then removes the files: a process killed in between left the ZIP
    // (the whole study, PHI) and the pulled instances for ever.
    const adapter = await startTestAdapter({
      JOBS_ENABLED: 'false',
      STUDY_QUIET_PERIOD_SECONDS: '1',
      STUDY_UNMATCHED_HOLD_MINUTES: '600',
    });
    try {
      const acquirer = adapter.app.get<StudyAcquirer & { expireUnmatched(): Promise<number> }>(
        STUDY_ACQUIRER,
      );
      const packaged: Array<{ orderId: string; zip: string }> = [];
      for (const accession of ['ACC-REL-0001', 'ACC-REL-0002']) {
        const study = createMrBrainStudy({
          study: { accessionNumber: accession },
          series: [{ slices: 1 }],
        });
        expect(await stow(adapter.httpUrl, study[0]!.bytes)).toBe(200);
        const orderId = await insertOrder(adapter.dataSource, { accessionNumber: accession });
        await acquirer.acquire({ orderId, accessionNumber: accession });
        await new Promise((r) => setTimeout(r, 1100));
        const ready = await acquirer.acquire({ orderId, accessionNumber: accession });
        if (ready.status !== 'ready') throw new Error(`expected ready: ${JSON.stringify(ready)}`);
        packaged.push({ orderId, zip: ready.study.packagePath });
      }
      const [released, live] = packaged;
      // the first order's release, cut short after its commit: its files are still there
      copyFileSync(released!.zip, `${released!.zip}.kept`);
      await acquirer.release(released!.orderId);
      copyFileSync(`${released!.zip}.kept`, released!.zip);
      rmSync(`${released!.zip}.kept`);
      const pulled = join(adapter.dataDir, 'studies', 'pulled', released!.orderId);
      mkdirSync(pulled, { recursive: true });
      writeFileSync(join(pulled, 'instance-1.dcm'), 'retrieved before the crash');
      const anHourAgo = new Date(Date.now() - 61 * 60_000);
      for (const f of [released!.zip, live!.zip, pulled, join(pulled, 'instance-1.dcm')])
        utimesSync(f, anHourAgo, anHourAgo);

      await acquirer.expireUnmatched();
      expect(existsSync(released!.zip)).toBe(false);
      expect(existsSync(pulled)).toBe(false);
      expect(existsSync(live!.zip)).toBe(true);
    } finally {
      await adapter.close();
      rmSync(adapter.dataDir, { recursive: true, force: true });
    }
  }, 60_000);
});
