import { createHash } from 'node:crypto';

// dcmjs ships no type declarations; the subset used here is typed locally.
interface DcmjsWriteApi {
  DicomMetaDictionary: {
    denaturalizeDataset(ds: Record<string, unknown>): Record<string, unknown>;
  };
  DicomDict: new (meta: Record<string, unknown>) => {
    dict: Record<string, unknown>;
    write(): ArrayBuffer;
  };
}
// eslint-disable-next-line @typescript-eslint/no-require-imports
const dcmjs = require('dcmjs') as { data: DcmjsWriteApi };

/** PS3.5 §B.2: a UID under 2.25 from 128 bits of a hash, so the sample is stable per seed. */
function uid(seed: string): string {
  return `2.25.${BigInt(`0x${createHash('sha256').update(seed).digest('hex').slice(0, 32)}`).toString()}`;
}

/**
 * A synthetic, PHI-free MR brain slice as a DICOM Part 10 file, served by the sandbox at
 * `GET /sandbox/sample-study.dcm` so that the curl walk-through in docs/sandbox.md needs no
 * data from anywhere else. `seed` changes the Study/Series/SOP Instance UIDs.
 */
export function sampleStudyDicom(seed = 'sandbox-sample'): Buffer {
  const rows = 64;
  const columns = 64;
  const pixels = new Uint16Array(rows * columns);
  for (let y = 0; y < rows; y++) {
    for (let x = 0; x < columns; x++) {
      const nx = (x + 0.5) / 32 - 1;
      const ny = (y + 0.5) / 32 - 1;
      const r2 = (nx / 0.8) ** 2 + (ny / 0.92) ** 2;
      pixels[y * columns + x] = r2 >= 1 ? 0 : r2 >= 0.81 ? 300 : r2 >= 0.61 ? 1400 : 2000;
    }
  }
  const sop = uid(`${seed}/sop`);
  const dataset = {
    SpecificCharacterSet: 'ISO_IR 100',
    ImageType: ['ORIGINAL', 'PRIMARY', 'M', 'ND'],
    SOPClassUID: '1.2.840.10008.5.1.4.1.1.4', // MR Image Storage
    SOPInstanceUID: sop,
    StudyDate: '20260101',
    StudyTime: '090000',
    AccessionNumber: 'SBXDEMO1',
    Modality: 'MR',
    StudyDescription: 'MRI BRAIN (sandbox sample)',
    SeriesDescription: 'T1 3D sample',
    PatientName: 'Sample^Sandbox',
    PatientID: 'SBX-DEMO-1',
    PatientBirthDate: '19600101',
    PatientSex: 'O',
    SliceThickness: 1,
    MagneticFieldStrength: 3,
    StudyInstanceUID: uid(`${seed}/study`),
    SeriesInstanceUID: uid(`${seed}/series`),
    SeriesNumber: 1,
    InstanceNumber: 1,
    SamplesPerPixel: 1,
    PhotometricInterpretation: 'MONOCHROME2',
    Rows: rows,
    Columns: columns,
    PixelSpacing: [1, 1],
    BitsAllocated: 16,
    BitsStored: 12,
    HighBit: 11,
    PixelRepresentation: 0,
    PixelData: [pixels.buffer],
    _vrMap: { PixelData: 'OW' },
  };
  const meta = {
    FileMetaInformationVersion: new Uint8Array([0, 1]).buffer,
    MediaStorageSOPClassUID: dataset.SOPClassUID,
    MediaStorageSOPInstanceUID: sop,
    TransferSyntaxUID: '1.2.840.10008.1.2.1', // explicit VR little endian
    ImplementationClassUID: uid('imaging-ai-adapter/sandbox'),
  };
  const dict = new dcmjs.data.DicomDict(dcmjs.data.DicomMetaDictionary.denaturalizeDataset(meta));
  dict.dict = dcmjs.data.DicomMetaDictionary.denaturalizeDataset(dataset);
  return Buffer.from(dict.write());
}
