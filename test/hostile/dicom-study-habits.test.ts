import { STUDY_ACQUIRER, type StudyAcquirer } from '../../src/domain/study-acquirer.port';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { createMrBrainSeries, generateUid } from '../helpers/dicom-factory';
import { stowToAdapter } from '../studies/study-test-support';

jest.setTimeout(120_000);

describe('hostile: pushed studies as real sites send them', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false', STUDY_QUIET_PERIOD_SECONDS: '1' });
  });
  afterAll(async () => adapter?.close());

  const insertOrder = async (accession: string, patientId: string, studyUid: string | null) =>
    (
      (await adapter.dataSource.query(
        `INSERT INTO orders (source, state, request, accession_number, patient_id, study_instance_uid)
         VALUES ('api', 'placed', '{}'::jsonb, $1, $2, $3) RETURNING id`,
        [accession, patientId, studyUid],
      )) as Array<{ id: string }>
    )[0]!.id;

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
