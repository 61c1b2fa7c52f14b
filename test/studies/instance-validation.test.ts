import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkInstanceFile, FAILURE_REASON } from '../../src/studies/dicom-instance.validator';
import {
  createMrBrainSeries,
  IMPLICIT_VR_LITTLE_ENDIAN,
  MR_IMAGE_STORAGE,
  notDicomBytes,
  shortPixelData,
  truncatePixelData,
  writePart10,
} from '../helpers/dicom-factory';
import { rawInstance } from '../helpers/raw-dicom';

/** Instance validation on real Part 10 files written by dcmjs (test/helpers/dicom-factory). */
describe('checkInstanceFile', () => {
  let dir: string;
  let n = 0;
  const file = (bytes: Buffer) => {
    const path = join(dir, `${++n}.dcm`);
    writeFileSync(path, bytes);
    return path;
  };
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'studies-validate-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const [explicit] = createMrBrainSeries({
    study: { accessionNumber: 'VAL-1', studyDescription: 'MRI BRAIN' },
    series: { slices: 1, rows: 64, columns: 64 },
  });
  const [implicit] = createMrBrainSeries({
    series: { slices: 1, transferSyntaxUid: IMPLICIT_VR_LITTLE_ENDIAN },
  });

  it('accepts explicit and implicit VR little endian instances and reads the study attributes', async () => {
    const ok = await checkInstanceFile(file(explicit!.bytes));
    expect(ok).toEqual({
      ok: true,
      sizeBytes: explicit!.bytes.length,
      header: {
        sopClassUid: MR_IMAGE_STORAGE,
        sopInstanceUid: explicit!.sopInstanceUid,
        seriesInstanceUid: explicit!.seriesInstanceUid,
        studyInstanceUid: explicit!.studyInstanceUid,
        transferSyntaxUid: '1.2.840.10008.1.2.1',
        accessionNumber: 'VAL-1',
        patientId: 'SBX-000123',
        patientName: 'Sandbox^Patient',
        patientBirthDate: '19580412',
        patientSex: 'F',
        studyDate: '20260315',
        studyTime: '101500',
        studyId: '1',
        studyDescription: 'MRI BRAIN',
        referringPhysicianName: 'Referrer^Rita',
        modality: 'MR',
      },
    });
    expect(await checkInstanceFile(file(implicit!.bytes))).toMatchObject({
      ok: true,
      header: { transferSyntaxUid: IMPLICIT_VR_LITTLE_ENDIAN, modality: 'MR' },
    });
  });

  it('refuses truncated and short pixel data (8192 bytes needed for 64 × 64 × 16 bit)', async () => {
    expect(await checkInstanceFile(file(truncatePixelData(explicit!.bytes, 1000)))).toEqual({
      ok: false,
      failureReason: FAILURE_REASON.dataSetMismatch,
      reason: 'pixel data truncated: 8192 bytes declared, 1000 present',
      sopClassUid: MR_IMAGE_STORAGE,
      sopInstanceUid: explicit!.sopInstanceUid,
      studyInstanceUid: explicit!.studyInstanceUid,
    });
    expect(await checkInstanceFile(file(shortPixelData(explicit!.bytes, 4096)))).toMatchObject({
      ok: false,
      reason: 'pixel data incomplete: 4096 bytes, rows × columns × frames × samples needs 8192',
    });
    expect(await checkInstanceFile(file(truncatePixelData(implicit!.bytes, 10)))).toMatchObject({
      ok: false,
      failureReason: FAILURE_REASON.dataSetMismatch,
    });
  });

  it('refuses what is not DICOM, a cut header, missing UIDs and another study', async () => {
    expect(await checkInstanceFile(file(notDicomBytes()))).toEqual({
      ok: false,
      failureReason: FAILURE_REASON.cannotUnderstand,
      reason: 'not a DICOM Part 10 file (no DICM prefix)',
    });
    expect(await checkInstanceFile(file(Buffer.alloc(50)))).toMatchObject({
      ok: false,
      failureReason: FAILURE_REASON.cannotUnderstand,
    });
    expect(await checkInstanceFile(file(explicit!.bytes.subarray(0, 400)))).toMatchObject({
      ok: false,
      failureReason: FAILURE_REASON.cannotUnderstand,
    });
    const noSeries = writePart10({
      SOPClassUID: MR_IMAGE_STORAGE,
      SOPInstanceUID: '1.2.3.4.5',
      StudyInstanceUID: '1.2.3.4',
      Modality: 'MR',
    });
    expect(await checkInstanceFile(file(noSeries))).toMatchObject({
      ok: false,
      failureReason: FAILURE_REASON.dataSetMismatch,
      reason: 'missing or invalid Series Instance UID',
    });
    expect(
      await checkInstanceFile(file(explicit!.bytes), { expectedStudyUid: '1.2.3.999' }),
    ).toMatchObject({ ok: false, reason: 'the instance belongs to another study' });
  });

  it('reads further when the header before the pixel data is longer than the first read', async () => {
    // A long comment (and a vendor's long private data) push Pixel Data past the first 64 KiB.
    const [big] = createMrBrainSeries({ series: { slices: 1, rows: 16, columns: 16 } });
    const longText = 'x'.repeat(300 * 1024);
    const withComment = writePart10({
      SOPClassUID: MR_IMAGE_STORAGE,
      SOPInstanceUID: big!.sopInstanceUid,
      StudyInstanceUID: big!.studyInstanceUid,
      SeriesInstanceUID: big!.seriesInstanceUid,
      ImageComments: longText,
      Rows: 16,
      Columns: 16,
      BitsAllocated: 16,
      SamplesPerPixel: 1,
      PixelData: [new Uint16Array(256).buffer],
      _vrMap: { PixelData: 'OW' },
    });
    expect(withComment.length).toBeGreaterThan(300 * 1024);
    expect(await checkInstanceFile(file(withComment))).toMatchObject({ ok: true });
    expect(await checkInstanceFile(file(truncatePixelData(withComment, 100)))).toMatchObject({
      ok: false,
      reason: 'pixel data truncated: 512 bytes declared, 100 present',
    });
  });

  it('accepts uncompressed YBR_FULL_422 (two samples per pixel stored), refuses it short', async () => {
    // Modelled on pydicom's SC_ybr_full_422_uncompressed.dcm: 8-bit, 3 samples declared,
    // Y1 Y2 CB CR per pixel pair, so rows × columns × 2 bytes (PS3.3 C.7.6.3.1.2).
    const ybr = (pixelBytes: number) =>
      writePart10({
        SOPClassUID: '1.2.840.10008.5.1.4.1.1.7',
        SOPInstanceUID: '2.25.2001',
        StudyInstanceUID: '2.25.2002',
        SeriesInstanceUID: '2.25.2003',
        Modality: 'US',
        Rows: 16,
        Columns: 16,
        SamplesPerPixel: 3,
        PlanarConfiguration: 0,
        PhotometricInterpretation: 'YBR_FULL_422',
        BitsAllocated: 8,
        BitsStored: 8,
        HighBit: 7,
        PixelRepresentation: 0,
        PixelData: [new Uint8Array(pixelBytes).buffer],
        _vrMap: { PixelData: 'OB' },
      });
    expect(await checkInstanceFile(file(ybr(16 * 16 * 2)))).toMatchObject({ ok: true });
    expect(await checkInstanceFile(file(ybr(16 * 16)))).toMatchObject({
      ok: false,
      reason: 'pixel data incomplete: 256 bytes, rows × columns × frames × samples needs 512',
    });
  });

  it('accepts File Meta Information without its group length (0002,0000), refuses it cut short', async () => {
    // Modelled on pydicom's no_meta_group_length.dcm: the meta elements follow DICM directly.
    const raw = rawInstance({ accession: 'NOGL-1', patientId: 'PID-NOGL' });
    const noGroupLength = Buffer.concat([raw.bytes.subarray(0, 132), raw.bytes.subarray(144)]);
    expect(await checkInstanceFile(file(noGroupLength))).toMatchObject({
      ok: true,
      header: {
        sopInstanceUid: raw.sopInstanceUid,
        transferSyntaxUid: '1.2.840.10008.1.2.1',
        accessionNumber: 'NOGL-1',
        patientId: 'PID-NOGL',
      },
    });
    expect(await checkInstanceFile(file(noGroupLength.subarray(0, 150)))).toMatchObject({
      ok: false,
      failureReason: FAILURE_REASON.cannotUnderstand,
    });
  });

  it('reads the File Meta Information to its last element when the group length misses one', async () => {
    // A writer that counted the group length without its last element (Implementation
    // Version Name): with an implicit VR data set, that element was read as data and the
    // instance refused C000. DCMTK and pydicom read the meta group by its elements.
    const bytes = Buffer.from(implicit!.bytes);
    const metaEnd = 144 + bytes.readUInt32LE(140);
    let last = 144;
    for (let at = 144; at < metaEnd;) {
      last = at;
      const long = ['OB', 'UN', 'UT'].includes(bytes.toString('latin1', at + 4, at + 6));
      at += long ? 12 + bytes.readUInt32LE(at + 8) : 8 + bytes.readUInt16LE(at + 6);
    }
    expect(last).toBeGreaterThan(144);
    bytes.writeUInt32LE(last - 144, 140);
    expect(await checkInstanceFile(file(bytes))).toMatchObject({
      ok: true,
      header: {
        sopInstanceUid: implicit!.sopInstanceUid,
        transferSyntaxUid: IMPLICIT_VR_LITTLE_ENDIAN,
      },
    });
  });

  it('accepts an instance without pixel data (e.g. a structured report)', async () => {
    const sr = writePart10({
      SOPClassUID: '1.2.840.10008.5.1.4.1.1.88.33',
      SOPInstanceUID: '2.25.1001',
      StudyInstanceUID: '2.25.1002',
      SeriesInstanceUID: '2.25.1003',
      Modality: 'SR',
    });
    expect(await checkInstanceFile(file(sr))).toMatchObject({
      ok: true,
      header: { modality: 'SR', sopClassUid: '1.2.840.10008.5.1.4.1.1.88.33' },
    });
  });
});
