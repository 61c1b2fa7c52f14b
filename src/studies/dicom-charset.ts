/**
 * Decoding of DICOM text values by their Specific Character Set (0008,0005), PS3.5 §6.1 and
 * PS3.3 Table C.12-2 to C.12-5, including the ISO 2022 code extensions Japanese, Korean and
 * Chinese sites send (`\ISO 2022 IR 87`, `ISO 2022 IR 6\ISO 2022 IR 149`, …): each escape
 * sequence switches the G0 (bytes below 0x80) or G1 (bytes from 0xA0) character set until
 * the next one. A term we do not know is read as no term is (UTF-8 when the bytes are valid
 * UTF-8, else ISO 8859-1) rather than refusing the instance: identifiers are plain ASCII in
 * every character set, and a name read wrongly only ever fails an identity check, never
 * passes one.
 */

/** A decoder label (WHATWG Encoding) per defined term, single-byte and multi-byte. */
const TERM_ENCODING: Readonly<Record<string, string>> = {
  '': 'latin1',
  'ISO_IR 6': 'latin1',
  'ISO_IR 100': 'latin1',
  'ISO_IR 101': 'iso-8859-2',
  'ISO_IR 109': 'iso-8859-3',
  'ISO_IR 110': 'iso-8859-4',
  'ISO_IR 144': 'iso-8859-5',
  'ISO_IR 127': 'iso-8859-6',
  'ISO_IR 126': 'iso-8859-7',
  'ISO_IR 138': 'iso-8859-8',
  'ISO_IR 148': 'windows-1254',
  'ISO_IR 203': 'iso-8859-15',
  'ISO_IR 166': 'windows-874',
  'ISO_IR 13': 'shift_jis',
  'ISO_IR 192': 'utf-8',
  GB18030: 'gb18030',
  GBK: 'gbk',
  'ISO 2022 IR 6': 'latin1',
  'ISO 2022 IR 100': 'latin1',
  'ISO 2022 IR 101': 'iso-8859-2',
  'ISO 2022 IR 109': 'iso-8859-3',
  'ISO 2022 IR 110': 'iso-8859-4',
  'ISO 2022 IR 144': 'iso-8859-5',
  'ISO 2022 IR 127': 'iso-8859-6',
  'ISO 2022 IR 126': 'iso-8859-7',
  'ISO 2022 IR 138': 'iso-8859-8',
  'ISO 2022 IR 148': 'windows-1254',
  'ISO 2022 IR 203': 'iso-8859-15',
  'ISO 2022 IR 166': 'windows-874',
  'ISO 2022 IR 13': 'shift_jis',
  'ISO 2022 IR 87': 'iso-2022-jp',
  'ISO 2022 IR 159': 'iso-2022-jp',
  'ISO 2022 IR 149': 'euc-kr',
  'ISO 2022 IR 58': 'gbk',
};

/** ISO 2022 escape sequences (PS3.3 Tables C.12-3, C.12-4): which set each designates. */
const ESCAPES: ReadonlyArray<{ bytes: string; g: 0 | 1 | null; encoding: string }> = [
  { bytes: '\x1b(B', g: 0, encoding: 'latin1' },
  { bytes: '\x1b(J', g: 0, encoding: 'latin1' },
  { bytes: '\x1b$B', g: 0, encoding: 'iso-2022-jp' },
  // Older Japanese writers (not in PS3.3, taken by every iso-2022-jp reader): JIS C 6226-1978
  // kanji by ESC $ @ (the same codes as JIS X 0208 for all but a few characters), half-width
  // katakana in G0 by ESC ( I, and ESC & @ announcing the 1990 revision before ESC $ B.
  { bytes: '\x1b$@', g: 0, encoding: 'iso-2022-jp' },
  { bytes: '\x1b(I', g: 0, encoding: 'jis-x0201-katakana' },
  { bytes: '\x1b&@', g: null, encoding: '' },
  { bytes: '\x1b$(D', g: 0, encoding: 'iso-2022-jp-0212' },
  { bytes: '\x1b)I', g: 1, encoding: 'shift_jis' },
  { bytes: '\x1b-A', g: 1, encoding: 'latin1' },
  { bytes: '\x1b-B', g: 1, encoding: 'iso-8859-2' },
  { bytes: '\x1b-C', g: 1, encoding: 'iso-8859-3' },
  { bytes: '\x1b-D', g: 1, encoding: 'iso-8859-4' },
  { bytes: '\x1b-L', g: 1, encoding: 'iso-8859-5' },
  { bytes: '\x1b-G', g: 1, encoding: 'iso-8859-6' },
  { bytes: '\x1b-F', g: 1, encoding: 'iso-8859-7' },
  { bytes: '\x1b-H', g: 1, encoding: 'iso-8859-8' },
  { bytes: '\x1b-M', g: 1, encoding: 'windows-1254' },
  { bytes: '\x1b-b', g: 1, encoding: 'iso-8859-15' }, // ESC 02/13 06/02 (was ESC b, ISO 2022's LS3)
  { bytes: '\x1b-T', g: 1, encoding: 'windows-874' },
  { bytes: '\x1b$)C', g: 1, encoding: 'euc-kr' },
  { bytes: '\x1b$)A', g: 1, encoding: 'gbk' },
];

/** Terms whose set is designated to G1 (PS3.3 Table C.12-4): Korean and Chinese. */
const G1_MULTIBYTE_TERMS: ReadonlySet<string> = new Set(['ISO 2022 IR 149', 'ISO 2022 IR 58']);

/**
 * The G0 and G1 sets a value starts in, from the first term of (0008,0005): ASCII in G0, the
 * term's set in G1 (ISO 2022 IR 13: JIS X 0201 katakana). A multi-byte first term is not
 * allowed (PS3.3 C.12.1.1.2); a sender that writes IR 87 first gets ASCII until an escape.
 */
function initialSets(term: string): { g0: string; g1: string } {
  const encoding = TERM_ENCODING[term] ?? 'latin1';
  return { g0: 'latin1', g1: encoding === 'iso-2022-jp' ? 'latin1' : encoding };
}

export interface DicomTextDecoder {
  decode(bytes: Uint8Array): string;
}

type Decoder = InstanceType<typeof TextDecoder>;
const decoders = new Map<string, Decoder>();
function decoderOf(encoding: string): Decoder {
  let d = decoders.get(encoding);
  if (!d) {
    d = new TextDecoder(encoding);
    decoders.set(encoding, d);
  }
  return d;
}

/**
 * The defined term (PS3.3 Table C.12-2 to C.12-4) a written term means. Real files spell them
 * with a hyphen, a space or nothing for the underscore (`ISO-IR 192`, `ISO IR 144`,
 * `ISO_IR192`), or give the encoding's own name (`UTF-8`); pydicom reads them so too. Read as
 * unknown terms (Latin-1), a UTF-8 `Müller` became `MÃ¼ller` in the header and in our SR, and
 * a Patient ID beyond ASCII matched no order.
 */
function definedTerm(written: string): string {
  const term = written.trim().toUpperCase();
  if (term in TERM_ENCODING) return term;
  const extension = /^ISO[\s_-]*2022[\s_-]*IR[\s_-]*(\d+)$/.exec(term);
  if (extension) return `ISO 2022 IR ${extension[1]}`;
  const single = /^ISO[\s_-]*IR[\s_-]*(\d+)$/.exec(term);
  if (single) return `ISO_IR ${single[1]}`;
  return /^UTF-?8$/.test(term) ? 'ISO_IR 192' : term;
}

/**
 * The decoder for a data set's (0008,0005) values (backslash-separated terms, already split).
 * One term without code extensions: that character set for the whole value (UTF-8, GB18030,
 * Latin-1, …). Otherwise ISO 2022: escape sequences switch sets as the value goes.
 */
export function dicomTextDecoder(terms: readonly string[]): DicomTextDecoder {
  const normalized = terms.map(definedTerm);
  const first = normalized[0] ?? '';
  const iso2022 = normalized.length > 1 || first.startsWith('ISO 2022');
  if (first === '' && !iso2022) return UNDECLARED;
  if (!iso2022) {
    const encoding = TERM_ENCODING[first];
    // A term we cannot name is read as no term is: UTF-8 when the bytes are, else Latin-1.
    if (!encoding) return UNDECLARED;
    const single = decoderOf(encoding);
    if (!SINGLE_BYTE.test(encoding)) return { decode: (bytes) => single.decode(bytes) };
    return { decode: (bytes) => utf8Despite(bytes) ?? single.decode(bytes) };
  }
  const start = initialSets(first);
  // Korean and Chinese sets are designated to G1 by an escape sequence each value must hold
  // (PS3.5 I.2, K.2); Korean devices often leave it out, their bytes EUC-KR as they stand.
  // Where the first term leaves G1 empty (ASCII only), a byte from 0x80 can only be of the
  // set the other terms name: G1 starts as it. Before, such a name or description was read
  // as Latin-1 (`홍^길동` as `È«^±æµ¿`) and so written into our SR.
  if (first === '' || first === 'ISO 2022 IR 6') {
    const g1 = normalized.slice(1).find((t) => G1_MULTIBYTE_TERMS.has(t));
    if (g1) start.g1 = TERM_ENCODING[g1]!;
  }
  return { decode: (bytes) => decodeIso2022(bytes, start) };
}

const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true });

/** The single-byte sets: every byte is a character, so any bytes decode (wrongly or not). */
const SINGLE_BYTE = /^(latin1|iso-8859-\d+|windows-\d+)$/;

/**
 * A value under a single-byte term (`ISO_IR 100`, `ISO_IR 101`, …) whose bytes are UTF-8 with
 * multi-byte sequences, read as UTF-8: writers that encode UTF-8 whatever they declare (dcmjs,
 * gateways that re-encode and keep the term) are common, while text in an ISO 8859 part is
 * practically never valid UTF-8 (each letter from 0xC0 would need 0x80-0xBF bytes after it;
 * `M\xfcller` is not). Read as declared, `Müller^Jürgen` was `MÃ¼ller^JÃ¼rgen` and the
 * Patient ID `PÄT-78` matched no order: the study was refused as another patient's. The same
 * reading as HL7's `utf8-despite-declared-charset`. Undefined when the bytes are ASCII or no
 * UTF-8.
 */
function utf8Despite(bytes: Uint8Array): string | undefined {
  if (bytes.every((b) => b < 0x80)) return undefined;
  try {
    return STRICT_UTF8.decode(bytes);
  } catch {
    return undefined;
  }
}
/**
 * No Specific Character Set: only the default repertoire (ASCII) is allowed (PS3.5 §6.1.2.2),
 * but devices write what they have. Newer software writes UTF-8 without saying so (the patient
 * `Müller` came back as `MÃ¼ller` in our SR); older European devices write Latin-1, which is
 * almost never valid UTF-8 (`M\xfcller` is not). So: UTF-8 when the bytes are valid UTF-8,
 * else Latin-1, as before.
 */
const UNDECLARED: DicomTextDecoder = {
  decode: (bytes) => {
    // ESC means nothing in ASCII: a value holding one was written in ISO 2022 by a writer
    // that left (0008,0005) out (Japanese text in ISO 2022 IR 87). Its escape sequences were
    // kept as text, `=\x1b$B;3ED\x1b(B^…` for `=山田^太郎`, and so written into our SR.
    if (bytes.includes(0x1b)) return decodeIso2022(bytes, { g0: 'latin1', g1: 'latin1' });
    if (bytes.every((b) => b < 0x80)) return decoderOf('latin1').decode(bytes);
    try {
      return STRICT_UTF8.decode(bytes);
    } catch {
      return decoderOf('latin1').decode(bytes);
    }
  },
};

/**
 * The most escape sequences and runs (a change between bytes below and from 0x80) one value
 * may take. A name switches a dozen times (PS3.5 H.3.2: katakana, kanji, hiragana in three
 * groups); each switch costs a string compare or a decoder call, so a value of escapes or of
 * bytes alternating above and below 0x80 cost seconds per MiB of a blocked event loop (2 MiB
 * 4-12 s; the header may hold 64 MiB), from any C-STORE caller. Past the limit the rest of the
 * value is one U+FFFD: unreadable, never misread, equal to no identifier.
 */
const MAX_SWITCHES = 1024;

function decodeIso2022(bytes: Uint8Array, start: { g0: string; g1: string }): string {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let { g0, g1 } = start;
  const out: string[] = [];
  let at = 0;
  for (let switches = 0; at < buf.length; switches++) {
    if (switches === MAX_SWITCHES) {
      out.push('\ufffd');
      break;
    }
    if (buf[at] === 0x1b) {
      const escape = ESCAPES.find(
        (e) => buf.toString('latin1', at, at + e.bytes.length) === e.bytes,
      );
      if (escape) {
        if (escape.g === 0) g0 = escape.encoding;
        else if (escape.g === 1) g1 = escape.encoding;
        at += escape.bytes.length;
        continue;
      }
      // An escape sequence we do not know is dropped whole, the sets staying as they were:
      // ESC, its intermediate bytes (0x20-0x2F), its final byte (0x30-0x7E) (ISO 2022 §13.1).
      // Before, only the ESC went and the rest (`$@`, `&@`) was read as text.
      at++;
      while (at < buf.length && buf[at]! >= 0x20 && buf[at]! <= 0x2f) at++;
      if (at < buf.length && buf[at]! >= 0x30 && buf[at]! <= 0x7e) at++;
      continue;
    }
    // A run of bytes in one set: G0 below 0x80, G1 from 0x80.
    const high = buf[at]! >= 0x80;
    let end = at;
    while (end < buf.length && buf[end] !== 0x1b && buf[end]! >= 0x80 === high) end++;
    out.push(decodeRun(buf.subarray(at, end), high ? g1 : g0));
    at = end;
  }
  return out.join('');
}

function decodeRun(run: Buffer, encoding: string): string {
  // Two-byte G0 sets (JIS X 0208): the WHATWG ISO-2022-JP decoder reads them after ESC $ B.
  if (encoding === 'iso-2022-jp')
    return decoderOf('iso-2022-jp').decode(Buffer.concat([Buffer.from('\x1b$B'), run]));
  // JIS X 0201 katakana invoked in G0 (ESC ( I): 0x21-0x5F are U+FF61-U+FF9F.
  if (encoding === 'jis-x0201-katakana') {
    let out = '';
    for (const b of run) out += String.fromCharCode(b >= 0x21 && b <= 0x5f ? b + 0xff40 : b);
    return out;
  }
  // JIS X 0212 has no WHATWG decoder: its characters are unreadable here, not misread.
  if (encoding === 'iso-2022-jp-0212') return '\ufffd'.repeat(Math.ceil(run.length / 2));
  return decoderOf(encoding).decode(run);
}
