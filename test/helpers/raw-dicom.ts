/**
 * DICOM Part 10 files written byte by byte (explicit VR little endian, PS3.5 §7.1.2), for
 * the shapes a library writer will not produce: values in ISO 2022 code extensions with
 * their escape sequences exactly as PS3.5 Annexes H–K give them, several values in a VM 1
 * identifier, sequences nested as deep as a test needs. All identities are synthetic.
 */
import { deflateRawSync } from 'node:zlib';
import { generateUid } from './dicom-factory';

const LONG_LENGTH_VRS = new Set(['OB', 'OW', 'SQ', 'UN', 'UT']);
const SECONDARY_CAPTURE = '1.2.840.10008.5.1.4.1.1.7';
export const JPEG_2000_LOSSLESS = '1.2.840.10008.1.2.4.90';

/**
 * (7FE0,0010) OB of undefined length: an empty Basic Offset Table item, one fragment (a 2 × 2,
 * 8-bit, one-component J2K codestream: SOC, SIZ, EOC) and the sequence delimiter.
 */
function encapsulatedJ2k(): Buffer {
  const siz = Buffer.alloc(2 + 2 + 38 + 3);
  siz.writeUInt16BE(0xff51, 0); // SIZ
  siz.writeUInt16BE(41, 2); // Lsiz: 38 + 3 × components
  siz.writeUInt32BE(2, 6); // Xsiz
  siz.writeUInt32BE(2, 10); // Ysiz
  siz.writeUInt32BE(2, 22); // XTsiz
  siz.writeUInt32BE(2, 26); // YTsiz
  siz.writeUInt16BE(1, 38); // Csiz
  siz.writeUInt8(7, 40); // Ssiz: 8 bits unsigned
  siz.writeUInt8(1, 41); // XRsiz
  siz.writeUInt8(1, 42); // YRsiz
  const codestream = Buffer.concat([
    Buffer.from([0xff, 0x4f]),
    siz.subarray(0, 43),
    Buffer.from([0xff, 0xd9]),
  ]);
  const fragment =
    codestream.length % 2 ? Buffer.concat([codestream, Buffer.from([0])]) : codestream;
  const item = (value: Buffer) => {
    const header = Buffer.from([0xfe, 0xff, 0x00, 0xe0, 0, 0, 0, 0]);
    header.writeUInt32LE(value.length, 4);
    return Buffer.concat([header, value]);
  };
  return Buffer.concat([
    Buffer.from([0xe0, 0x7f, 0x10, 0x00]),
    Buffer.from('OB', 'latin1'),
    Buffer.from([0, 0, 0xff, 0xff, 0xff, 0xff]),
    item(Buffer.alloc(0)),
    item(fragment),
    Buffer.from([0xfe, 0xff, 0xdd, 0xe0, 0, 0, 0, 0]),
  ]);
}

/** One element; strings are written as Latin-1 bytes (escape sequences included). */
export function element(group: number, elem: number, vr: string, value: Buffer | string): Buffer {
  let v = typeof value === 'string' ? Buffer.from(value, 'latin1') : value;
  if (v.length % 2 === 1)
    v = Buffer.concat([v, Buffer.from([vr === 'UI' || vr === 'OB' ? 0 : 0x20])]);
  const long = LONG_LENGTH_VRS.has(vr);
  const header = Buffer.alloc(long ? 12 : 8);
  header.writeUInt16LE(group, 0);
  header.writeUInt16LE(elem, 2);
  header.write(vr, 4, 'latin1');
  if (long) header.writeUInt32LE(v.length, 8);
  else header.writeUInt16LE(v.length, 6);
  return Buffer.concat([header, v]);
}

const us = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(n);
  return b;
};

/** `depth` undefined-length sequences, each in an undefined-length item, around `inner`. */
export function nestedSequences(depth: number, inner: Buffer): Buffer {
  const open = Buffer.from([
    ...[0x08, 0x00, 0x15, 0x11, 0x53, 0x51, 0, 0, 0xff, 0xff, 0xff, 0xff], // (0008,1115) SQ
    ...[0xfe, 0xff, 0x00, 0xe0, 0xff, 0xff, 0xff, 0xff], // item, undefined length
  ]);
  const close = Buffer.from([
    ...[0xfe, 0xff, 0x0d, 0xe0, 0, 0, 0, 0], // item delimiter
    ...[0xfe, 0xff, 0xdd, 0xe0, 0, 0, 0, 0], // sequence delimiter
  ]);
  return Buffer.concat([
    Buffer.concat(Array.from({ length: depth }, () => open)),
    inner,
    Buffer.concat(Array.from({ length: depth }, () => close)),
  ]);
}

/**
 * A vendor's private sequence (0009,1010) of undefined length whose VR a router that did not
 * know it relabelled UN, its one item still in explicit VR (as the vendor wrote it), with its
 * private creator (0009,0010): for `beforePatient`.
 */
export function relabelledUnSequence(): Buffer {
  const undefinedLength = [0xff, 0xff, 0xff, 0xff];
  return Buffer.concat([
    element(0x0009, 0x0010, 'LO', 'ACME 1.0'),
    Buffer.from([0x09, 0x00, 0x10, 0x10, 0x55, 0x4e, 0, 0, ...undefinedLength]),
    Buffer.from([0xfe, 0xff, 0x00, 0xe0, ...undefinedLength]),
    element(0x0009, 0x1011, 'LO', 'VENDOR DATA'),
    element(0x0009, 0x1012, 'US', Buffer.from([1, 0])),
    Buffer.from([0xfe, 0xff, 0x0d, 0xe0, 0, 0, 0, 0]),
    Buffer.from([0xfe, 0xff, 0xdd, 0xe0, 0, 0, 0, 0]),
  ]);
}

export interface RawInstance {
  bytes: Buffer;
  studyInstanceUid: string;
  sopInstanceUid: string;
}

/**
 * A 2 × 2, 8-bit secondary capture image. `charset`, `accession`, `patientId` and
 * `patientName` are written as given (raw bytes); `beforePatient` goes between (0008,0060)
 * and (0010,0010), where a (0008,1115) sequence belongs in ascending tag order.
 */
export function rawInstance(o: {
  studyInstanceUid?: string;
  charset?: string;
  accession?: string;
  patientId?: string;
  patientName?: string;
  beforePatient?: Buffer;
  /**
   * Deflated Explicit VR Little Endian (PS3.5 §A.5): the data set deflated (raw RFC 1951),
   * as `dcmconv +td` writes it; `extra` goes at the end of the data set before deflating
   * (e.g. a long run of zeros in a trailing OB element, for a deflate bomb).
   */
  deflated?: { extra?: Buffer };
  /**
   * JPEG 2000 Image Compression (Lossless Only), 1.2.840.10008.1.2.4.90 (PS3.5 §A.4.4): the
   * pixel data encapsulated (empty Basic Offset Table, one fragment holding a J2K codestream's
   * SOC, SIZ and EOC markers), as a PACS holding compressed images stores it. Orthanc, without
   * a JPEG 2000 codec, cannot decompress it.
   */
  jpeg2000?: boolean;
  /** SOP Class UID (0008,0016) instead of secondary capture. */
  sopClassUid?: string;
}): RawInstance {
  const studyInstanceUid = o.studyInstanceUid ?? generateUid();
  const sopInstanceUid = generateUid();
  const dataset = Buffer.concat([
    ...(o.charset !== undefined ? [element(0x0008, 0x0005, 'CS', o.charset)] : []),
    element(0x0008, 0x0016, 'UI', o.sopClassUid ?? SECONDARY_CAPTURE),
    element(0x0008, 0x0018, 'UI', sopInstanceUid),
    element(0x0008, 0x0020, 'DA', '20261124'),
    element(0x0008, 0x0030, 'TM', '101500'),
    ...(o.accession !== undefined ? [element(0x0008, 0x0050, 'SH', o.accession)] : []),
    element(0x0008, 0x0060, 'CS', 'OT'),
    o.beforePatient ?? Buffer.alloc(0),
    ...(o.patientName !== undefined ? [element(0x0010, 0x0010, 'PN', o.patientName)] : []),
    ...(o.patientId !== undefined ? [element(0x0010, 0x0020, 'LO', o.patientId)] : []),
    element(0x0020, 0x000d, 'UI', studyInstanceUid),
    element(0x0020, 0x000e, 'UI', generateUid()),
    element(0x0028, 0x0002, 'US', us(1)),
    element(0x0028, 0x0004, 'CS', 'MONOCHROME2'),
    element(0x0028, 0x0010, 'US', us(2)),
    element(0x0028, 0x0011, 'US', us(2)),
    element(0x0028, 0x0100, 'US', us(8)),
    element(0x0028, 0x0101, 'US', us(8)),
    element(0x0028, 0x0102, 'US', us(7)),
    element(0x0028, 0x0103, 'US', us(0)),
    o.jpeg2000 ? encapsulatedJ2k() : element(0x7fe0, 0x0010, 'OB', Buffer.from([0, 64, 128, 255])),
    ...(o.deflated?.extra ? [element(0xfffc, 0xfffc, 'OB', o.deflated.extra)] : []),
  ]);
  const meta = Buffer.concat([
    element(0x0002, 0x0001, 'OB', Buffer.from([0, 1])),
    element(0x0002, 0x0002, 'UI', o.sopClassUid ?? SECONDARY_CAPTURE),
    element(0x0002, 0x0003, 'UI', sopInstanceUid),
    element(
      0x0002,
      0x0010,
      'UI',
      o.deflated
        ? '1.2.840.10008.1.2.1.99'
        : o.jpeg2000
          ? JPEG_2000_LOSSLESS
          : '1.2.840.10008.1.2.1',
    ),
    element(0x0002, 0x0012, 'UI', '2.25.229466438390858364353440958343118717227'),
  ]);
  const groupLength = Buffer.alloc(4);
  groupLength.writeUInt32LE(meta.length);
  return {
    studyInstanceUid,
    sopInstanceUid,
    bytes: Buffer.concat([
      Buffer.alloc(128),
      Buffer.from('DICM'),
      element(0x0002, 0x0000, 'UL', groupLength),
      meta,
      o.deflated ? deflateRawSync(dataset) : dataset,
    ]),
  };
}
