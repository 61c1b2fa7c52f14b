import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspectStudyObject } from '../../src/sandbox/study-intake';
import { writeStudyPackage } from '../../src/studies/study-package.writer';
import {
  createMrBrainStudy,
  generateUid,
  MR_IMAGE_STORAGE,
  writePart10,
} from '../helpers/dicom-factory';

/**
 * Our package against the upstream's intake rules as the sandbox implements them
 * (docs/upstream-assumptions.md: ZIP safety, study validation, sidecar metadata): what the
 * lifecycle uploads must be accepted as one DICOM study, sidecar included.
 */
describe('study package accepted by the upstream intake (sandbox)', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'studies-intake-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('is read as one DICOM study with its instances, series and sidecar metadata', async () => {
    const study = createMrBrainStudy({
      series: [
        { slices: 3, seriesDescription: 'T1 MPRAGE SAG 1mm' },
        { slices: 2, seriesDescription: 'AX FLAIR' },
      ],
    });
    const entries = study.map((inst, i) => {
      const path = join(dir, `${i}.dcm`);
      writeFileSync(path, inst.bytes);
      return {
        path,
        seriesInstanceUid: inst.seriesInstanceUid,
        sopInstanceUid: inst.sopInstanceUid,
      };
    });
    const pkg = await writeStudyPackage(join(dir, 'order.zip'), entries, {
      products: ['neuro-volumetry'],
      priority: 'urgent',
      correlation_id: 'adapter-order-1',
    });
    const intake = await inspectStudyObject(pkg.path, 'order.zip');
    expect(intake).toMatchObject({
      kind: 'dicom-zip',
      studyUid: study[0]!.studyInstanceUid,
      instances: 5,
      series: 2,
      metadata: {
        products: ['neuro-volumetry'],
        priority: 'urgent',
        correlation_id: 'adapter-order-1',
        // From the DICOM tags, which the sandbox reads too.
        accession_number: 'SBXACC0001',
      },
    });
    expect(new Set(intake.sopInstanceUids)).toEqual(new Set(study.map((i) => i.sopInstanceUid)));
  });

  it('is not mistaken for a zip bomb when the images are nearly uniform (entries are stored)', async () => {
    // A blank 2400 × 2400 × 16 bit frame (over the 10 MiB the ratio rule applies from)
    // deflates far past 100:1; stored, it expands 1:1.
    const inst = {
      sopInstanceUid: generateUid(),
      seriesInstanceUid: generateUid(),
      studyInstanceUid: generateUid(),
    };
    const bytes = writePart10({
      SOPClassUID: MR_IMAGE_STORAGE,
      SOPInstanceUID: inst.sopInstanceUid,
      StudyInstanceUID: inst.studyInstanceUid,
      SeriesInstanceUID: inst.seriesInstanceUid,
      Modality: 'MR',
      Rows: 2400,
      Columns: 2400,
      SamplesPerPixel: 1,
      PhotometricInterpretation: 'MONOCHROME2',
      BitsAllocated: 16,
      BitsStored: 12,
      HighBit: 11,
      PixelRepresentation: 0,
      PixelData: [new Uint16Array(2400 * 2400).buffer],
      _vrMap: { PixelData: 'OW' },
    });
    const path = join(dir, 'blank.dcm');
    writeFileSync(path, bytes);
    const pkg = await writeStudyPackage(join(dir, 'blank.zip'), [
      { path, seriesInstanceUid: inst.seriesInstanceUid, sopInstanceUid: inst.sopInstanceUid },
    ]);
    await expect(inspectStudyObject(pkg.path, 'blank.zip')).resolves.toMatchObject({
      kind: 'dicom-zip',
      instances: 1,
    });
  });
});
