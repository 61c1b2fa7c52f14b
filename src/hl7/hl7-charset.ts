import { QuirkCollector } from './hl7-quirk';

/**
 * Character sets named in MSH-18 (HL7 table 0211, v2.5.1 section 2.15.9.18) that we decode.
 * The first repetition of MSH-18 is the character set of the whole message; MSH-18 empty means
 * the default, 7-bit ASCII. Real senders often leave it empty and send UTF-8 or Latin-1, so we
 * decode by content then and record the quirk.
 */
export type Hl7Charset = 'ascii' | 'latin1' | 'utf8' | 'iso-8859-n';

export interface CharsetDecision {
  /** The MSH-18 value as received (first repetition), or '' when absent. */
  declared: string;
  /** WHATWG encoding label used to decode the bytes. */
  encoding: string;
  known: boolean;
}

/** Table 0211 values and their WHATWG decoder labels. */
const TABLE_0211: Readonly<Record<string, string>> = {
  ASCII: 'ascii',
  '8859/1': 'latin1',
  '8859/2': 'iso-8859-2',
  '8859/3': 'iso-8859-3',
  '8859/4': 'iso-8859-4',
  '8859/5': 'iso-8859-5',
  '8859/6': 'iso-8859-6',
  '8859/7': 'iso-8859-7',
  '8859/8': 'iso-8859-8',
  '8859/9': 'iso-8859-9',
  '8859/15': 'iso-8859-15',
  'UNICODE UTF-8': 'utf-8',
  // Not in table 0211, but sent by several engines; tolerated without a quirk of its own.
  'UTF-8': 'utf-8',
  UTF8: 'utf-8',
};

const UTF8_BOM = Buffer.from([0xef, 0xbb, 0xbf]);

export function hasUtf8Bom(bytes: Buffer): boolean {
  return bytes.length >= 3 && bytes.subarray(0, 3).equals(UTF8_BOM);
}

/**
 * Reads MSH-18 from the raw bytes without decoding them: the MSH segment up to MSH-18 is
 * ASCII in every character set of table 0211 (single-byte or UTF-8), so a byte-wise (latin1)
 * view finds it safely.
 */
export function readDeclaredCharset(bytes: Buffer): string {
  const start = hasUtf8Bom(bytes) ? 3 : 0;
  const head = bytes.subarray(start, Math.min(bytes.length, start + 4096)).toString('latin1');
  const mshAt = head.indexOf('MSH');
  if (mshAt === -1 || head.length < mshAt + 8) return '';
  const line = head.slice(mshAt).split(/[\r\n]/, 1)[0];
  const fieldSep = line[3];
  const repSep = line[5] ?? '~';
  // parts[0] = 'MSH', parts[1] = MSH-2; MSH-n is parts[n - 1] because MSH-1 is the separator.
  const parts = line.split(fieldSep);
  const msh18 = parts[17] ?? '';
  return msh18.split(repSep)[0].trim();
}

function isAscii(bytes: Buffer): boolean {
  for (const b of bytes) if (b > 0x7f) return false;
  return true;
}

function isValidUtf8(bytes: Buffer): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    return true;
  } catch {
    return false;
  }
}

export function decideCharset(bytes: Buffer, quirks: QuirkCollector): CharsetDecision {
  const declared = readDeclaredCharset(bytes);
  const mapped = TABLE_0211[declared.toUpperCase()];
  if (declared === '') {
    if (isAscii(bytes)) return { declared, encoding: 'ascii', known: true };
    if (isValidUtf8(bytes)) {
      quirks.add('undeclared-charset-non-ascii', 'MSH-18 empty, bytes decoded as UTF-8');
      return { declared, encoding: 'utf-8', known: true };
    }
    quirks.add('undeclared-charset-non-ascii', 'MSH-18 empty, bytes decoded as ISO 8859-1');
    return { declared, encoding: 'latin1', known: true };
  }
  if (mapped === undefined) {
    const fallback = isValidUtf8(bytes) ? 'utf-8' : 'latin1';
    quirks.add('unknown-charset', `MSH-18 "${declared}" not supported, decoded as ${fallback}`);
    return { declared, encoding: fallback, known: false };
  }
  if (mapped === 'ascii' && !isAscii(bytes)) {
    const fallback = isValidUtf8(bytes) ? 'utf-8' : 'latin1';
    quirks.add('declared-ascii-non-ascii', `MSH-18 ASCII but 8-bit bytes, decoded as ${fallback}`);
    return { declared, encoding: fallback, known: true };
  }
  if (mapped === 'utf-8' && !isValidUtf8(bytes)) {
    quirks.add('invalid-utf8', 'MSH-18 declares UTF-8 but bytes are not; decoded as ISO 8859-1');
    return { declared, encoding: 'latin1', known: true };
  }
  if (mapped === 'latin1') quirks.add('latin1-charset', 'MSH-18 8859/1');
  return { declared, encoding: mapped, known: true };
}

/** Decodes bytes with a WHATWG label; 'ascii' and 'latin1' map byte-for-byte. */
export function decodeBytes(bytes: Buffer, encoding: string): string {
  if (encoding === 'ascii' || encoding === 'latin1') return bytes.toString('latin1');
  if (encoding === 'utf-8') return bytes.toString('utf8');
  return new TextDecoder(encoding).decode(bytes);
}

/**
 * Encodes text for the wire in the charset named by an MSH-18 value (used for ACKs and
 * outbound messages, which answer in the charset of the inbound message).
 */
export function encodeText(text: string, declaredCharset: string): Buffer {
  const mapped = TABLE_0211[declaredCharset.trim().toUpperCase()];
  if (mapped === 'latin1') return Buffer.from(text, 'latin1');
  return Buffer.from(text, 'utf8');
}

export function charsetLabel(declared: string): string | undefined {
  return TABLE_0211[declared.trim().toUpperCase()];
}
