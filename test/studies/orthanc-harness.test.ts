import { createMrBrainStudy } from '../helpers/dicom-factory';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';

describe('Orthanc test PACS (real Orthanc with DICOMweb)', () => {
  let orthanc: RunningOrthanc;
  beforeAll(async () => {
    orthanc = await startOrthanc();
  });
  afterAll(async () => {
    await orthanc?.stop();
  });

  it('stores a generated MR study and finds it over QIDO-RS', async () => {
    const instances = createMrBrainStudy({
      series: [{ seriesDescription: 'T1 MPRAGE SAG 1mm', slices: 3, rows: 32, columns: 32 }],
    });
    for (const instance of instances) await orthanc.store(instance.bytes);
    const studyUid = instances[0]!.studyInstanceUid;
    const res = await fetch(`${orthanc.dicomWebUrl}/studies?StudyInstanceUID=${studyUid}`, {
      headers: { accept: 'application/dicom+json' },
    });
    expect(res.status).toBe(200);
    const found = (await res.json()) as Array<Record<string, { Value?: unknown[] }>>;
    expect(found).toHaveLength(1);
    expect(found[0]!['00201208']?.Value?.[0]).toBe(3); // NumberOfStudyRelatedInstances
  });
});
