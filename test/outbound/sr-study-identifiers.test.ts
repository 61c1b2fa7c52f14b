import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildEncapsulatedPdf, buildMeasurementSr } from '../../src/outbound/dicom-result.builder';
import { createMrBrainStudy } from '../helpers/dicom-factory';
import { dciodvfyErrors } from '../helpers/dicom-validators';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import { publicationInput, REPORT_PDF, sourceStudy } from './publication-fixtures';

/**
 * The SR and PDF carry their study's own identifiers, so the PACS files them with it. A study
 * without a Patient ID or accession (an emergency or unidentified patient: the identity check
 * compares the IDs only when both sides have one) got the order's in their place, and Orthanc,
 * which keys a study by Patient ID and Study Instance UID, filed the SR and PDF as another study.
 */
describe('SR and PDF: the study identifiers are those of the study', () => {
  let orthanc: RunningOrthanc;
  let dir: string;
  beforeAll(async () => {
    orthanc = await startOrthanc();
    dir = mkdtempSync(join(tmpdir(), 'sr-study-ids-'));
  }, 60_000);
  afterAll(async () => {
    await orthanc?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a study without Patient ID and accession: the SR and PDF are filed with it, the order in the Referenced Request Sequence only', async () => {
    const study = createMrBrainStudy({
      patient: { patientId: '', patientName: 'UNBEKANNT^NOTFALL', birthDate: '', sex: 'O' },
      study: { accessionNumber: '', studyDate: '20261121', studyTime: '072900', studyId: 'S1' },
      series: [{ slices: 1, rows: 16, columns: 16 }],
    });
    const image = await orthanc.store(study[0]!.bytes);
    const input = publicationInput('DELIVERED', {});
    const source = sourceStudy(1);
    source.attributes.studyInstanceUid = study[0]!.studyInstanceUid;
    delete source.attributes.patientId;
    delete source.attributes.accessionNumber;
    source.attributes.patientName = 'UNBEKANNT^NOTFALL';
    const now = new Date('2026-11-24T10:00:00Z');
    const sr = buildMeasurementSr(input, source, now);
    const pdf = buildEncapsulatedPdf(input, source, REPORT_PDF, now);
    for (const [name, bytes] of [
      ['sr.dcm', sr],
      ['pdf.dcm', pdf],
    ] as const) {
      const file = join(dir, name);
      writeFileSync(file, bytes);
      expect(dciodvfyErrors(file)).toEqual([]);
      const dump = execFileSync('dcmdump', ['+P', '0010,0020', '+P', '0008,0050', file], {
        encoding: 'utf8',
      });
      expect(dump).toMatch(/\(0010,0020\) LO \(no value available\)/);
      expect(dump).not.toContain('PID-12345');
      // the study's (empty) accession; the SR names the order's in its request only
      expect(dump).toMatch(/^\(0008,0050\) SH \(no value available\)/m);
      if (name === 'sr.dcm') expect(dump).toContain('SH [ACC-2026-0042]');
      else expect(dump).not.toContain('ACC-2026-0042');
      expect((await orthanc.store(bytes)).ParentStudy).toBe(image.ParentStudy);
    }
  });
});
