import { LONG_LENGTH_VRS } from './dicom-dataset-walk';

/**
 * Group 0002 elements at the start of a C-STORE data set. PS3.10 §7.1 keeps the File Meta
 * Information out of a data set (PS3.7 §9.3.1.1: the data set is sent without it), but some
 * old senders and archives send it there. Written behind our own File Meta Information, those
 * elements were read as part of it: in implicit VR their 32-bit lengths read as VRs ("an
 * element has no valid VR"), in explicit VR a second Transfer Syntax UID. They come first in
 * ascending tag order, so the SCP drops that leading run before the data set reaches disk.
 */
export type DataSetEncoding = 'implicit-le' | 'explicit-le' | 'explicit-be';

const UNDEFINED_LENGTH = 0xffffffff;

/**
 * Where the leading group 0002 elements of `head` (the data set's first bytes) end:
 * `{ end, elements }` once the next element's group is seen (or `complete`, the whole data
 * set), `need-more` while one of them or the next group is still cut short. An element of
 * undefined length ends the run (no File Meta element has one).
 */
export function leadingMetaElements(
  head: Buffer,
  encoding: DataSetEncoding,
  complete: boolean,
): { end: number; elements: number } | 'need-more' {
  const be = encoding === 'explicit-be';
  const u16 = (at: number) => (be ? head.readUInt16BE(at) : head.readUInt16LE(at));
  const u32 = (at: number) => (be ? head.readUInt32BE(at) : head.readUInt32LE(at));
  let at = 0;
  let elements = 0;
  for (;;) {
    if (at + 2 > head.length) return complete ? { end: at, elements } : 'need-more';
    if (u16(at) !== 0x0002) return { end: at, elements };
    if (at + 8 > head.length) return complete ? { end: at, elements } : 'need-more';
    let next: number;
    if (encoding === 'implicit-le') {
      const length = u32(at + 4);
      if (length === UNDEFINED_LENGTH) return { end: at, elements };
      next = at + 8 + length;
    } else {
      const vr = head.toString('latin1', at + 4, at + 6);
      if (!/^[A-Z]{2}$/.test(vr)) return { end: at, elements };
      if (LONG_LENGTH_VRS.has(vr)) {
        if (at + 12 > head.length) return complete ? { end: at, elements } : 'need-more';
        const length = u32(at + 8);
        if (length === UNDEFINED_LENGTH) return { end: at, elements };
        next = at + 12 + length;
      } else {
        next = at + 8 + u16(at + 6);
      }
    }
    if (next > head.length) return complete ? { end: at, elements } : 'need-more';
    at = next;
    elements++;
  }
}
