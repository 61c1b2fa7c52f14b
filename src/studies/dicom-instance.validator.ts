import { open, type FileHandle } from 'node:fs/promises';
import type { InstanceHeader } from '../domain/dicom-instance';
import type { AssigningAuthority } from '../domain/order-request';
import {
  expectedNativePixelBytes,
  identifier,
  personName,
  text,
  uidText,
  type DataSet,
} from './dicom-attribute.values';
import { dicomTextDecoder, type DicomTextDecoder } from './dicom-charset';
import {
  appearsTwice,
  metaGroupEnd,
  walkDataSet,
  walkFirstItem,
  type WalkedElement,
  type WalkSyntax,
} from './dicom-dataset-walk';
import { isDicomUid } from './dicom-uid';
import { withoutTrailing } from '../common/padding';

/**
 * Checks one DICOM Part 10 file (PS3.10 §7) before it may be stored or uploaded, reading only
 * what it needs: the header up to Pixel Data (7FE0,0010), walked once (dicom-dataset-walk.ts,
 * sequences stepped over, never decoded) with the few attributes below decoded by their
 * Specific Character Set (dicom-charset.ts), then the Pixel Data element's declared length
 * compared with the bytes the file really holds. A typical instance costs one 64 KiB read,
 * whatever its size; the cost grows with the header's bytes, never with its nesting.
 *
 * Failure reasons are Store Instances Response Failure Reason values (PS3.18 Table I.2-2),
 * so STOW-RS and C-STORE answers and the lifecycle's reasons agree.
 */

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
/**
 * JPIP Referenced (and Deflate) syntaxes, JPEG 2000 and HTJ2K (PS3.5 §A.6, §A.7; PS3.6 Table
 * the data set names a JPIP server in Pixel Data Provider URL (0028,7FE0) instead of
 * holding Pixel Data. Such an image has nothing to analyse once it leaves the sender's network;
 * it was taken as a file without pixel data (as an SR is) and uploaded.
 */
export const JPIP_REFERENCED_SYNTAXES: ReadonlySet<string> = new Set([
  '1.2.840.10008.1.2.4.94',
  '1.2.840.10008.1.2.4.95',
  '1.2.840.10008.1.2.4.204',
  '1.2.840.10008.1.2.4.205',
]);
/** Native (uncompressed) pixel data: its length must be rows × columns × … (PS3.5 §8.1.1). */
const NATIVE_SYNTAXES = new Set([
  IMPLICIT_VR_LE,
  EXPLICIT_VR_LE,
  DEFLATED_EXPLICIT_VR_LE,
  EXPLICIT_VR_BE,
]);

/**
 * Pixel Data (7FE0,0010), Float Pixel Data (7FE0,0008) and Double Float Pixel Data
 * (7FE0,0009): a data set holds at most one of them (PS3.3 C.7.6.3, C.7.6.24), the last of
 * its attributes before any trailing padding or signatures. The two float forms (parametric
 * maps) are never encapsulated and are checked like native pixel data.
 */
const PIXEL_DATA_TAGS = ['7FE00008', '7FE00009', '7FE00010'];
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

export interface SopUids {
  sopClassUid: string;
  sopInstanceUid: string;
}

export interface InstanceCheckOptions {
  /** The instance must belong to this study (STOW-RS to /studies/{study}, a PACS pull). */
  expectedStudyUid?: string;
  /**
   * The data set must be this SOP Class and Instance: a C-STORE request's Affected SOP Class
   * and Instance UIDs (PS3.7 §9.1.1), which our File Meta Information repeats. DCMTK's
   * storescp answers a mismatch A900 too; stored, the file's meta named another instance
   * than its data set, and the command's UID was what the sender was told was stored.
   */
  expectedSop?: SopUids;
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
      let parsed = parseHeader(prefix.subarray(0, bytesRead), bytesRead === size);
      if (parsed.kind === 'skip') parsed = await walkOn(handle, size, parsed);
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
      const fragments =
        parsed.pixel?.length === UNDEFINED_LENGTH
          ? await fragmentsProblem(handle, size, parsed.pixel.valueOffset)
          : undefined;
      return judge(parsed, size, options, fragments);
    }
  } finally {
    await handle.close();
  }
}

type Parsed =
  | { kind: 'need-more'; reason: string }
  | { kind: 'invalid'; failureReason: number; reason: string }
  | {
      /** The walk stepped over a value past the bytes read: it goes on at `resumeAt`. */
      kind: 'skip';
      transferSyntaxUid: string;
      syntax: WalkSyntax;
      elements: Map<string, WalkedElement>;
      resumeAt: number;
    }
  | {
      kind: 'parsed';
      transferSyntaxUid: string;
      dataset: DataSet;
      /** The first item of the Issuer of Accession Number Sequence (0008,0051), if any. */
      accessionIssuer?: AssigningAuthority;
      /** Pixel Data's declared length and where its value starts, when the file has one. */
      pixel?: { tag: string; length: number; valueOffset: number };
    };

/**
 * Goes on walking after a value too large to read (an encapsulated document, a vendor's raw
 * data, float pixel data): from the file offset where it ends, one window at a time. Each
 * step starts past the end of the window before it, so the reads stay linear in the file's
 * size and memory in one window, however large the values stepped over.
 */
async function walkOn(
  handle: FileHandle,
  size: number,
  skip: Extract<Parsed, { kind: 'skip' }>,
): Promise<Exclude<Parsed, { kind: 'skip' }>> {
  const elements = new Map(skip.elements);
  let origin = skip.resumeAt;
  let want = FIRST_READ;
  for (;;) {
    if (origin > size) return invalidParse('an element is longer than the bytes that follow it');
    const length = Math.min(size - origin, want);
    const window = Buffer.alloc(length);
    const { bytesRead } = await handle.read(window, 0, length, origin);
    const complete = origin + bytesRead === size;
    const walked = walkDataSet(
      window.subarray(0, bytesRead),
      0,
      skip.syntax,
      WANTED,
      complete,
      PIXEL_DATA_TAGS,
    );
    if (walked.kind === 'invalid') return invalidParse(walked.reason);
    if (walked.kind === 'need-more') {
      if (complete) return invalidParse(walked.reason);
      if (want >= MAX_HEADER_BYTES) return { kind: 'need-more', reason: walked.reason };
      want = Math.min(want * 4, MAX_HEADER_BYTES);
      continue;
    }
    for (const [k, v] of walked.elements) {
      if (elements.has(k)) return invalidParse(appearsTwice(k));
      elements.set(k, v);
    }
    if (walked.kind === 'skip') {
      origin += walked.resumeAt;
      want = FIRST_READ;
      continue;
    }
    const stop = walked.stop && {
      ...walked.stop,
      valueOffset: origin + walked.stop.valueOffset,
    };
    return decodeHeader(skip.transferSyntaxUid, skip.syntax, elements, stop);
  }
}

/**
 * Whether encapsulated pixel data (PS3.5 §A.4) is whole: items (FFFE,E000) of defined length
 * (the Basic Offset Table, then the fragments), each within the file, closed by the sequence
 * delimiter (FFFE,E0DD). Undefined when whole, else what is wrong. Only the item headers are
 * read, a small window at a time, never the fragments. Before, the declared length was only
 * checked for native pixel data: a JPEG, JPEG-LS or RLE instance cut short by its sender was
 * taken and uploaded with a broken image.
 */
async function fragmentsProblem(
  handle: FileHandle,
  size: number,
  start: number,
): Promise<string | undefined> {
  const window = Buffer.alloc(8 * 1024);
  let windowStart = 0;
  let windowLength = 0;
  let at = start;
  for (let item = 0; ; item++) {
    if (at + 8 > size) return 'encapsulated pixel data cut short: no sequence delimiter';
    if (at < windowStart || at + 8 > windowStart + windowLength) {
      windowStart = at;
      windowLength = (await handle.read(window, 0, window.length, at)).bytesRead;
    }
    const group = window.readUInt16LE(at - windowStart);
    const element = window.readUInt16LE(at - windowStart + 2);
    const length = window.readUInt32LE(at - windowStart + 4);
    if (group === 0xfffe && element === 0xe0dd) return undefined;
    if (group !== 0xfffe || element !== 0xe000 || length === UNDEFINED_LENGTH)
      return `encapsulated pixel data: item ${item + 1} is not a fragment of defined length`;
    at += 8 + length;
    if (at > size)
      return `pixel data truncated: encapsulated item ${item + 1} declares ${length} bytes, ${Math.max(0, length - (at - size))} present`;
  }
}

function invalidParse(reason: string): Extract<Parsed, { kind: 'invalid' }> {
  return {
    kind: 'invalid',
    failureReason: FAILURE_REASON.cannotUnderstand,
    reason: `the data set cannot be parsed (${reason})`,
  };
}

/**
 * The attributes read from the data set, with their VRs (PS3.6): the VR tells how to decode
 * them in implicit VR too. Only these are decoded; every other element is stepped over.
 */
const HEADER_ATTRIBUTES: Readonly<Record<string, string>> = {
  '00080005': 'CS', // Specific Character Set
  '00080016': 'UI', // SOP Class UID
  '00080018': 'UI', // SOP Instance UID
  '00080020': 'DA', // Study Date
  '00080030': 'TM', // Study Time
  '00080050': 'SH', // Accession Number
  '00080051': 'SQ', // Issuer of Accession Number Sequence
  '00080060': 'CS', // Modality
  '00080090': 'PN', // Referring Physician's Name
  '00081030': 'LO', // Study Description
  '00100010': 'PN', // Patient's Name
  '00100020': 'LO', // Patient ID
  '00100021': 'LO', // Issuer of Patient ID
  '00100030': 'DA', // Patient's Birth Date
  '00100040': 'CS', // Patient's Sex
  '0020000D': 'UI', // Study Instance UID
  '0020000E': 'UI', // Series Instance UID
  '00200010': 'SH', // Study ID
  '00280002': 'US', // Samples per Pixel
  '00280004': 'CS', // Photometric Interpretation
  '00280008': 'IS', // Number of Frames
  '00280010': 'US', // Rows
  '00280011': 'US', // Columns
  '00280100': 'US', // Bits Allocated
};
const WANTED = new Set(Object.keys(HEADER_ATTRIBUTES));
/** Of the Issuer of Accession Number Sequence's item (PS3.3 Table 10-17 HL7v2 Hierarchic Designator Macro). */
const ISSUER_ATTRIBUTES: Readonly<Record<string, keyof AssigningAuthority>> = {
  '00400031': 'namespace', // Local Namespace Entity ID (UT)
  '00400032': 'universalId', // Universal Entity ID (UT)
  '00400033': 'universalIdType', // Universal Entity ID Type (CS)
};
const ISSUER_WANTED = new Set(Object.keys(ISSUER_ATTRIBUTES));
/** Text VRs whose bytes follow the Specific Character Set (PS3.5 §6.1.2.3); others are ASCII. */
const CHARSET_VRS = new Set(['SH', 'LO', 'PN', 'ST', 'LT', 'UT', 'UC']);
const ASCII = dicomTextDecoder([]);

/**
 * Parses the header in `bytes` (the file's first bytes, or all of it when `complete`): the
 * File Meta Information, then one linear walk of the data set up to Pixel Data that decodes
 * only the attributes above (dicom-dataset-walk.ts).
 */
export function parseHeader(bytes: Buffer, complete: boolean): Parsed {
  const invalid = (reason: string): Parsed => ({
    kind: 'invalid',
    failureReason: FAILURE_REASON.cannotUnderstand,
    reason,
  });
  if (bytes.length < 132 || bytes.toString('latin1', 128, 132) !== 'DICM') {
    return invalid('not a DICOM Part 10 file (no DICM prefix)');
  }
  // PS3.10 §7.1: the File Meta Information (explicit VR little endian) starts with its
  // group length (0002,0000) UL. Its end is found from the group's own elements, as DCMTK
  // and pydicom read it, not from the group length: older writers left the group length out
  // (pydicom's no_meta_group_length.dcm) or wrote one that missed an element, and with an
  // implicit VR data set the group length's word alone sent the walk into the meta elements.
  if (bytes.length < 144) {
    return complete
      ? invalid('file meta information is cut short')
      : { kind: 'need-more', reason: 'file meta information is cut short' };
  }
  if (bytes.readUInt16LE(132) !== 0x0002) {
    return invalid('file meta information is missing');
  }
  const end = metaGroupEnd(bytes, 132, complete);
  if (end.kind !== 'end') {
    return end.kind === 'need-more'
      ? { kind: 'need-more', reason: end.reason }
      : invalid(`file meta information cannot be read (${end.reason})`);
  }
  const metaStart = 132;
  const metaEnd = end.at;
  const meta = walkDataSet(
    bytes.subarray(0, metaEnd),
    metaStart,
    'explicit-le',
    new Set(['00020010']),
    true,
  );
  // (Complete bytes: the walk never skips.)
  if (meta.kind !== 'walked')
    return invalid(
      `file meta information cannot be read (${'reason' in meta ? meta.reason : 'cut short'})`,
    );
  const transferSyntaxUid = uidValue(meta.elements.get('00020010'));
  if (!/^[0-9.]+$/.test(transferSyntaxUid)) {
    return invalid('file meta information has no valid Transfer Syntax UID');
  }
  if (JPIP_REFERENCED_SYNTAXES.has(transferSyntaxUid)) {
    return {
      kind: 'invalid',
      failureReason: FAILURE_REASON.transferSyntaxNotSupported,
      reason: 'JPIP referenced transfer syntax: the pixel data is not in the file',
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
  const syntax: WalkSyntax =
    transferSyntaxUid === IMPLICIT_VR_LE
      ? 'implicit-le'
      : transferSyntaxUid === EXPLICIT_VR_BE
        ? 'explicit-be'
        : 'explicit-le';
  const walked = walkDataSet(bytes, metaEnd, syntax, WANTED, complete, PIXEL_DATA_TAGS);
  if (walked.kind === 'need-more') return walked;
  if (walked.kind === 'invalid') return invalid(`the data set cannot be parsed (${walked.reason})`);
  if (walked.kind === 'skip') return { ...walked, transferSyntaxUid, syntax };
  if (!walked.stop && !complete) return { kind: 'need-more', reason: 'header not complete' };
  return decodeHeader(transferSyntaxUid, syntax, walked.elements, walked.stop);
}

/**
 * The longest value of an attribute the check reads: each has a VR with a 16-bit length in
 * explicit VR (PS3.5 Table 7.1-2), 65,534 bytes at most (even). Implicit VR, or an explicit
 * UN, writes any element with a 32-bit length: a 32 MiB Patient ID of backslashes was split
 * into 32 million values (4.3 s of a blocked event loop, +745 MiB) and taken whole for the
 * database row. Such a value is refused before it is decoded.
 */
const MAX_READ_VALUE_BYTES = 0xfffe;

/** The walked attributes decoded by their VR and the Specific Character Set. */
function decodeHeader(
  transferSyntaxUid: string,
  syntax: WalkSyntax,
  elements: ReadonlyMap<string, WalkedElement>,
  pixel: { tag: string; length: number; valueOffset: number } | undefined,
): Extract<Parsed, { kind: 'parsed' | 'invalid' }> {
  for (const [key, element] of elements) {
    if (HEADER_ATTRIBUTES[key] === 'SQ') continue;
    if (element.value.length > MAX_READ_VALUE_BYTES)
      return {
        kind: 'invalid',
        failureReason: FAILURE_REASON.cannotUnderstand,
        reason: `attribute (${key.slice(0, 4)},${key.slice(4)}) is ${element.value.length} bytes long, more than its VR ${HEADER_ATTRIBUTES[key]} can hold (${MAX_READ_VALUE_BYTES})`,
      };
  }
  const charset = elements.get('00080005');
  const decoder = dicomTextDecoder(
    charset ? withoutTrailing(ASCII.decode(charset.value), '\0 ').split('\\') : [],
  );
  const dataset: DataSet = {};
  let accessionIssuer: AssigningAuthority | undefined;
  for (const [key, element] of elements) {
    if (key === '00080051') accessionIssuer = issuerOf(element, syntax, decoder);
    else dataset[key] = { Value: decodeValues(element, HEADER_ATTRIBUTES[key]!, syntax, decoder) };
  }
  // A file without pixel data (a structured report) has been walked whole.
  return {
    kind: 'parsed',
    transferSyntaxUid,
    dataset,
    pixel,
    ...(accessionIssuer ? { accessionIssuer } : {}),
  };
}

/**
 * The issuer in the Issuer of Accession Number Sequence's first item (the sequence holds one,
 * PS3.3 C.7.2.1): its Local Namespace Entity ID, Universal Entity ID and type, each without
 * padding and bounded like any value read. None when the sequence is empty or unreadable.
 */
function issuerOf(
  element: WalkedElement,
  syntax: WalkSyntax,
  decoder: DicomTextDecoder,
): AssigningAuthority | undefined {
  const item = walkFirstItem(element.value, syntax, element.vr, ISSUER_WANTED);
  if (!item) return undefined;
  const out: AssigningAuthority = {};
  for (const [key, part] of Object.entries(ISSUER_ATTRIBUTES)) {
    const value = item.get(key);
    if (!value || value.value.length > MAX_READ_VALUE_BYTES) continue;
    const read = identifier({
      Value: decodeValues(value, part === 'universalIdType' ? 'CS' : 'UT', syntax, decoder),
    });
    if (read) out[part] = read;
  }
  return out.namespace || out.universalId ? out : undefined;
}

/** An element's values: text split at the backslash, US as numbers in the syntax's order. */
function decodeValues(
  element: WalkedElement,
  vr: string,
  syntax: WalkSyntax,
  decoder: DicomTextDecoder,
): Array<string | number> {
  const { value } = element;
  if (vr === 'US') {
    const out: number[] = [];
    for (let at = 0; at + 2 <= value.length; at += 2)
      out.push(syntax === 'explicit-be' ? value.readUInt16BE(at) : value.readUInt16LE(at));
    return out;
  }
  if (value.length === 0) return [];
  return (CHARSET_VRS.has(vr) ? decoder : ASCII).decode(value).split('\\').map(withoutInnerNul);
}

/**
 * A NUL inside a value (not in its trailing NUL and SPACE padding) as U+FFFD, the character a
 * decoder puts for bytes it cannot read: PostgreSQL text and jsonb cannot hold a NUL, so a
 * pushed instance whose Accession Number was `AC\0C1` or whose name was `Doe\0^Jane` failed
 * the whole STOW-RS request with 500 (C-STORE: 0110), the request's other instances with it.
 * The value stays unequal to any order's (an order cannot hold a NUL either).
 */
function withoutInnerNul(value: string): string {
  if (!value.includes('\0')) return value;
  const body = withoutTrailing(value, '\0 ');
  return body.replaceAll('\0', '\ufffd') + value.slice(body.length);
}

/** A UI value without its NUL or space padding; several values stay joined by `\`. */
function uidValue(element: WalkedElement | undefined): string {
  return element ? withoutTrailing(ASCII.decode(element.value), '\0 ') : '';
}

function judge(
  parsed: Extract<Parsed, { kind: 'parsed' }>,
  fileSize: number,
  options: InstanceCheckOptions,
  /** What is wrong with encapsulated pixel data's items (fragmentsProblem), if anything. */
  fragments?: string,
): InstanceCheck {
  const d = parsed.dataset;
  const sopClassUid = uidText(d['00080016']);
  const sopInstanceUid = uidText(d['00080018']);
  const studyInstanceUid = uidText(d['0020000D']);
  const seriesInstanceUid = uidText(d['0020000E']);
  // What names a refused instance (the STOW-RS FailedSOPSequence, as UI values; the audit
  // entry; the note of a refused move): only UIDs. A raw value that is none (`../../x`, an
  // escape sequence, markup) was echoed into both.
  const ids = {
    ...(isDicomUid(sopClassUid) ? { sopClassUid } : {}),
    ...(isDicomUid(sopInstanceUid) ? { sopInstanceUid } : {}),
    ...(isDicomUid(studyInstanceUid) ? { studyInstanceUid } : {}),
  };
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
  const sop = options.expectedSop;
  const unpadded = (uid: string) => withoutTrailing(uid, '\0 ');
  if (
    sop &&
    (unpadded(sop.sopClassUid) !== sopClassUid || unpadded(sop.sopInstanceUid) !== sopInstanceUid)
  ) {
    return {
      ok: false,
      failureReason: FAILURE_REASON.dataSetMismatch,
      reason: 'the data set is another SOP Class or Instance than the C-STORE request names',
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
    // Float and double float pixel data are never encapsulated, whatever the syntax.
    const native = NATIVE_SYNTAXES.has(parsed.transferSyntaxUid) || pixel.tag !== '7FE00010';
    if (pixel.length === UNDEFINED_LENGTH) {
      // Encapsulated pixel data (PS3.5 §A.4) is only allowed in compressed syntaxes.
      if (native)
        return {
          ok: false,
          failureReason: FAILURE_REASON.dataSetMismatch,
          reason: 'encapsulated pixel data in an uncompressed transfer syntax',
          ...ids,
        };
      if (fragments)
        return {
          ok: false,
          failureReason: FAILURE_REASON.dataSetMismatch,
          reason: fragments,
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
    accessionNumber: identifier(d['00080050']),
    patientId: identifier(d['00100020']),
    // whole, like the identifiers it qualifies: `HOSPA\HOSP_B` is not the domain HOSPA
    issuerOfPatientId: identifier(d['00100021']),
    ...(parsed.accessionIssuer ? { issuerOfAccessionNumber: parsed.accessionIssuer } : {}),
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

function fail(failureReason: number, reason: string): InstanceCheck {
  return { ok: false, failureReason, reason };
}
