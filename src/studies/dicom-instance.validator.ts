import { open } from 'node:fs/promises';
import type { InstanceHeader } from '../domain/dicom-instance';
import { isDicomUid } from './dicom-uid';

/**
 * Checks one DICOM Part 10 file (PS3.10 §7) before it may be stored or uploaded, reading only
 * what it needs: the header up to Pixel Data (7FE0,0010), parsed with dcmjs, then the Pixel
 * Data element's declared length compared with the bytes the file really holds. A typical
 * instance costs one 64 KiB read, whatever its size.
 *
 * Failure reasons are Store Instances Response Failure Reason values (PS3.18 Table I.2-2),
 * so STOW-RS and C-STORE answers and the lifecycle's reasons agree.
 */

// dcmjs ships no type declarations; the parts used here are typed locally. These are
// dcmjs internals (stable across 0.2x–0.5x): readFile() hides the offset where it stopped,
// and we need it to find the Pixel Data value.
interface ReadStream {
  offset: number;
  size: number;
  isLittleEndian: boolean;
  reset(): ReadStream;
  increment(n: number): void;
  readAsciiString(n: number): string;
  more(n: number): ReadStream;
}
interface DcmjsReadApi {
  ReadBufferStream: new (
    buffer: ArrayBuffer,
    littleEndian: boolean | null,
    options?: { noCopy?: boolean },
  ) => ReadStream;
  DicomMessage: {
    _readTag(
      stream: ReadStream,
      syntax: string,
    ): { tag: { toCleanString(): string }; values: number[] };
    _read(
      stream: ReadStream,
      syntax: string,
      options: { ignoreErrors: boolean; untilTag: string | null; includeUntilTagValue: boolean },
    ): Record<string, { vr: string; Value?: unknown[] }>;
  };
}
// eslint-disable-next-line @typescript-eslint/no-require-imports
const dcmjs = require('dcmjs') as { data: DcmjsReadApi; log?: { setLevel?: (l: string) => void } };
dcmjs.log?.setLevel?.('error');

/** Store Instances Response Failure Reason (0008,1197) values, PS3.18 Table I.2-2. */
export const FAILURE_REASON = {
  /** A7xx: Refused: out of resources (here: over the size limit). */
  outOfResources: 0xa700,
  /** A9xx: Error: Data Set does not match SOP Class (missing UIDs, short pixel data). */
  dataSetMismatch: 0xa900,
  /** Cxxx: Error: cannot understand (not DICOM Part 10). */
  cannotUnderstand: 0xc000,
  /** C122: Referenced Transfer Syntax not supported. */
  transferSyntaxNotSupported: 0xc122,
  /** 0110: Processing failure. */
  processingFailure: 0x0110,
} as const;

export const IMPLICIT_VR_LE = '1.2.840.10008.1.2';
export const EXPLICIT_VR_LE = '1.2.840.10008.1.2.1';
export const DEFLATED_EXPLICIT_VR_LE = '1.2.840.10008.1.2.1.99';
export const EXPLICIT_VR_BE = '1.2.840.10008.1.2.2';
/** Native (uncompressed) pixel data: its length must be rows × columns × … (PS3.5 §8.1.1). */
const NATIVE_SYNTAXES = new Set([
  IMPLICIT_VR_LE,
  EXPLICIT_VR_LE,
  DEFLATED_EXPLICIT_VR_LE,
  EXPLICIT_VR_BE,
]);

const PIXEL_DATA = '7FE00010';
const UNDEFINED_LENGTH = 0xffffffff;
const FIRST_READ = 64 * 1024;
const MAX_HEADER_BYTES = 64 * 1024 * 1024;

export type { InstanceHeader } from '../domain/dicom-instance';

export type InstanceCheck =
  | { ok: true; header: InstanceHeader; sizeBytes: number }
  | {
      ok: false;
      failureReason: number;
      /** PHI-free: says what is wrong, never a patient value. */
      reason: string;
      sopClassUid?: string;
      sopInstanceUid?: string;
      studyInstanceUid?: string;
    };

export interface InstanceCheckOptions {
  /** The instance must belong to this study (STOW-RS to /studies/{study}, a PACS pull). */
  expectedStudyUid?: string;
}

/** Validates the Part 10 file at `path`. Never throws for bad content; I/O errors do throw. */
export async function checkInstanceFile(
  path: string,
  options: InstanceCheckOptions = {},
): Promise<InstanceCheck> {
  const handle = await open(path, 'r');
  try {
    const { size } = await handle.stat();
    if (size < 132)
      return fail(FAILURE_REASON.cannotUnderstand, 'not a DICOM Part 10 file (too short)');
    let want = Math.min(size, FIRST_READ);
    for (;;) {
      const prefix = Buffer.alloc(want);
      const { bytesRead } = await handle.read(prefix, 0, want, 0);
      const parsed = parseHeader(prefix.subarray(0, bytesRead), bytesRead === size);
      if (parsed.kind === 'need-more') {
        if (want >= size) return fail(FAILURE_REASON.cannotUnderstand, parsed.reason);
        if (want >= MAX_HEADER_BYTES)
          return fail(
            FAILURE_REASON.outOfResources,
            'header larger than 64 MiB before the pixel data',
          );
        want = Math.min(size, want * 4, MAX_HEADER_BYTES);
        continue;
      }
      if (parsed.kind === 'invalid') return fail(parsed.failureReason, parsed.reason);
      return judge(parsed, size, options);
    }
  } finally {
    await handle.close();
  }
}

type Parsed =
  | { kind: 'need-more'; reason: string }
  | { kind: 'invalid'; failureReason: number; reason: string }
  | {
      kind: 'parsed';
      transferSyntaxUid: string;
      dataset: Record<string, { vr: string; Value?: unknown[] }>;
      /** Pixel Data's declared length and where its value starts, when the file has one. */
      pixel?: { length: number; valueOffset: number };
    };

/** Parses the header in `bytes` (the file's first bytes, or all of it when `complete`). */
export function parseHeader(bytes: Buffer, complete: boolean): Parsed {
  if (bytes.length < 132 || bytes.toString('latin1', 128, 132) !== 'DICM') {
    return {
      kind: 'invalid',
      failureReason: FAILURE_REASON.cannotUnderstand,
      reason: 'not a DICOM Part 10 file (no DICM prefix)',
    };
  }
  const ab = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length) as ArrayBuffer;
  let transferSyntaxUid: string;
  let dataset: Record<string, { vr: string; Value?: unknown[] }>;
  let stream: ReadStream;
  try {
    stream = new dcmjs.data.ReadBufferStream(ab, null, { noCopy: true });
    stream.reset();
    stream.increment(132);
    // PS3.10 §7.1: the File Meta Information starts with its group length (0002,0000).
    const groupLength = dcmjs.data.DicomMessage._readTag(stream, EXPLICIT_VR_LE);
    if (groupLength.tag.toCleanString() !== '00020000') {
      return {
        kind: 'invalid',
        failureReason: FAILURE_REASON.cannotUnderstand,
        reason: 'file meta information has no group length',
      };
    }
    const metaLength = Number(groupLength.values[0]);
    if (!Number.isFinite(metaLength) || stream.offset + metaLength > bytes.length) {
      return complete
        ? {
            kind: 'invalid',
            failureReason: FAILURE_REASON.cannotUnderstand,
            reason: 'file meta information is cut short',
          }
        : { kind: 'need-more', reason: 'file meta information is cut short' };
    }
    const meta = dcmjs.data.DicomMessage._read(stream.more(metaLength), EXPLICIT_VR_LE, {
      ignoreErrors: false,
      untilTag: null,
      includeUntilTagValue: false,
    });
    transferSyntaxUid = text(meta['00020010']) ?? '';
    if (!/^[0-9.]+$/.test(transferSyntaxUid)) {
      return {
        kind: 'invalid',
        failureReason: FAILURE_REASON.cannotUnderstand,
        reason: 'file meta information has no valid Transfer Syntax UID',
      };
    }
    if (transferSyntaxUid === DEFLATED_EXPLICIT_VR_LE) {
      // The data set is deflated (PS3.5 §A.5): inflating needs the whole file.
      if (!complete) return { kind: 'need-more', reason: 'deflated data set' };
      return {
        kind: 'invalid',
        failureReason: FAILURE_REASON.transferSyntaxNotSupported,
        reason: 'deflated transfer syntax is not supported',
      };
    }
    // Every other syntax is explicit little endian on the wire except the two below (PS3.5 §10).
    const syntax =
      transferSyntaxUid === IMPLICIT_VR_LE || transferSyntaxUid === EXPLICIT_VR_BE
        ? transferSyntaxUid
        : EXPLICIT_VR_LE;
    dataset = dcmjs.data.DicomMessage._read(stream, syntax, {
      ignoreErrors: false,
      untilTag: PIXEL_DATA,
      includeUntilTagValue: false,
    });
    if (!(PIXEL_DATA in dataset)) {
      // No pixel data reached: fine for a non-image object read whole; otherwise read more.
      return complete
        ? { kind: 'parsed', transferSyntaxUid, dataset }
        : { kind: 'need-more', reason: 'header not complete' };
    }
    // dcmjs stopped right after the Pixel Data tag; its VR and length follow (PS3.5 §7.1).
    const at = stream.offset;
    const le = syntax !== EXPLICIT_VR_BE;
    let length: number;
    let valueOffset: number;
    if (syntax === IMPLICIT_VR_LE) {
      if (at + 4 > bytes.length)
        return { kind: 'need-more', reason: 'pixel data header cut short' };
      length = bytes.readUInt32LE(at);
      valueOffset = at + 4;
    } else {
      if (at + 8 > bytes.length)
        return { kind: 'need-more', reason: 'pixel data header cut short' };
      // OB, OW, OF, UN: 2 reserved bytes, then a 32-bit length.
      length = le ? bytes.readUInt32LE(at + 4) : bytes.readUInt32BE(at + 4);
      valueOffset = at + 8;
    }
    delete dataset[PIXEL_DATA];
    return { kind: 'parsed', transferSyntaxUid, dataset, pixel: { length, valueOffset } };
  } catch (error) {
    if (!complete) return { kind: 'need-more', reason: 'header not complete' };
    return {
      kind: 'invalid',
      failureReason: FAILURE_REASON.cannotUnderstand,
      reason: `the data set cannot be parsed (${String((error as Error).message).slice(0, 80)})`,
    };
  }
}

function judge(
  parsed: Extract<Parsed, { kind: 'parsed' }>,
  fileSize: number,
  options: InstanceCheckOptions,
): InstanceCheck {
  const d = parsed.dataset;
  const sopClassUid = uidText(d['00080016']);
  const sopInstanceUid = uidText(d['00080018']);
  const studyInstanceUid = uidText(d['0020000D']);
  const seriesInstanceUid = uidText(d['0020000E']);
  const ids = { sopClassUid, sopInstanceUid, studyInstanceUid };
  const missing = [
    ['SOP Class UID', sopClassUid],
    ['SOP Instance UID', sopInstanceUid],
    ['Study Instance UID', studyInstanceUid],
    ['Series Instance UID', seriesInstanceUid],
  ]
    .filter(([, v]) => !isDicomUid(v))
    .map(([n]) => n);
  if (missing.length > 0) {
    return {
      ok: false,
      failureReason: FAILURE_REASON.dataSetMismatch,
      reason: `missing or invalid ${missing.join(', ')}`,
      ...ids,
    };
  }
  if (options.expectedStudyUid && studyInstanceUid !== options.expectedStudyUid) {
    return {
      ok: false,
      failureReason: FAILURE_REASON.dataSetMismatch,
      reason: 'the instance belongs to another study',
      ...ids,
    };
  }
  const pixel = parsed.pixel;
  if (pixel) {
    const native = NATIVE_SYNTAXES.has(parsed.transferSyntaxUid);
    if (pixel.length === UNDEFINED_LENGTH) {
      // Encapsulated pixel data (PS3.5 §A.4) is only allowed in compressed syntaxes.
      if (native)
        return {
          ok: false,
          failureReason: FAILURE_REASON.dataSetMismatch,
          reason: 'encapsulated pixel data in an uncompressed transfer syntax',
          ...ids,
        };
    } else {
      const available = fileSize - pixel.valueOffset;
      if (available < pixel.length) {
        return {
          ok: false,
          failureReason: FAILURE_REASON.dataSetMismatch,
          reason: `pixel data truncated: ${pixel.length} bytes declared, ${Math.max(0, available)} present`,
          ...ids,
        };
      }
      const expected = expectedNativePixelBytes(d);
      if (native && expected !== undefined && pixel.length < expected) {
        return {
          ok: false,
          failureReason: FAILURE_REASON.dataSetMismatch,
          reason: `pixel data incomplete: ${pixel.length} bytes, rows × columns × frames × samples needs ${expected}`,
          ...ids,
        };
      }
    }
  }
  const header: InstanceHeader = {
    sopClassUid: sopClassUid!,
    sopInstanceUid: sopInstanceUid!,
    seriesInstanceUid: seriesInstanceUid!,
    studyInstanceUid: studyInstanceUid!,
    transferSyntaxUid: parsed.transferSyntaxUid,
    accessionNumber: text(d['00080050']),
    patientId: text(d['00100020']),
    patientName: personName(d['00100010']),
    patientBirthDate: text(d['00100030']),
    patientSex: text(d['00100040']),
    studyDate: text(d['00080020']),
    studyTime: text(d['00080030']),
    studyId: text(d['00200010']),
    studyDescription: text(d['00081030']),
    referringPhysicianName: personName(d['00080090']),
    modality: text(d['00080060']),
  };
  return { ok: true, header, sizeBytes: fileSize };
}

/** Rows × Columns × Number of Frames × Samples per Pixel × Bits Allocated / 8 (PS3.5 §8.1.1). */
function expectedNativePixelBytes(d: Record<string, { Value?: unknown[] }>): number | undefined {
  const rows = num(d['00280010']);
  const columns = num(d['00280011']);
  const bits = num(d['00280100']);
  if (!rows || !columns || !bits) return undefined;
  const samples = num(d['00280002']) ?? 1;
  const frames = num(d['00280008']) ?? 1;
  return Math.ceil((rows * columns * samples * frames * bits) / 8);
}

function text(el: { Value?: unknown[] } | undefined): string | undefined {
  const v = el?.Value?.[0];
  if (typeof v !== 'string' && typeof v !== 'number') return undefined;
  const s = String(v)
    .replace(/[\0\s]+$/, '')
    .trim();
  return s === '' ? undefined : s;
}

/**
 * A UI value as the file holds it: dcmjs drops the characters a UID may not contain when
 * it decodes one (`../../x` reads as `....`), so the raw value is what is judged. Several
 * values come back joined by a backslash, which no UID contains.
 */
function uidText(el: { Value?: unknown[]; _rawValue?: unknown[] } | undefined): string | undefined {
  const values = (el?._rawValue ?? el?.Value ?? []).map((v) =>
    typeof v === 'string' ? v.replace(/[\0 ]+$/, '') : '',
  );
  const joined = values.join('\\');
  return joined === '' ? undefined : joined;
}

function num(el: { Value?: unknown[] } | undefined): number | undefined {
  const v = el?.Value?.[0];
  const n = typeof v === 'number' ? v : typeof v === 'string' ? Number(v) : NaN;
  return Number.isFinite(n) ? n : undefined;
}

/**
 * dcmjs gives PN values as { Alphabetic: 'Family^Given^^^' }. Trailing empty components
 * carry no meaning (PS3.5 §6.2.1.1) and are dropped, so `Doe^Jane^^^` equals `Doe^Jane`.
 */
function personName(el: { Value?: unknown[] } | undefined): string | undefined {
  const v = el?.Value?.[0];
  const raw =
    typeof v === 'string'
      ? v
      : v && typeof v === 'object' && 'Alphabetic' in v
        ? (v as { Alphabetic?: unknown }).Alphabetic
        : undefined;
  if (typeof raw !== 'string') return undefined;
  const name = raw.trim().replace(/\^+$/, '');
  return name === '' ? undefined : name;
}

function fail(failureReason: number, reason: string): InstanceCheck {
  return { ok: false, failureReason, reason };
}
