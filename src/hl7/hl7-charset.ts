import { isAscii as bufferIsAscii } from 'node:buffer';
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
  /** The charset `\Xhh\` escapes are decoded in, when it is not `encoding`. */
  escapeEncoding?: string;
}

/**
 * Character set names that are not table 0211 values but that real senders write in MSH-18:
 * Windows code pages (a Polish or Czech HIS writes `CP1250`, a Western one `CP1252`), the
 * IANA/ISO spellings of the 8859 parts, and DICOM's defined terms (`ISO_IR 100`, PS3.3
 * C.12.1.1.2) from PACS-side engines. Decoded as what they name: read as another charset, or
 * as Latin-1 by default, a Polish name (`Małecka`, CP1250 byte B3) became `Ma³ecka`.
 */
function nonTableLabels(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const cp of [1250, 1251, 1252, 1253, 1254, 1257]) {
    out[`CP${cp}`] = `windows-${cp}`;
    out[`WINDOWS-${cp}`] = `windows-${cp}`;
  }
  const dicom: Record<string, number> = {
    100: 1,
    101: 2,
    109: 3,
    110: 4,
    144: 5,
    127: 6,
    126: 7,
    138: 8,
    148: 9,
    203: 15,
  };
  for (const [ir, part] of Object.entries(dicom)) {
    const label = part === 1 ? 'latin1' : `iso-8859-${part}`;
    out[`ISO-8859-${part}`] = label;
    out[`ISO8859-${part}`] = label;
    out[`ISO_8859-${part}`] = label;
    out[`ISO_IR ${ir}`] = label;
  }
  out['LATIN1'] = 'latin1';
  out['ISO_IR 192'] = 'utf-8';
  return out;
}

/**
 * HL7 table 0211 (v2.5.1, MSH-18) values and the WHATWG decoder label for each that can be
 * decoded here. `UNICODE` (ISO/IEC 10646, kept in the table for backward compatibility) is
 * what senders write for UTF-8 in practice; it is decoded as UTF-8, checked like UTF-8.
 */
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
  'ISO IR14': 'shift_jis', // JIS X 0201 (Roman and half-width katakana)
  'GB 18030-2000': 'gb18030',
  'KS X 1001': 'euc-kr',
  'BIG-5': 'big5',
  UNICODE: 'utf-8',
  'UNICODE UTF-8': 'utf-8',
  // Not in table 0211, but sent by several engines; tolerated without a quirk of its own.
  'UTF-8': 'utf-8',
  UTF8: 'utf-8',
  ...nonTableLabels(),
};

/**
 * In table 0211 but not decodable here: UTF-16/32 cannot travel inside MLLP's byte framing
 * (their code units contain the frame bytes), and the ISO 2022 code extensions of JIS X 0208 /
 * JIS X 0212 (as HL7 uses them) and CNS 11643 have no decoder here.
 * Such a message is decoded as UTF-8/Latin-1 and the quirk says why.
 */
const TABLE_0211_UNDECODABLE = new Set([
  'ISO IR87',
  'ISO IR159',
  'CNS 11643-1992',
  'UNICODE UTF-16',
  'UNICODE UTF-32',
]);

/** The values of table 0211 as the table spells them (TABLE_0211 also holds other spellings). */
const TABLE_0211_VALUES: readonly string[] = [
  'ASCII',
  '8859/1',
  '8859/2',
  '8859/3',
  '8859/4',
  '8859/5',
  '8859/6',
  '8859/7',
  '8859/8',
  '8859/9',
  '8859/15',
  'ISO IR14',
  'GB 18030-2000',
  'KS X 1001',
  'BIG-5',
  'UNICODE',
  'UNICODE UTF-8',
  ...TABLE_0211_UNDECODABLE,
];

/**
 * The MSH-18 (ID, table 0211) that names the character set an MSH-18 value `declared` stands
 * for, as the table spells it: a table value in its case (`unicode utf-8` is UNICODE UTF-8), the
 * table value of a charset a sender named otherwise (`UTF-8`, DICOM `ISO_IR 100` is 8859/1;
 * UTF-8 is `UNICODE` before v2.5, whose table has no `UNICODE UTF-8`), undefined for a charset
 * the table has no value for (`CP1250`), text that names none (`FOO BAR`), and a value the
 * version's table does not hold (`8859/15`, `GB 18030-2000`, `BIG-5` before v2.5). Before, a
 * v2.3/2.4 sender's v2.5 value was echoed in our ACK, a value its version does not define.
 */
export function table0211Value(declared: string, version: string): string | undefined {
  const value = anyTable0211Value(declared, version);
  return value !== undefined && (!BEFORE_2_5.test(version) || !TABLE_0211_SINCE_2_5.has(value))
    ? value
    : undefined;
}

/** Versions whose table 0211 is the v2.3 one (ASCII, 8859/1-9, ISO IR14/87/159, UNICODE). */
const BEFORE_2_5 = /^2\.(0|1|2|3|4)(\.|D?$)/;

/**
 * The values table 0211 gained in v2.5 (v2.5 chapter 2; the German and French v2.5 profiles
 * write 8859/15): a v2.3 or v2.4 message holds none of them in MSH-18.
 */
const TABLE_0211_SINCE_2_5: ReadonlySet<string> = new Set([
  '8859/15',
  'GB 18030-2000',
  'KS X 1001',
  'CNS 11643-1992',
  'BIG-5',
  'UNICODE UTF-8',
  'UNICODE UTF-16',
  'UNICODE UTF-32',
]);

/**
 * Whether `declared` names a value of table 0211 in some version (as the table spells it or
 * otherwise: `UTF-8`, `ISO_IR 203`), whether or not the given version's table holds it.
 */
export function namesTable0211Value(declared: string): boolean {
  return anyTable0211Value(declared, '2.9') !== undefined;
}

function anyTable0211Value(declared: string, version: string): string | undefined {
  const v = declared.trim().toUpperCase();
  // UTF-8 by the version's own value, whatever the sender wrote: a v2.3.1 sender's own
  // `UNICODE UTF-8` was echoed before, a value its version's table does not hold. `UNICODE`
  // stays `UNICODE` (a value of every version's table, deprecated from v2.5).
  const label = TABLE_0211[v];
  if (label === 'utf-8' && v !== 'UNICODE')
    return BEFORE_2_5.test(version) ? 'UNICODE' : 'UNICODE UTF-8';
  if (TABLE_0211_VALUES.includes(v)) return v;
  if (label === undefined) return undefined;
  return TABLE_0211_VALUES.find((name) => TABLE_0211[name] === label);
}

/** True when MSH-18 names a value of table 0211 (decodable or not). */
export function inTable0211(declared: string): boolean {
  const v = declared.trim().toUpperCase();
  return v in TABLE_0211 || TABLE_0211_UNDECODABLE.has(v);
}

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
  return readCharsetRepetitions(bytes)[0] ?? '';
}

/**
 * Every repetition of MSH-18, trimmed: the first is the message's default character set, the
 * others the alternates its ISO 2022 escape sequences switch to (v2.5.1 §2.15.9.18).
 */
function readCharsetRepetitions(bytes: Buffer): string[] {
  const start = hasUtf8Bom(bytes) ? 3 : 0;
  const head = bytes.subarray(start, Math.min(bytes.length, start + 4096)).toString('latin1');
  const mshAt = head.indexOf('MSH');
  if (mshAt === -1 || head.length < mshAt + 8) return [];
  const line = head.slice(mshAt).split(/[\r\n]/, 1)[0];
  const fieldSep = line[3];
  const repSep = line[5] ?? '~';
  // parts[0] = 'MSH', parts[1] = MSH-2; MSH-n is parts[n - 1] because MSH-1 is the separator.
  const parts = line.split(fieldSep);
  const msh18 = parts[17] ?? '';
  return msh18.split(repSep).map((r) => r.trim());
}

/**
 * A Japanese RIS (JAHIS order messages: MSH-18 `~ISO IR87`, MSH-20 `ISO 2022-1994`) sends its
 * kanji as ISO-2022-JP: 7-bit bytes, JIS X 0208 between the escape sequences ESC $ B and
 * ESC ( B. Such bytes are read as ISO-2022-JP before the message is split into fields: the JIS
 * bytes of a kanji are printable ASCII and may be a delimiter (服部 is ESC $ B `I~It`, 五十嵐
 * `8^==Mr`). Read as ASCII, each ESC was a control character and the rest text: `服部^美咲`
 * was stored as `\ufffd$BI`, cut at its `~`, and went so upstream, to FHIR, the ORU and the SR.
 * Text the WHATWG decoder cannot read whole (JIS X 0212, ESC $ ( D; a kanji run cut by a
 * segment end) is read as before.
 */
function iso2022JpDecision(bytes: Buffer, quirks: QuirkCollector): CharsetDecision | undefined {
  if (!bytes.includes(0x1b) || !isAscii(bytes)) return undefined;
  const names = readCharsetRepetitions(bytes);
  if (!names.some((n) => n.toUpperCase() === 'ISO IR87')) return undefined;
  if (decodeBytes(bytes, 'iso-2022-jp').includes('\ufffd')) return undefined;
  const declared = names[0] ?? '';
  quirks.add(
    'charset-escape',
    `MSH-18 "${names.join('~')}" with ISO 2022 escape sequences as bytes; read as ISO-2022-JP`,
  );
  return { declared, encoding: 'iso-2022-jp', known: true };
}

/** Native (node:buffer): a byte-by-byte loop here cost 0.76 s for an 8 MB message. */
function isAscii(bytes: Buffer): boolean {
  return bufferIsAscii(bytes);
}

/** Bytes 0x80-0x9F: C1 control codes in ISO 8859, punctuation and € in Windows-1252. */
function hasC1Bytes(bytes: Buffer): boolean {
  for (const b of bytes) if (b >= 0x80 && b <= 0x9f) return true;
  return false;
}

/** ISO 8859 parts and Windows code pages: one byte per character, every byte a character. */
function isSingleByte(encoding: string): boolean {
  return encoding === 'latin1' || /^(iso-8859-\d+|windows-\d+)$/.test(encoding);
}

export function isValidUtf8(bytes: Buffer): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    return true;
  } catch {
    return false;
  }
}

/**
 * The single-byte reading of bytes that are no UTF-8 and that MSH-18 does not name (none, ASCII,
 * an unknown name, UTF-8 the bytes are not): ISO 8859-1, or Windows-1252 when bytes 0x80-0x9F
 * are there, as for MSH-18 8859/1 (WHATWG reads ISO-8859-1 so). Such bytes are a Windows
 * RIS's ’ “ ” – €; read as ISO 8859-1 they were C1 control codes (O’BRIEN stored as O, U+0092,
 * BRIEN) that went on into our ACK, the ORU, FHIR and the SR, control characters no ST holds.
 */
function singleByteFallback(bytes: Buffer, quirks: QuirkCollector): 'latin1' | 'windows-1252' {
  if (!hasC1Bytes(bytes)) return 'latin1';
  quirks.add(
    'windows-1252-bytes',
    'bytes 0x80-0x9F in text that is no UTF-8; read as Windows-1252 (’ “ ” – €), not C1 controls',
  );
  return 'windows-1252';
}

/** How a fallback is named in a quirk's detail. */
const FALLBACK_NAMES: Readonly<Record<string, string>> = {
  latin1: 'ISO 8859-1',
  'windows-1252': 'Windows-1252',
  'utf-8': 'UTF-8',
};

export function decideCharset(bytes: Buffer, quirks: QuirkCollector): CharsetDecision {
  const jis = iso2022JpDecision(bytes, quirks);
  if (jis !== undefined) return jis;
  const declared = readDeclaredCharset(bytes);
  const mapped = TABLE_0211[declared.toUpperCase()];
  if (declared === '') {
    if (isAscii(bytes)) return { declared, encoding: 'ascii', known: true };
    if (isValidUtf8(bytes)) {
      quirks.add('undeclared-charset-non-ascii', 'MSH-18 empty, bytes decoded as UTF-8');
      return { declared, encoding: 'utf-8', known: true };
    }
    const fallback = singleByteFallback(bytes, quirks);
    quirks.add(
      'undeclared-charset-non-ascii',
      `MSH-18 empty, bytes decoded as ${FALLBACK_NAMES[fallback]}`,
    );
    return { declared, encoding: fallback, known: true };
  }
  if (mapped === undefined) {
    const fallback = isValidUtf8(bytes) ? 'utf-8' : singleByteFallback(bytes, quirks);
    const why = TABLE_0211_UNDECODABLE.has(declared.toUpperCase())
      ? 'is in table 0211 but cannot be decoded here'
      : 'is not a table 0211 value';
    quirks.add('unknown-charset', `MSH-18 "${declared}" ${why}, decoded as ${fallback}`);
    return { declared, encoding: fallback, known: false };
  }
  if (mapped === 'ascii' && !isAscii(bytes)) {
    const fallback = isValidUtf8(bytes) ? 'utf-8' : singleByteFallback(bytes, quirks);
    quirks.add('declared-ascii-non-ascii', `MSH-18 ASCII but 8-bit bytes, decoded as ${fallback}`);
    return { declared, encoding: fallback, known: true };
  }
  if (mapped === 'utf-8' && !isValidUtf8(bytes)) {
    const fallback = singleByteFallback(bytes, quirks);
    quirks.add(
      'invalid-utf8',
      `MSH-18 declares UTF-8 but bytes are not; decoded as ${FALLBACK_NAMES[fallback]}`,
    );
    return { declared, encoding: fallback, known: true };
  }
  if (isSingleByte(mapped) && !isAscii(bytes) && isValidUtf8(bytes)) {
    // An interface engine that re-encodes to UTF-8 and keeps the RIS's MSH-18 (`8859/1`):
    // read as declared, `Müller` (C3 BC) became `MÃ¼ller` in every output. Real Latin-1 text
    // is practically never valid UTF-8 (each 8-bit letter would need 80-BF bytes after it).
    quirks.add(
      'utf8-despite-declared-charset',
      `MSH-18 ${declared} but the bytes are UTF-8 (multi-byte sequences); decoded as UTF-8`,
    );
    return { declared, encoding: 'utf-8', escapeEncoding: mapped, known: true };
  }
  const codePage = CODE_PAGE_OF[mapped];
  if (mapped !== 'latin1' && codePage !== undefined && hasC1Bytes(bytes)) {
    // A Windows RIS writes its code page under the ISO part it names (a Czech or Polish one
    // CP1250 under 8859/2): 0x80-0x9F are letters there (Š Ś Ź š ś ź), C1 control codes in the
    // part, and the code page's other letters sit elsewhere too (ą is B9, š in 8859-2). Read as
    // the part, `Świątek` was stored as U+008C, `wište`, k, and its C1 code went on into our
    // ACK, ORU, FHIR and SR. Those bytes are the sign of the code page: read as it.
    quirks.add(
      'windows-code-page-bytes',
      `MSH-18 ${declared} with bytes 0x80-0x9F; read as ${codePage}, not C1 controls`,
    );
    return { declared, encoding: codePage, known: true };
  }
  if (mapped === 'latin1') {
    quirks.add('latin1-charset', `MSH-18 ${declared}`);
    if (hasC1Bytes(bytes)) {
      // A Windows RIS writes its code page under 8859/1: ’ “ ” – € are 0x80-0x9F, which
      // ISO 8859-1 leaves to C1 control codes no text holds (O’BRIEN was stored as O, U+0092,
      // BRIEN). Read as Windows-1252, as every browser reads ISO-8859-1 (WHATWG Encoding).
      quirks.add(
        'windows-1252-bytes',
        `MSH-18 ${declared} with bytes 0x80-0x9F; read as Windows-1252 (’ “ ” – €), not C1 controls`,
      );
      return { declared, encoding: 'windows-1252', known: true };
    }
  }
  return { declared, encoding: mapped, known: true };
}

/**
 * The Windows code page of each ISO 8859 part, the one a sender declaring the part writes
 * when its bytes hold 0x80-0x9F (C1 control codes in the part, text in the code page).
 */
const CODE_PAGE_OF: Readonly<Record<string, string>> = {
  latin1: 'windows-1252',
  'iso-8859-15': 'windows-1252',
  'iso-8859-2': 'windows-1250',
  'iso-8859-5': 'windows-1251',
  'iso-8859-6': 'windows-1256',
  'iso-8859-7': 'windows-1253',
  'iso-8859-8': 'windows-1255',
  'iso-8859-9': 'windows-1254',
};

/* eslint-disable no-control-regex -- ESC is what the pattern is about */
const ISO2022_JP_DESIGNATION_RUN =
  /(?:\u001b(?:\(B|\(J|\(I|\$@|\$B))+(\u001b(?:\(B|\(J|\(I|\$@|\$B))/g;
/* eslint-enable no-control-regex */

/** Decodes bytes with a WHATWG label; 'ascii' and 'latin1' map byte-for-byte. */
export function decodeBytes(bytes: Buffer, encoding: string): string {
  if (encoding === 'ascii' || encoding === 'latin1') return bytes.toString('latin1');
  if (encoding === 'utf-8') return bytes.toString('utf8');
  if (encoding === 'iso-2022-jp') {
    // Designations with no character between them: only the last counts (the WHATWG decoder
    // takes two in a row for an error; a RIS switching back to ASCII before each delimiter
    // writes ESC ( B ESC $ B around an empty component).
    const switchesOnly = bytes.toString('latin1').replace(ISO2022_JP_DESIGNATION_RUN, '$1');
    return new TextDecoder(encoding).decode(Buffer.from(switchesOnly, 'latin1'));
  }
  return new TextDecoder(encoding).decode(bytes);
}

/**
 * Encodes text for the wire in the charset named by an MSH-18 value (outbound messages, which
 * answer in the charset of the original order). An MSH-18 we do not decode is written as UTF-8.
 */
export function encodeText(
  text: string,
  declaredCharset: string,
  /**
   * The label the order's own message was decoded with: `windows-1252` when its sender wrote
   * code-page punctuation under 8859/1 (quirk windows-1252-bytes). Only to such a sender do ’ “
   * ” – … go back as those bytes; to any other 8859/1 receiver 0x80–0x9F are C1 control codes.
   */
  senderEncoding?: string,
): Buffer {
  const encoding = TABLE_0211[declaredCharset.trim().toUpperCase()] ?? 'utf-8';
  // (the same for a code page read under another ISO part: CP1250 under 8859/2)
  return encodeWith(
    text,
    senderEncoding !== undefined && CODE_PAGE_OF[encoding] === senderEncoding
      ? senderEncoding
      : encoding,
  );
}

/** Character → byte of each single-byte charset we encode, built once from its decoder. */
const SINGLE_BYTE_TABLES = new Map<string, ReadonlyMap<string, number>>();

function singleByteTable(encoding: string): ReadonlyMap<string, number> {
  let table = SINGLE_BYTE_TABLES.get(encoding);
  if (!table) {
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const chars = decodeBytes(all, encoding);
    const map = new Map<string, number>();
    // A byte the charset leaves undefined decodes to U+FFFD: no character maps to it.
    for (let i = 0; i < 256; i += 1) if (chars[i] !== '\uFFFD') map.set(chars[i], i);
    if (encoding === 'latin1') {
      // ISO 8859-1 proper: 0x80–0x9F are C1 control codes, which no text holds. (What a
      // Windows RIS wrote under 8859/1 goes back to it with the windows-1252 table: encodeText.)
      for (let i = 0x80; i <= 0x9f; i += 1) map.delete(chars[i]!);
    }
    table = map;
    SINGLE_BYTE_TABLES.set(encoding, table);
  }
  return table;
}

/** The single-byte charsets (ASCII is written as Latin-1: it only ever held what the sender sent). */
const SINGLE_BYTE = /^(ascii|latin1|iso-8859-\d+|windows-\d+)$/;

/**
 * Encodes text with one of our decoder labels, the inverse of decodeBytes for the charsets
 * that have an encoder here: UTF-8, and the single-byte ISO 8859 parts (a character the
 * charset cannot hold is written `?`). The multi-byte charsets (GB 18030, KS X 1001, BIG-5,
 * ISO IR14) have no encoder here and are written as UTF-8. Callers that declare a charset
 * check first that it is written so (`writesAs`; an ACK's MSH-18: hl7-ack.builder.ts).
 */
export function encodeWith(text: string, encoding: string): Buffer {
  // ASCII is the same bytes in UTF-8 and every ISO 8859 part: the usual ACK needs no table
  // eslint-disable-next-line no-control-regex -- the whole ASCII range
  if (/^[\u0000-\u007f]*$/.test(text)) return Buffer.from(text, 'latin1');
  if (!SINGLE_BYTE.test(encoding)) return Buffer.from(text, 'utf8');
  const table = singleByteTable(encoding === 'ascii' ? 'latin1' : encoding);
  // Composed first (NFC): text prepared on macOS or by many pipelines writes ö as o + U+0308,
  // one byte in 8859-1 but two characters, the second of which it has none for (`mo?glich`).
  const composed = text.normalize('NFC');
  const out: number[] = [];
  for (const ch of composed) {
    const byte = table.get(ch);
    if (byte !== undefined) out.push(byte);
    else for (const c of standIn(ch, table)) out.push(table.get(c) ?? 0x3f);
  }
  return Buffer.from(out);
}

/**
 * What a character a single-byte charset has no byte for is written as, so a clinical text
 * keeps its meaning (`Volumen ≥ 5. Perzentile` read `Volumen ? 5. Perzentile` to a Latin-1
 * RIS): the ASCII spelling of common symbols, else the letter without its accent (ő → o, as
 * NFD decomposes it), else `?`.
 */
const ASCII_STAND_INS: Readonly<Record<string, string>> = {
  '≥': '>=',
  '≤': '<=',
  '≠': '!=',
  '≈': '~',
  '→': '->',
  '←': '<-',
  '↑': '^',
  '↓': 'v',
  '±': '+/-',
  '×': 'x',
  '÷': '/',
  '…': '...',
  '–': '-',
  '—': '-',
  '−': '-',
  '‘': "'",
  '’': "'",
  '‚': "'",
  '′': "'",
  '“': '"',
  '”': '"',
  '„': '"',
  '″': '"',
  '•': '*',
  '·': '.',
  '\u00a0': ' ',
  '€': 'EUR',
  µ: 'u',
  μ: 'u',
  '°': 'deg',
  '²': '2',
  '³': '3',
  ł: 'l',
  Ł: 'L',
  đ: 'd',
  Đ: 'D',
  ø: 'o',
  Ø: 'O',
  ß: 'ss',
};

function standIn(ch: string, table: ReadonlyMap<string, number>): string {
  const ascii = ASCII_STAND_INS[ch];
  if (ascii !== undefined) return ascii;
  const base = ch.normalize('NFD').replace(/\p{M}+/gu, '');
  if (base !== ch && base.length > 0 && [...base].every((c) => table.has(c))) return base;
  return '?';
}

export function charsetLabel(declared: string): string | undefined {
  return TABLE_0211[declared.trim().toUpperCase()];
}

/**
 * True when encodeText writes `text` in the bytes the MSH-18 value `declared` names: UTF-8
 * always; ASCII only for text that is ASCII (its table has no byte above 0x7F, and a byte we
 * wrote there would be read as something else or refused); an ISO 8859 part or code page for
 * any text (a character it cannot hold is written `?`, as encodeWith says). Not the
 * multi-byte charsets (GB 18030, KS X 1001, BIG-5, ISO IR14): encodeWith has no encoder for
 * them and writes UTF-8, which a receiver reading MSH-18 decodes as other characters.
 */
export function writesAs(declared: string, text: string): boolean {
  const label = charsetLabel(declared);
  if (label === undefined) return false;
  if (label === 'utf-8') return true;
  // eslint-disable-next-line no-control-regex -- the whole ASCII range
  if (label === 'ascii') return /^[\u0000-\u007f]*$/.test(text);
  return SINGLE_BYTE.test(label);
}
