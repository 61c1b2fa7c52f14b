import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../src/persistence/embedded-postgres';
import { request } from 'undici';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { createMrBrainStudy } from '../helpers/dicom-factory';
import { insertOrder, multipartRelated } from './study-test-support';
import { STUDY_ACQUIRER, type StudyAcquirer } from '../../src/domain/study-acquirer.port';

jest.setTimeout(120_000);

/**
 * Instances pushed by STOW-RS whose Accession Number (0008,0050) is written decomposed (NFD,
 * `U` + U+0308) under Specific Character Set ISO_IR 192, for an order whose accession came
 * composed (NFC, as the intake holds every identifier: src/domain/identifier-form.ts). The same
 * accession: the instances are the order's, whether they arrive after the order (matched on
 * receipt) or before it (held, then claimed). The files keep their bytes.
 */
describe('STOW-RS and C-STORE: an NFD Accession Number matches the NFC order', () => {
  let adapter: TestAdapter;
  let port: number;
  const AE = 'ADAPTER-NFC';
  beforeAll(async () => {
    port = await freePort();
    adapter = await startTestAdapter({
      DICOM_SCP_PORT: String(port),
      DICOM_SCP_AE_TITLE: AE,
      STUDY_QUIET_PERIOD_SECONDS: '1',
      STUDY_UNMATCHED_HOLD_MINUTES: '60',
      JOBS_ENABLED: 'false',
    });
  });
  afterAll(async () => {
    await adapter?.close();
    if (adapter) rmSync(adapter.dataDir, { recursive: true, force: true });
  });

  const stow = async (instances: Array<{ bytes: Buffer }>) => {
    const { body, contentType } = multipartRelated(instances.map((i) => ({ data: i.bytes })));
    const res = await request(`${adapter.httpUrl}/dicomweb/studies`, {
      method: 'POST',
      headers: {
        'content-type': contentType,
        accept: 'application/dicom+json',
        authorization: `Bearer ${TEST_TOKENS.sender}`,
      },
      body,
    });
    await res.body.text();
    return res.statusCode;
  };
  const rowsOf = async (studyInstanceUid: string) =>
    (await adapter.dataSource.query(
      `SELECT order_id, accession_number FROM study_instances WHERE study_instance_uid = $1`,
      [studyInstanceUid],
    )) as Array<{ order_id: string | null; accession_number: string }>;

  it('instances after the order: matched to it by accession on receipt', async () => {
    const accession = 'MÜNCHEN-ÄÖ-1';
    const orderId = await insertOrder(adapter.dataSource, {
      accessionNumber: accession.normalize('NFC'),
    });
    const study = createMrBrainStudy({
      study: { accessionNumber: accession.normalize('NFD') },
      series: [{ slices: 2 }],
    });
    expect(study[0]!.bytes.includes(Buffer.from('ISO_IR 192'))).toBe(true);
    expect(study[0]!.bytes.includes(Buffer.from(accession.normalize('NFD'), 'utf8'))).toBe(true);
    expect(await stow(study)).toBe(200);
    // Before: held unmatched (order_id null) as another accession, the order waited until it expired.
    expect(await rowsOf(study[0]!.studyInstanceUid)).toEqual(
      Array(2).fill({ order_id: orderId, accession_number: accession.normalize('NFC') }),
    );
  });

  it('instances before the order: held, then claimed by its acquire and packaged', async () => {
    const accession = 'MÜNCHEN-ÄÖ-2';
    const study = createMrBrainStudy({
      study: { accessionNumber: accession.normalize('NFD') },
      series: [{ slices: 2 }],
    });
    expect(await stow(study)).toBe(200);
    const orderId = await insertOrder(adapter.dataSource, {
      accessionNumber: accession.normalize('NFC'),
    });
    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    const ask = () => acquirer.acquire({ orderId, accessionNumber: accession.normalize('NFC') });
    expect(await ask()).toMatchObject({ status: 'waiting' });
    expect((await rowsOf(study[0]!.studyInstanceUid)).map((r) => r.order_id)).toEqual([
      orderId,
      orderId,
    ]);
    await new Promise((r) => setTimeout(r, 1100));
    expect(await ask()).toMatchObject({ status: 'ready', study: { instanceCount: 2 } });
  });

  it('instances sent by C-STORE (DCMTK storescu): matched to the order by accession on receipt', async () => {
    const accession = 'MÜNCHEN-ÄÖ-3';
    const orderId = await insertOrder(adapter.dataSource, {
      accessionNumber: accession.normalize('NFC'),
    });
    const study = createMrBrainStudy({
      study: { accessionNumber: accession.normalize('NFD') },
      series: [{ slices: 2 }],
    });
    const dir = mkdtempSync(join(tmpdir(), 'nfc-cstore-'));
    try {
      const files = study.map((inst, i) => {
        const file = join(dir, `i${i}.dcm`);
        writeFileSync(file, inst.bytes);
        return file;
      });
      await promisify(execFile)('storescu', ['-aec', AE, '127.0.0.1', String(port), ...files]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // Before: held unmatched, as another accession.
    expect(await rowsOf(study[0]!.studyInstanceUid)).toEqual(
      Array(2).fill({ order_id: orderId, accession_number: accession.normalize('NFC') }),
    );
  });
});
