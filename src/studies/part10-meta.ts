import { withoutTrailing } from '../common/padding';

/** The File Meta Information we write in front of a data set we received (PS3.10 §7.1). */
const IMPLEMENTATION_CLASS_UID = '2.25.204338316126848574361283911066133718812';
const IMPLEMENTATION_VERSION = 'IAA_SCP_1';

/**
 * 128-byte preamble, `DICM`, then the File Meta Information group (PS3.10 §7.1) in explicit
 * VR little endian, with its group length first.
 */
export function fileMetaInformation(
  sopClassUid: string,
  sopInstanceUid: string,
  transferSyntaxUid: string,
): Buffer {
  const elements = Buffer.concat([
    element(0x0001, 'OB', Buffer.from([0x00, 0x01])),
    element(0x0002, 'UI', uid(sopClassUid)),
    element(0x0003, 'UI', uid(sopInstanceUid)),
    element(0x0010, 'UI', uid(transferSyntaxUid)),
    element(0x0012, 'UI', uid(IMPLEMENTATION_CLASS_UID)),
    element(0x0013, 'SH', Buffer.from(IMPLEMENTATION_VERSION.padEnd(10, ' '), 'latin1')),
  ]);
  const length = Buffer.alloc(4);
  length.writeUInt32LE(elements.length);
  return Buffer.concat([
    Buffer.alloc(128),
    Buffer.from('DICM', 'latin1'),
    element(0x0000, 'UL', length),
    elements,
  ]);
}

/** UIDs are padded to even length with a NUL (PS3.5 §6.2, UI). */
function uid(value: string): Buffer {
  const v = withoutTrailing(value, '\0');
  return Buffer.from(v.length % 2 === 0 ? v : `${v}\0`, 'latin1');
}

function element(elementNumber: number, vr: 'OB' | 'UI' | 'SH' | 'UL', value: Buffer): Buffer {
  const long = vr === 'OB'; // OB has 2 reserved bytes and a 32-bit length (PS3.5 §7.1.2)
  const head = Buffer.alloc(long ? 12 : 8);
  head.writeUInt16LE(0x0002, 0);
  head.writeUInt16LE(elementNumber, 2);
  head.write(vr, 4, 'latin1');
  if (long) head.writeUInt32LE(value.length, 8);
  else head.writeUInt16LE(value.length, 6);
  return Buffer.concat([head, value]);
}
