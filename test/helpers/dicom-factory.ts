/**
 * Generators of real DICOM Part 10 test data (PS3.10), written with dcmjs: MR brain series
 * with genuine 16-bit pixel data, plus the broken cases (truncated pixel data, not DICOM)
 * and packaging as ZIP. Patient and study attributes are parameters, so the same helpers
 * serve the sandbox suite and PACS (Orthanc) tests. All identities are synthetic.
 */
import { createHash, randomUUID } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { ZipFile } from 'yazl';
import { seededRandom } from '../../src/common/seeded-random';

// dcmjs ships no type declarations; the subset used here is typed locally.
interface DcmjsWriteApi {
  DicomMetaDictionary: {
    denaturalizeDataset(ds: Record<string, unknown>): Record<string, unknown>;
  };
  DicomDict: new (meta: Record<string, unknown>) => {
    dict: Record<string, unknown>;
    write(options?: Record<string, unknown>): ArrayBuffer;
  };
}
interface DcmjsLog {
  setLevel?: (level: string) => void;
  getLogger?: (name: string) => { setLevel?: (level: string) => void };
}
// eslint-disable-next-line @typescript-eslint/no-require-imports
const dcmjs = require('dcmjs') as { data: DcmjsWriteApi; log?: DcmjsLog };
dcmjs.log?.setLevel?.('error');
dcmjs.log?.getLogger?.('validation.dcmjs').setLevel?.('silent');

export const MR_IMAGE_STORAGE = '1.2.840.10008.5.1.4.1.1.4';
export const EXPLICIT_VR_LITTLE_ENDIAN = '1.2.840.10008.1.2.1';
export const IMPLICIT_VR_LITTLE_ENDIAN = '1.2.840.10008.1.2';
const IMPLEMENTATION_CLASS_UID = '2.25.229466438390858364353440958343118717227';

/** A UID under the 2.25 root (PS3.5 §B.2): the decimal form of a random UUID. */
export function generateUid(): string {
  return `2.25.${BigInt(`0x${randomUUID().replace(/-/g, '')}`).toString()}`;
}

/** A UID derived from a seed, for fixtures that must be stable between runs. */
export function deterministicUid(seed: string): string {
  const hex = createHash('sha256').update(seed).digest('hex').slice(0, 32);
  return `2.25.${BigInt(`0x${hex}`).toString()}`;
}

export interface PatientAttributes {
  patientId: string;
  /** Issuer of Patient ID (0010,0021): the Patient ID's domain; left out when not given. */
  issuerOfPatientId?: string;
  /** DICOM PN: Family^Given^Middle^Prefix^Suffix */
  patientName: string;
  /** YYYYMMDD */
  birthDate?: string;
  sex?: 'M' | 'F' | 'O';
}

export interface StudyAttributes {
  studyInstanceUid?: string;
  accessionNumber?: string;
  studyId?: string;
  /** YYYYMMDD */
  studyDate?: string;
  /** HHMMSS */
  studyTime?: string;
  studyDescription?: string;
  referringPhysicianName?: string;
  institutionName?: string;
  /** Issuer of Accession Number Sequence (0008,0051) item; left out when not given. */
  issuerOfAccessionNumber?: { namespace?: string; universalId?: string; universalIdType?: string };
  /** Requested Procedure Code Sequence item (code value, scheme, meaning). */
  procedureCode?: { value: string; scheme: string; meaning: string };
}

export interface SeriesAttributes {
  seriesInstanceUid?: string;
  seriesNumber?: number;
  seriesDescription?: string;
  slices?: number;
  rows?: number;
  columns?: number;
  sliceThicknessMm?: number;
  pixelSpacingMm?: number;
  magneticFieldStrengthT?: number;
  transferSyntaxUid?: typeof EXPLICIT_VR_LITTLE_ENDIAN | typeof IMPLICIT_VR_LITTLE_ENDIAN;
}

export interface DicomInstance {
  sopInstanceUid: string;
  seriesInstanceUid: string;
  studyInstanceUid: string;
  instanceNumber: number;
  bytes: Buffer;
}

export const DEFAULT_PATIENT: PatientAttributes = {
  patientId: 'SBX-000123',
  patientName: 'Sandbox^Patient^^^',
  birthDate: '19580412',
  sex: 'F',
};

/**
 * A T1-like axial brain slice: skull ring, grey/white matter, dark ventricles, plus noise.
 * 12 bits stored in 16 allocated, as MR scanners write them.
 */
export function brainSlicePixels(
  rows: number,
  columns: number,
  slice: number,
  slices: number,
  seed = 1,
): Uint16Array {
  const px = new Uint16Array(rows * columns);
  const rand = seededRandom(seed * 1000 + slice);
  const z = slices > 1 ? (slice / (slices - 1)) * 2 - 1 : 0;
  const scale = Math.sqrt(Math.max(0.05, 1 - z * z * 0.8));
  const ax = 0.8 * scale;
  const ay = 0.92 * scale;
  const withVentricles = z > -0.5 && z < 0.5;
  // Squared radii, no Math calls in the loop: this runs for every pixel of large test images.
  for (let y = 0; y < rows; y++) {
    const ny = ((y + 0.5) / rows) * 2 - 1;
    const ry2 = (ny / ay) * (ny / ay);
    const vy2 = (ny / 0.3) * (ny / 0.3);
    for (let x = 0; x < columns; x++) {
      const nx = ((x + 0.5) / columns) * 2 - 1;
      const r2 = (nx / ax) * (nx / ax) + ry2;
      let v = 0;
      if (r2 < 1 && r2 >= 0.81)
        v = 300; // skull / scalp
      else if (r2 < 0.81 && r2 >= 0.6084)
        v = 1400; // cortex (grey matter)
      else if (r2 < 0.6084) v = 2000; // white matter
      const vx = ((nx < 0 ? -nx : nx) - 0.12) / 0.08;
      if (withVentricles && vx * vx + vy2 < 1) v = 250;
      const noisy = (v + (rand() - 0.5) * 80 + 0.5) | 0;
      px[y * columns + x] = noisy < 0 ? 0 : noisy > 4095 ? 4095 : noisy;
    }
  }
  return px;
}

/** True when a naturalized dataset holds a string (at any depth) with a non-ASCII character. */
function holdsNonAscii(value: unknown): boolean {
  // eslint-disable-next-line no-control-regex -- the ASCII range is the point
  if (typeof value === 'string') return /[^\u0000-\u007f]/.test(value);
  if (Array.isArray(value)) return value.some(holdsNonAscii);
  if (value !== null && typeof value === 'object' && !(value instanceof ArrayBuffer))
    return Object.values(value).some(holdsNonAscii);
  return false;
}

/**
 * The Specific Character Set (0008,0005) that names the bytes dcmjs writes: it encodes every
 * text value as UTF-8, whatever the dataset declares. A declared single-byte set stays when the
 * text is ASCII (the same bytes in it); text with any other character is declared ISO_IR 192
 * (PS3.3 C.12.1.1.2). Before, ISO_IR 100 was declared over UTF-8 bytes, so `Müller` was
 * `MÃ¼ller` to every reader that honours the declaration, and fixtures with such names
 * tested mojibake.
 */
function writtenCharacterSet(dataset: Record<string, unknown>): Record<string, unknown> {
  if (dataset.SpecificCharacterSet === undefined || !holdsNonAscii(dataset)) return dataset;
  return { ...dataset, SpecificCharacterSet: 'ISO_IR 192' };
}

/**
 * Writes a Part 10 file from a naturalized dataset (dcmjs keywords); a declared character set
 * is made the one of the bytes written (writtenCharacterSet).
 */
export function writePart10(
  naturalized: Record<string, unknown>,
  transferSyntaxUid: string = EXPLICIT_VR_LITTLE_ENDIAN,
): Buffer {
  const dataset = writtenCharacterSet(naturalized);
  const meta = {
    FileMetaInformationVersion: new Uint8Array([0, 1]).buffer,
    MediaStorageSOPClassUID: dataset.SOPClassUID,
    MediaStorageSOPInstanceUID: dataset.SOPInstanceUID,
    TransferSyntaxUID: transferSyntaxUid,
    ImplementationClassUID: IMPLEMENTATION_CLASS_UID,
    ImplementationVersionName: 'SBX_FACTORY_1',
  };
  const dict = new dcmjs.data.DicomDict(dcmjs.data.DicomMetaDictionary.denaturalizeDataset(meta));
  dict.dict = dcmjs.data.DicomMetaDictionary.denaturalizeDataset(dataset);
  return Buffer.from(dict.write());
}

export interface MrBrainSeriesOptions {
  patient?: PatientAttributes;
  study?: StudyAttributes;
  series?: SeriesAttributes;
  /** Seed for pixel noise. */
  seed?: number;
}

/** An axial 3D T1-weighted MR brain series, one file per slice. */
export function createMrBrainSeries(options: MrBrainSeriesOptions = {}): DicomInstance[] {
  const patient = options.patient ?? DEFAULT_PATIENT;
  const study = options.study ?? {};
  const series = options.series ?? {};
  const studyUid = study.studyInstanceUid ?? generateUid();
  const seriesUid = series.seriesInstanceUid ?? generateUid();
  const slices = series.slices ?? 4;
  const rows = series.rows ?? 32;
  const columns = series.columns ?? 32;
  const thickness = series.sliceThicknessMm ?? 1;
  const spacing = series.pixelSpacingMm ?? 1;
  const frameOfReference = generateUid();
  const instances: DicomInstance[] = [];
  for (let i = 0; i < slices; i++) {
    const sopInstanceUid = generateUid();
    const pixels = brainSlicePixels(rows, columns, i, slices, options.seed ?? 1);
    const dataset: Record<string, unknown> = {
      SpecificCharacterSet: 'ISO_IR 100', // ISO_IR 192 for non-ASCII text (writtenCharacterSet)
      ImageType: ['ORIGINAL', 'PRIMARY', 'M', 'ND'],
      SOPClassUID: MR_IMAGE_STORAGE,
      SOPInstanceUID: sopInstanceUid,
      StudyDate: study.studyDate ?? '20260315',
      StudyTime: study.studyTime ?? '101500',
      AccessionNumber: study.accessionNumber ?? 'SBXACC0001',
      ...(study.issuerOfAccessionNumber
        ? {
            IssuerOfAccessionNumberSequence: [
              {
                ...(study.issuerOfAccessionNumber.namespace
                  ? { LocalNamespaceEntityID: study.issuerOfAccessionNumber.namespace }
                  : {}),
                ...(study.issuerOfAccessionNumber.universalId
                  ? { UniversalEntityID: study.issuerOfAccessionNumber.universalId }
                  : {}),
                ...(study.issuerOfAccessionNumber.universalIdType
                  ? { UniversalEntityIDType: study.issuerOfAccessionNumber.universalIdType }
                  : {}),
              },
            ],
          }
        : {}),
      Modality: 'MR',
      Manufacturer: 'SandboxScanner',
      InstitutionName: study.institutionName ?? 'Sandbox Imaging Center',
      ReferringPhysicianName: study.referringPhysicianName ?? 'Referrer^Rita',
      StudyDescription: study.studyDescription ?? 'MRI BRAIN WITHOUT CONTRAST',
      SeriesDescription: series.seriesDescription ?? 'T1 MPRAGE SAG 1mm',
      PatientName: patient.patientName,
      PatientID: patient.patientId,
      ...(patient.issuerOfPatientId ? { IssuerOfPatientID: patient.issuerOfPatientId } : {}),
      PatientBirthDate: patient.birthDate ?? '',
      PatientSex: patient.sex ?? '',
      ScanningSequence: 'GR\\IR',
      SequenceVariant: 'SP\\MP',
      MRAcquisitionType: '3D',
      SliceThickness: thickness,
      RepetitionTime: 2300,
      EchoTime: 2.98,
      MagneticFieldStrength: series.magneticFieldStrengthT ?? 3,
      StudyInstanceUID: studyUid,
      SeriesInstanceUID: seriesUid,
      StudyID: study.studyId ?? '1',
      SeriesNumber: series.seriesNumber ?? 2,
      InstanceNumber: i + 1,
      ImagePositionPatient: [-(columns * spacing) / 2, -(rows * spacing) / 2, i * thickness],
      ImageOrientationPatient: [1, 0, 0, 0, 1, 0],
      FrameOfReferenceUID: frameOfReference,
      SliceLocation: i * thickness,
      SamplesPerPixel: 1,
      PhotometricInterpretation: 'MONOCHROME2',
      Rows: rows,
      Columns: columns,
      PixelSpacing: [spacing, spacing],
      BitsAllocated: 16,
      BitsStored: 12,
      HighBit: 11,
      PixelRepresentation: 0,
      WindowCenter: 1200,
      WindowWidth: 2400,
      PixelData: [pixels.buffer],
      _vrMap: { PixelData: 'OW' },
    };
    if (study.procedureCode) {
      dataset.RequestedProcedureCodeSequence = [
        {
          CodeValue: study.procedureCode.value,
          CodingSchemeDesignator: study.procedureCode.scheme,
          CodeMeaning: study.procedureCode.meaning,
        },
      ];
    }
    instances.push({
      sopInstanceUid,
      seriesInstanceUid: seriesUid,
      studyInstanceUid: studyUid,
      instanceNumber: i + 1,
      bytes: writePart10(dataset, series.transferSyntaxUid ?? EXPLICIT_VR_LITTLE_ENDIAN),
    });
  }
  return instances;
}

/**
 * A whole study of several series (e.g. a 3D T1 and a FLAIR), sharing patient, study and
 * Study Instance UID; each series gets its own Series Instance UID and number.
 */
export function createMrBrainStudy(
  options: {
    patient?: PatientAttributes;
    study?: StudyAttributes;
    series?: SeriesAttributes[];
    seed?: number;
  } = {},
): DicomInstance[] {
  const study = {
    ...options.study,
    studyInstanceUid: options.study?.studyInstanceUid ?? generateUid(),
  };
  const seriesList = options.series ?? [
    { seriesDescription: 'T1 MPRAGE SAG 1mm', seriesNumber: 2 },
    { seriesDescription: 'AX FLAIR', seriesNumber: 3, sliceThicknessMm: 3 },
  ];
  return seriesList.flatMap((series, i) =>
    createMrBrainSeries({
      patient: options.patient,
      study,
      series: { seriesNumber: i + 1, ...series },
      seed: (options.seed ?? 1) + i,
    }),
  );
}

/** Cuts a Part 10 file inside its pixel data, leaving the element's declared length untouched. */
export function truncatePixelData(bytes: Buffer, keepPixelBytes: number): Buffer {
  const at = bytes.indexOf(Buffer.from([0xe0, 0x7f, 0x10, 0x00]), 132);
  if (at < 0) throw new Error('no Pixel Data element found');
  return Buffer.from(bytes.subarray(0, at + 12 + keepPixelBytes));
}

/** Shrinks the declared pixel data length too, so the file is self-consistent but short of pixels. */
export function shortPixelData(bytes: Buffer, keepPixelBytes: number): Buffer {
  const out = truncatePixelData(bytes, keepPixelBytes);
  const at = out.indexOf(Buffer.from([0xe0, 0x7f, 0x10, 0x00]), 132);
  out.writeUInt32LE(keepPixelBytes, at + 8);
  return out;
}

/** Bytes that are plainly not DICOM (a PNG signature and text). */
export function notDicomBytes(): Buffer {
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    Buffer.from('this is not a DICOM file '.repeat(20)),
  ]);
}

export interface ZipEntryInput {
  name: string;
  data: Buffer;
  /** Store without compression (default: deflate). */
  store?: boolean;
}

/** Packs entries into a ZIP in memory (test data is small). Names are taken verbatim. */
export function zipEntries(entries: ZipEntryInput[]): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const zip = new ZipFile();
    const chunks: Buffer[] = [];
    zip.outputStream.on('data', (c: Buffer) => chunks.push(c));
    zip.outputStream.on('end', () => resolve(Buffer.concat(chunks)));
    zip.outputStream.on('error', reject);
    for (const e of entries)
      zip.addBuffer(e.data, e.name, {
        compress: !e.store,
        mtime: new Date('2026-03-15T10:15:00Z'),
      });
    zip.end();
  });
}

/** A DICOM study as a ZIP laid out like a PACS export: DICOM/Sxxxxxx/IMxxxx.dcm. */
export function zipStudy(
  instances: DicomInstance[],
  extra: ZipEntryInput[] = [],
  options: { store?: boolean } = {},
): Promise<Buffer> {
  return zipEntries([
    ...instances.map((inst) => ({
      name: `DICOM/S${inst.seriesInstanceUid.slice(-6)}/IM${String(inst.instanceNumber).padStart(4, '0')}.dcm`,
      data: inst.bytes,
      store: options.store,
    })),
    ...extra,
  ]);
}

export interface NiftiFixture {
  nii: Buffer;
  niiGz: Buffer;
  bval: Buffer;
  bvec: Buffer;
}

/**
 * A minimal NIfTI-1 single-file diffusion image (348-byte header, "n+1" magic, vox_offset
 * 352) with `directions` volumes of 4×4×2 int16 voxels, and matching FSL-style .bval/.bvec.
 */
export function createNiftiDiffusion(directions = 7): NiftiFixture {
  const dims = [4, 4, 4, 2, directions, 1, 1, 1];
  const voxels = 4 * 4 * 2 * directions;
  const header = Buffer.alloc(352);
  header.writeInt32LE(348, 0); // sizeof_hdr
  dims.forEach((d, i) => header.writeInt16LE(d, 40 + i * 2)); // dim[8]
  header.writeInt16LE(4, 70); // datatype DT_INT16
  header.writeInt16LE(16, 72); // bitpix
  [1, 2, 2, 2, 1, 1, 1, 1].forEach((v, i) => header.writeFloatLE(v, 76 + i * 4)); // pixdim
  header.writeFloatLE(352, 108); // vox_offset
  header.write('n+1\0', 344, 'latin1');
  const data = Buffer.alloc(voxels * 2);
  for (let i = 0; i < voxels; i++) data.writeInt16LE(100 + (i % 50), i * 2);
  const nii = Buffer.concat([header, data]);
  const bvals = Array.from({ length: directions }, (_, i) => (i === 0 ? 0 : 1000));
  const vecs = [0, 1, 2].map((axis) =>
    Array.from({ length: directions }, (_, i) => (i === 0 ? 0 : (i - 1) % 3 === axis ? 1 : 0)),
  );
  return {
    nii,
    niiGz: gzipSync(nii),
    bval: Buffer.from(`${bvals.join(' ')}\n`),
    bvec: Buffer.from(`${vecs.map((r) => r.join(' ')).join('\n')}\n`),
  };
}

/**
 * `count` copies of one instance, each with its own SOP Instance UID (same length, so the
 * bytes are patched in place: File Meta and data set): large studies without re-encoding
 * every slice (dcmjs writes a 512×512 slice in about half a second on a busy machine).
 */
export function replicateInstance(
  instance: DicomInstance,
  count: number,
  /** Number of the first copy (copies first … first+count−1), for making a study in batches. */
  first = 0,
): DicomInstance[] {
  const old = Buffer.from(instance.sopInstanceUid, 'latin1');
  if (old.length < 12) throw new Error('SOP Instance UID too short to vary');
  const out: DicomInstance[] = [];
  for (let n = first; n < first + count; n++) {
    const uid = `${instance.sopInstanceUid.slice(0, -6)}${String(n).padStart(6, '0')}`;
    const bytes = Buffer.from(instance.bytes);
    for (let at = bytes.indexOf(old); at >= 0; at = bytes.indexOf(old, at + old.length))
      bytes.write(uid, at, 'latin1');
    out.push({ ...instance, sopInstanceUid: uid, instanceNumber: n + 1, bytes });
  }
  return out;
}
