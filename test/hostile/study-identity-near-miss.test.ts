import { STUDY_ACQUIRER, type StudyAcquirer } from '../../src/domain/study-acquirer.port';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { rawInstance } from '../helpers/raw-dicom';
import { stowToAdapter } from '../studies/study-test-support';

jest.setTimeout(120_000);

/**
 * A pushed study whose Accession Number differs from the order's only by characters that are
 * not DICOM padding (PS3.5 §6.2 pads SH/LO with SPACE only) is another accession: it is not
 * matched at receipt, and an order naming its Study Instance UID refuses it with a
 * `study.identity-mismatch` entry that says the values differ only by whitespace/control.
 * Before, every JavaScript whitespace (TAB, CR, LF, no-break space, ideographic space) was
 * trimmed away and the study was matched and packaged.
 */
describe('hostile: near-miss identifiers of a pushed study', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false', STUDY_QUIET_PERIOD_SECONDS: '1' });
  });
  afterAll(async () => adapter?.close());

  const push = async (bytes: Buffer) => (await stowToAdapter(adapter.httpUrl, [bytes])).status;

  async function insertOrder(accession: string, studyUid: string | null): Promise<string> {
    const rows = (await adapter.dataSource.query(
      `INSERT INTO orders (source, state, request, accession_number, study_instance_uid, patient_id)
       VALUES ('api', 'placed', '{}'::jsonb, $1, $2, 'P-NEAR') RETURNING id`,
      [accession, studyUid],
    )) as Array<{ id: string }>;
    return rows[0]!.id;
  }

  async function acquireUntilDone(req: Parameters<StudyAcquirer['acquire']>[0]) {
    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    let result = await acquirer.acquire(req);
    for (let i = 0; i < 20 && result.status === 'waiting'; i++) {
      await new Promise((r) => setTimeout(r, 300));
      result = await acquirer.acquire(req);
    }
    return result;
  }

  it.each([
    { name: 'a trailing TAB', charset: undefined, suffix: '\t' },
    { name: 'a trailing CR', charset: undefined, suffix: '\r' },
    { name: 'a trailing no-break space (Latin-1 A0)', charset: 'ISO_IR 100', suffix: '\xa0' },
    {
      name: 'a trailing ideographic space (UTF-8)',
      charset: 'ISO_IR 192',
      suffix: Buffer.from('\u3000', 'utf8').toString('latin1'),
    },
  ])('an accession with $name is not the order’s: not matched, refused, audited', async (c) => {
    const accession = `NEAR-${Math.random().toString(36).slice(2, 8).toUpperCase()}`;
    const inst = rawInstance({
      charset: c.charset,
      accession: accession + c.suffix,
      patientId: 'P-NEAR',
    });
    const orderId = await insertOrder(accession, null);
    expect(await push(inst.bytes)).toBe(200);
    const stored = (await adapter.dataSource.query(
      `SELECT order_id FROM study_instances WHERE sop_instance_uid = $1`,
      [inst.sopInstanceUid],
    )) as Array<{ order_id: string | null }>;
    expect(stored[0]?.order_id).toBeNull();

    // An order that names the study by its UID claims the instances and refuses them.
    await adapter.dataSource.query(`UPDATE orders SET study_instance_uid = $2 WHERE id = $1`, [
      orderId,
      inst.studyInstanceUid,
    ]);
    const result = await acquireUntilDone({
      orderId,
      studyInstanceUid: inst.studyInstanceUid,
      accessionNumber: accession,
      patientId: 'P-NEAR',
    });
    expect(result).toMatchObject({ status: 'failed', alert: 'study-identity-mismatch' });
    const events = (await adapter.dataSource.query(
      `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'study.identity-mismatch'`,
      [orderId],
    )) as Array<{ detail: { mismatches: Array<{ field: string; nearMiss?: string }> } }>;
    expect(events).toHaveLength(1);
    expect(events[0]!.detail.mismatches).toEqual([
      expect.objectContaining({ field: 'accession-number', nearMiss: 'whitespace-or-control' }),
    ]);
  });

  it('space padding around the accession is insignificant: matched at receipt and packaged', async () => {
    const accession = `PAD-${Math.random().toString(36).slice(2, 8).toUpperCase()}`;
    const inst = rawInstance({ accession: `  ${accession}  `, patientId: 'P-NEAR ' });
    const orderId = await insertOrder(accession, null);
    expect(await push(inst.bytes)).toBe(200);
    const stored = (await adapter.dataSource.query(
      `SELECT order_id FROM study_instances WHERE sop_instance_uid = $1`,
      [inst.sopInstanceUid],
    )) as Array<{ order_id: string | null }>;
    expect(stored[0]?.order_id).toBe(orderId);
    const result = await acquireUntilDone({
      orderId,
      accessionNumber: accession,
      patientId: 'P-NEAR',
    });
    expect(result.status).toBe('ready');
  });
});
