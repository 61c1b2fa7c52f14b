/**
 * One linear pass over the top level of a DICOM data set (PS3.5 §7): element headers are
 * read, values are skipped, sequences are stepped through without being decoded, and the
 * top-level elements asked for are handed back as byte ranges. Nothing here recurses or
 * copies, so the cost is the number of element headers, whatever the nesting: a general
 * parser that decodes every sequence item (dcmjs scans each undefined-length item for its
 * end and copies it, once per level) turns a few thousand nested sequences into seconds of
 * a blocked event loop and gigabytes of copies.
 */

export type WalkSyntax = 'implicit-le' | 'explicit-le' | 'explicit-be';

export interface WalkedElement {
  /** Explicit VR as written; undefined in implicit VR. */
  vr?: string;
  value: Buffer;
}

export type WalkResult =
  | { kind: 'need-more'; reason: string }
  | {
      /**
       * Only when `bytes` is not the whole file: a top-level element not asked for runs past
       * the bytes given. Its value is never needed: the walk goes on at `resumeAt` (an offset
       * in `bytes`' coordinates, possibly past its end) with the file's next bytes.
       */
      kind: 'skip';
      elements: Map<string, WalkedElement>;
      resumeAt: number;
    }
  | { kind: 'invalid'; reason: string }
  | {
      kind: 'walked';
      /** The top-level elements asked for, by tag as 8 upper-case hex digits. */
      elements: Map<string, WalkedElement>;
      /** The top-level stop tag met (its tag, declared length and where its value starts). */
      stop?: { tag: string; length: number; valueOffset: number };
    };

const UNDEFINED_LENGTH = 0xffffffff;
/** VRs with a 2-byte reserved field and a 32-bit length in explicit VR (PS3.5 Table 7.1-1). */
export const LONG_LENGTH_VRS: ReadonlySet<string> = new Set([
  'OB',
  'OD',
  'OF',
  'OL',
  'OV',
  'OW',
  'SQ',
  'SV',
  'UC',
  'UN',
  'UR',
  'UT',
  'UV',
]);
/** Every VR of PS3.5 Table 6.2-1. */
const VRS: ReadonlySet<string> = new Set([
  'AE',
  'AS',
  'AT',
  'CS',
  'DA',
  'DS',
  'DT',
  'FL',
  'FD',
  'IS',
  'LO',
  'LT',
  'OB',
  'OD',
  'OF',
  'OL',
  'OV',
  'OW',
  'PN',
  'SH',
  'SL',
  'SQ',
  'SS',
  'ST',
  'SV',
  'TM',
  'UC',
  'UI',
  'UL',
  'UN',
  'UR',
  'US',
  'UT',
  'UV',
]);

/**
 * Whether the items of a sequence read as UN (undefined length) at `at` hold explicit VR
 * elements: the first element of the first item names a VR where implicit VR has the low bytes
 * of its length. PS3.5 §6.2.2 (CP-246) makes such items implicit VR little endian, but a
 * router or archive that does not know a vendor's private sequence relabels it UN and keeps
 * the items as they were written, in explicit VR; read as implicit, the VR and length made one
 * huge length, and the instance was refused as cut short. pydicom reads the items as explicit
 * when they look so (DCMTK on an option, dcmdump -ui). Explicit VR little endian data sets only.
 */
function unItemsLookExplicit(bytes: Buffer, at: number, syntax: WalkSyntax): boolean {
  if (syntax !== 'explicit-le' || at + 16 > bytes.length) return false;
  if (bytes.readUInt16LE(at) !== 0xfffe || bytes.readUInt16LE(at + 2) !== 0xe000) return false;
  const first = at + 8;
  if (bytes.readUInt16LE(first) === 0xfffe) return false;
  return VRS.has(bytes.toString('latin1', first + 4, first + 6));
}

/** Sequences and items open at once (each sequence and each item counts one). */
export const MAX_NESTING = 128;

type Frame = {
  kind: 'sequence' | 'item';
  implicit: boolean;
  /** A top-level sequence of undefined length asked for: its items are handed back whole. */
  capture?: { key: string; vr?: string; start: number };
};

/**
 * Walks `bytes` from `start` in `syntax`. `complete` says whether `bytes` is the whole file:
 * when it is not, running out of bytes asks for more rather than refusing, and a top-level
 * element not asked for that runs past the bytes is stepped over (`skip`) rather than read.
 * Stops at the first top-level tag of `stopTags` (Pixel Data), reporting its length, without
 * reading its value. A top-level sequence asked for is handed back as the bytes of its items
 * (whatever its length form), to be read with `walkFirstItem`. `inItem`: `bytes` is the
 * content of a sequence item of undefined length, which ends at its item delimiter.
 */
export function walkDataSet(
  bytes: Buffer,
  start: number,
  syntax: WalkSyntax,
  wanted: ReadonlySet<string>,
  complete: boolean,
  stopTags: readonly string[] = [],
  inItem = false,
): WalkResult {
  const le = syntax !== 'explicit-be';
  const u16 = (at: number) => (le ? bytes.readUInt16LE(at) : bytes.readUInt16BE(at));
  const u32 = (at: number) => (le ? bytes.readUInt32LE(at) : bytes.readUInt32BE(at));
  const short = (reason: string): WalkResult =>
    complete ? { kind: 'invalid', reason } : { kind: 'need-more', reason };
  // Tags compared as numbers: no string is made for the elements stepped over.
  const wantedTags = new Set([...wanted].map((t) => parseInt(t, 16)));
  const stopAt = new Set(stopTags.map((t) => parseInt(t, 16)));
  const isUpper = (at: number) => bytes[at]! >= 0x41 && bytes[at]! <= 0x5a;
  const elements = new Map<string, WalkedElement>();
  const stack: Frame[] = [];
  let at = start;
  for (;;) {
    if (at >= bytes.length) {
      if (stack.length === 0) {
        return complete
          ? { kind: 'walked', elements }
          : { kind: 'need-more', reason: 'header not complete' };
      }
      return short('the data set ends inside a sequence');
    }
    if (at + 8 > bytes.length) return short('an element header is cut short');
    const frame = stack[stack.length - 1];
    const group = u16(at);
    const element = u16(at + 2);
    if (group === 0xfffe) {
      // Item (E000), item delimiter (E00D), sequence delimiter (E0DD): PS3.5 §7.5.
      const length = u32(at + 4);
      at += 8;
      if (element === 0xe00d && !frame && inItem) return { kind: 'walked', elements };
      if (element === 0xe000 && frame?.kind === 'sequence') {
        if (length === UNDEFINED_LENGTH) {
          if (stack.length >= MAX_NESTING)
            return { kind: 'invalid', reason: `sequences nested deeper than ${MAX_NESTING}` };
          stack.push({ kind: 'item', implicit: frame.implicit });
        } else {
          // A defined-length item is skipped whole: nothing inside it is read.
          if (at + length > bytes.length) return short('a sequence item is cut short');
          at += length;
        }
      } else if (element === 0xe00d && frame?.kind === 'item') {
        stack.pop();
      } else if (element === 0xe0dd && frame?.kind === 'sequence') {
        stack.pop();
        if (frame.capture) {
          const { key, vr: sqVr, start: from } = frame.capture;
          if (elements.has(key)) return { kind: 'invalid', reason: appearsTwice(key) };
          elements.set(key, { vr: sqVr, value: bytes.subarray(from, at - 8) });
        }
      } else {
        return { kind: 'invalid', reason: 'a sequence item or delimiter out of place' };
      }
      continue;
    }
    if (frame?.kind === 'sequence') {
      return { kind: 'invalid', reason: 'an element inside a sequence but outside an item' };
    }
    const implicit = frame ? frame.implicit : syntax === 'implicit-le';
    let vr: string | undefined;
    let length: number;
    let valueOffset: number;
    if (implicit) {
      length = u32(at + 4);
      valueOffset = at + 8;
    } else {
      if (!isUpper(at + 4) || !isUpper(at + 5))
        return { kind: 'invalid', reason: 'an element has no valid VR' };
      vr = bytes.toString('latin1', at + 4, at + 6);
      if (LONG_LENGTH_VRS.has(vr)) {
        if (at + 12 > bytes.length) return short('an element header is cut short');
        length = u32(at + 8);
        valueOffset = at + 12;
      } else {
        length = u16(at + 6);
        valueOffset = at + 8;
      }
    }
    const tag = ((group << 16) | element) >>> 0;
    if (!frame && stopAt.has(tag)) {
      const stopTag = tag.toString(16).toUpperCase().padStart(8, '0');
      return { kind: 'walked', elements, stop: { tag: stopTag, length, valueOffset } };
    }
    if (length === UNDEFINED_LENGTH) {
      // A sequence, a UN holding one in implicit VR (PS3.5 §6.2.2), or encapsulated pixel
      // data of an icon (items of fragments): all read as items up to a sequence delimiter.
      if (stack.length >= MAX_NESTING)
        return { kind: 'invalid', reason: `sequences nested deeper than ${MAX_NESTING}` };
      const key = tag.toString(16).toUpperCase().padStart(8, '0');
      stack.push({
        kind: 'sequence',
        implicit: implicit || (vr === 'UN' && !unItemsLookExplicit(bytes, valueOffset, syntax)),
        ...(!frame && wantedTags.has(tag) ? { capture: { key, vr, start: valueOffset } } : {}),
      });
      at = valueOffset;
      continue;
    }
    const end = valueOffset + length;
    if (end > bytes.length) {
      // A large value nobody reads (an encapsulated STL or PDF, a vendor's raw data in a
      // private OB, float pixel data): stepped over without its bytes. Reading it whole made
      // every file with more than 64 MiB before its Pixel Data (or without Pixel Data) refused.
      if (!frame && !complete && !wantedTags.has(tag))
        return { kind: 'skip', elements, resumeAt: end };
      return short('an element is longer than the bytes that follow it');
    }
    if (!frame && wantedTags.has(tag)) {
      const key = tag.toString(16).toUpperCase().padStart(8, '0');
      if (elements.has(key)) return { kind: 'invalid', reason: appearsTwice(key) };
      elements.set(key, { vr, value: bytes.subarray(valueOffset, end) });
    }
    at = end;
  }
}

/**
 * The elements asked for of a sequence's first item, from the bytes of its items (as the walk
 * hands back a sequence asked for, or an element of VR SQ of defined length). Items of a
 * sequence read as UN are implicit VR little endian (PS3.5 §6.2.2). Undefined when the value
 * holds no whole first item: a sequence that cannot be read tells nothing.
 */
export function walkFirstItem(
  items: Buffer,
  syntax: WalkSyntax,
  vr: string | undefined,
  wanted: ReadonlySet<string>,
): Map<string, WalkedElement> | undefined {
  const itemSyntax: WalkSyntax =
    vr === 'UN' && !unItemsLookExplicit(items, 0, syntax) ? 'implicit-le' : syntax;
  if (items.length < 8) return undefined;
  const be = itemSyntax === 'explicit-be';
  const group = be ? items.readUInt16BE(0) : items.readUInt16LE(0);
  const element = be ? items.readUInt16BE(2) : items.readUInt16LE(2);
  const length = be ? items.readUInt32BE(4) : items.readUInt32LE(4);
  if (group !== 0xfffe || element !== 0xe000) return undefined;
  const defined = length !== UNDEFINED_LENGTH;
  if (defined && 8 + length > items.length) return undefined;
  const content = defined ? items.subarray(8, 8 + length) : items.subarray(8);
  const walked = walkDataSet(content, 0, itemSyntax, wanted, true, [], !defined);
  return walked.kind === 'walked' ? walked.elements : undefined;
}

/**
 * An attribute read twice at the top level (PS3.5 §7.1: at most once). Which value counts is
 * the reader's choice: DCMTK (and a PACS built on it) keeps the first, pydicom the last. For
 * an Accession Number, Patient ID or UID that would be one identity checked here and another
 * read upstream, so the data set is not taken.
 */
export function appearsTwice(key: string): string {
  return `attribute (${key.slice(0, 4)},${key.slice(4)}) appears twice`;
}

/**
 * Where the File Meta Information ends when it has no group length (0002,0000): the first
 * element past `start` whose group is not 0002, stepping over each element of explicit VR
 * little endian (PS3.10 §7.1). PS3.10 makes the group length Type 1, but older writers left
 * it out (pydicom keeps `no_meta_group_length.dcm` as a test file; DCMTK and pydicom read
 * such files), and the element lengths tell where the group ends just as well.
 */
export function metaGroupEnd(
  bytes: Buffer,
  start: number,
  complete: boolean,
): { kind: 'end'; at: number } | { kind: 'need-more' | 'invalid'; reason: string } {
  const short = complete ? ('invalid' as const) : ('need-more' as const);
  let at = start;
  while (at + 2 <= bytes.length && bytes.readUInt16LE(at) === 0x0002) {
    if (at + 8 > bytes.length) return { kind: short, reason: 'file meta information is cut short' };
    const vr = bytes.toString('latin1', at + 4, at + 6);
    if (!/^[A-Z]{2}$/.test(vr)) return { kind: 'invalid', reason: 'an element has no valid VR' };
    let end: number;
    if (LONG_LENGTH_VRS.has(vr)) {
      if (at + 12 > bytes.length)
        return { kind: short, reason: 'file meta information is cut short' };
      const length = bytes.readUInt32LE(at + 8);
      if (length === UNDEFINED_LENGTH)
        return { kind: 'invalid', reason: 'an undefined length in the file meta information' };
      end = at + 12 + length;
    } else {
      end = at + 8 + bytes.readUInt16LE(at + 6);
    }
    if (end > bytes.length) return { kind: short, reason: 'file meta information is cut short' };
    at = end;
  }
  if (at + 2 > bytes.length && !complete)
    return { kind: 'need-more', reason: 'file meta information is cut short' };
  return { kind: 'end', at };
}
