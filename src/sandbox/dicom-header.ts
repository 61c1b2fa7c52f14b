import { withoutTrailing } from '../common/padding';

/**
 * Reads the header of a DICOM Part 10 object without touching its pixel data: the caller
 * hands in a prefix of the file and its total size. The pixel data element is located by its
 * tag so that its declared length can be checked against the bytes actually present and
 * against Rows × Columns × Samples × Frames × BitsAllocated (PS3.5 §8.1.1, native format).
 */

// dcmjs ships no type declarations; the subset used here is typed locally.
interface DcmjsData {
  DicomMessage: {
    readFile(
      buffer: ArrayBuffer,
      options: Record<string, unknown>,
    ): { meta: Record<string, unknown>; dict: Record<string, unknown> };
  };
  DicomMetaDictionary: {
    naturalizeDataset(dict: Record<string, unknown>): Record<string, unknown>;
  };
}
interface DcmjsLog {
  setLevel?: (level: string) => void;
  getLogger?: (name: string) => { setLevel?: (level: string) => void };
}
// eslint-disable-next-line @typescript-eslint/no-require-imports
const dcmjs = require('dcmjs') as { data: DcmjsData; log?: DcmjsLog };
// Our own validation reports problems; dcmjs's loggers (root and "validation.dcmjs") stay quiet.
dcmjs.log?.setLevel?.('error');
dcmjs.log?.getLogger?.('validation.dcmjs').setLevel?.('silent');

/** PS3.5 §A: transfer syntaxes. */
const IMPLICIT_VR_LE = '1.2.840.10008.1.2';
const EXPLICIT_VR_BE = '1.2.840.10008.1.2.2';
const DEFLATED = '1.2.840.10008.1.2.1.99';

export const HEADER_PREFIX_BYTES = 256 * 1024;
export const MAX_HEADER_PREFIX_BYTES = 8 * 1024 * 1024;

export interface DicomInfo {
  transferSyntax: string;
  sopClassUid?: string;
  sopInstanceUid?: string;
  studyUid?: string;
  seriesUid?: string;
  modality?: string;
  patientId?: string;
  patientName?: string;
  patientBirthDate?: string;
  patientSex?: string;
  accessionNumber?: string;
  referringPhysician?: string;
  procedureCode?: string;
  studyDate?: string;
  studyDescription?: string;
  institutionName?: string;
  seriesDescription?: string;
  rows?: number;
  columns?: number;
  sliceThickness?: number;
  magneticFieldStrength?: number;
  pixelDataBytes?: number;
}

export type DicomInspection =
  { ok: true; info: DicomInfo } | { ok: false; reason: string } | { ok: 'need-more' };

export function hasDicmPrefix(prefix: Buffer): boolean {
  return prefix.length >= 132 && prefix.toString('latin1', 128, 132) === 'DICM';
}

/** (0002,0010) is always explicit VR little endian (PS3.10 §7.1). */
function findTransferSyntax(prefix: Buffer): string | null {
  const at = prefix.indexOf(Buffer.from([0x02, 0x00, 0x10, 0x00, 0x55, 0x49]), 132);
  if (at < 0 || at + 8 > prefix.length) return null;
  const len = prefix.readUInt16LE(at + 6);
  if (at + 8 + len > prefix.length) return null;
  return withoutTrailing(prefix.toString('latin1', at + 8, at + 8 + len), '\0 ').trim();
}

interface PixelElement {
  offset: number;
  valueOffset: number;
  length: number;
}

function findPixelData(prefix: Buffer, syntax: string): PixelElement | null {
  const bigEndian = syntax === EXPLICIT_VR_BE;
  const implicit = syntax === IMPLICIT_VR_LE;
  const pattern = bigEndian
    ? Buffer.from([0x7f, 0xe0, 0x00, 0x10])
    : Buffer.from([0xe0, 0x7f, 0x10, 0x00]);
  let from = 132;
  for (;;) {
    const at = prefix.indexOf(pattern, from);
    if (at < 0) return null;
    if (implicit) {
      if (at + 8 <= prefix.length)
        return { offset: at, valueOffset: at + 8, length: prefix.readUInt32LE(at + 4) };
      return null;
    }
    if (at + 12 > prefix.length) return null;
    const vr = prefix.toString('latin1', at + 4, at + 6);
    if (['OB', 'OW', 'OF', 'OD', 'UN'].includes(vr) && prefix.readUInt16LE(at + 6) === 0) {
      const length = bigEndian ? prefix.readUInt32BE(at + 8) : prefix.readUInt32LE(at + 8);
      return { offset: at, valueOffset: at + 12, length };
    }
    from = at + 1;
  }
}

function str(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (Array.isArray(v)) return str(v[0]);
  if (typeof v === 'object') {
    const alpha = (v as { Alphabetic?: unknown }).Alphabetic;
    return alpha === undefined ? undefined : str(alpha);
  }
  const s = String(v).trim();
  return s === '' ? undefined : s;
}

function num(v: unknown): number | undefined {
  const s = str(v);
  if (s === undefined) return undefined;
  const n = Number(s);
  return Number.isFinite(n) ? n : undefined;
}

function codeValue(seq: unknown): string | undefined {
  const first = Array.isArray(seq) ? seq[0] : seq;
  if (typeof first !== 'object' || first === null) return undefined;
  return str((first as Record<string, unknown>).CodeValue);
}

const EXPLICIT_VRS = new Set(
  'AE AS AT CS DA DS DT FD FL IS LO LT OB OD OF OL OV OW PN SH SL SQ SS ST SV TM UC UI UL UN UR US UT UV'.split(
    ' ',
  ),
);

/**
 * A router that does not know a vendor's private sequence relabels its VR UN and keeps the
 * undefined length and the items as written, in explicit VR. PS3.5 §6.2.2 says such a UN's
 * items are implicit VR, and dcmjs reads them so: the first element's VR and length then make
 * one huge length and the header "cannot be parsed". In an explicit VR little endian data set,
 * an undefined-length UN whose first item starts with an element naming a VR is relabelled SQ
 * in a copy, so it is read as the explicit sequence it is (the adapter walks it so too);
 * items that are really implicit VR are left as they are.
 */
function relabelExplicitUnSequences(header: Buffer, syntax: string): Buffer {
  if (syntax === IMPLICIT_VR_LE || syntax === EXPLICIT_VR_BE || syntax === DEFLATED) return header;
  // VR "UN", reserved 0000, length FFFFFFFF, then an item tag (FFFE,E000).
  const pattern = Buffer.from([0x55, 0x4e, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xfe, 0xff, 0x00, 0xe0]);
  let copy: Buffer | null = null;
  for (let at = header.indexOf(pattern, 132); at >= 0; at = header.indexOf(pattern, at + 1)) {
    // Item length (4 bytes), then the first element's tag (4 bytes) and its VR (2 bytes).
    const vrAt = at + pattern.length + 8;
    if (vrAt + 2 > header.length) break;
    if (!EXPLICIT_VRS.has(header.toString('latin1', vrAt, vrAt + 2))) continue;
    copy ??= Buffer.from(header);
    copy.write('SQ', at, 'latin1');
  }
  return copy ?? header;
}

/**
 * @param prefix the first bytes of the object (whole object when small)
 * @param totalSize the size of the whole object in bytes
 */
export function inspectDicom(prefix: Buffer, totalSize: number): DicomInspection {
  if (!hasDicmPrefix(prefix))
    return { ok: false, reason: 'not a DICOM Part 10 file (no "DICM" prefix at byte 128)' };
  const whole = prefix.length >= totalSize;
  const syntax = findTransferSyntax(prefix);
  if (syntax === null) {
    return whole
      ? { ok: false, reason: 'file meta information has no Transfer Syntax UID (0002,0010)' }
      : { ok: 'need-more' };
  }
  const pixel = syntax === DEFLATED ? null : findPixelData(prefix, syntax);
  if (!pixel && !whole && syntax !== DEFLATED) return { ok: 'need-more' };
  if (syntax === DEFLATED && !whole) return { ok: 'need-more' };

  const headerBytes = relabelExplicitUnSequences(
    pixel ? prefix.subarray(0, pixel.offset + 4) : prefix,
    syntax,
  );
  let natural: Record<string, unknown>;
  try {
    const ab = headerBytes.buffer.slice(
      headerBytes.byteOffset,
      headerBytes.byteOffset + headerBytes.length,
    ) as ArrayBuffer;
    const parsed = dcmjs.data.DicomMessage.readFile(ab, {
      untilTag: '7FE00010',
      includeUntilTagValue: false,
      ignoreErrors: false,
    });
    natural = dcmjs.data.DicomMetaDictionary.naturalizeDataset(parsed.dict);
  } catch (err) {
    return {
      ok: false,
      reason: `DICOM header cannot be parsed (${(err as Error).message || 'truncated or malformed element'})`,
    };
  }

  const info: DicomInfo = {
    transferSyntax: syntax,
    sopClassUid: str(natural.SOPClassUID),
    sopInstanceUid: str(natural.SOPInstanceUID),
    studyUid: str(natural.StudyInstanceUID),
    seriesUid: str(natural.SeriesInstanceUID),
    modality: str(natural.Modality),
    patientId: str(natural.PatientID),
    patientName: str(natural.PatientName),
    patientBirthDate: str(natural.PatientBirthDate),
    patientSex: str(natural.PatientSex),
    accessionNumber: str(natural.AccessionNumber),
    referringPhysician: str(natural.ReferringPhysicianName),
    procedureCode:
      codeValue(natural.RequestedProcedureCodeSequence) ?? codeValue(natural.ProcedureCodeSequence),
    studyDate: str(natural.StudyDate),
    studyDescription: str(natural.StudyDescription),
    institutionName: str(natural.InstitutionName),
    seriesDescription: str(natural.SeriesDescription),
    rows: num(natural.Rows),
    columns: num(natural.Columns),
    sliceThickness: num(natural.SliceThickness),
    magneticFieldStrength: num(natural.MagneticFieldStrength),
  };
  if (!info.studyUid) return { ok: false, reason: 'Study Instance UID (0020,000D) is missing' };
  if (!info.sopInstanceUid) return { ok: false, reason: 'SOP Instance UID (0008,0018) is missing' };

  const isImage = info.rows !== undefined && info.columns !== undefined;
  if (isImage && syntax !== DEFLATED) {
    if (!pixel)
      return {
        ok: false,
        reason: 'Pixel Data (7FE0,0010) is missing although Rows and Columns are present',
      };
    if (pixel.length !== 0xffffffff) {
      // Native (uncompressed) encoding: the value must hold every frame (PS3.5 §8.1.1).
      const available = totalSize - pixel.valueOffset;
      const frames = num(natural.NumberOfFrames) ?? 1;
      const samples = num(natural.SamplesPerPixel) ?? 1;
      const bitsAllocated = num(natural.BitsAllocated) ?? 16;
      const expected = Math.ceil(
        (info.rows! * info.columns! * samples * frames * bitsAllocated) / 8,
      );
      if (available < pixel.length) {
        return {
          ok: false,
          reason: `incomplete pixel data: Pixel Data (7FE0,0010) declares ${pixel.length} bytes but only ${Math.max(0, available)} are present`,
        };
      }
      if (pixel.length < expected) {
        return {
          ok: false,
          reason: `incomplete pixel data: ${pixel.length} bytes present, ${expected} expected for ${info.rows}x${info.columns} pixels, ${samples} sample(s), ${frames} frame(s) at ${bitsAllocated} bits allocated`,
        };
      }
      info.pixelDataBytes = pixel.length;
    }
  }
  return { ok: true, info };
}
