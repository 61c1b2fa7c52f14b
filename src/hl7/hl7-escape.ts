import { decodeBytes, isValidUtf8 } from './hl7-charset';
import type { FormattingMode } from './hl7-formatting';
import { QuirkCollector, type Hl7QuirkCode } from './hl7-quirk';

/** The delimiters of one message (MSH-1 and MSH-2; HL7 v2.5.1 chapter 2, message delimiters). */
export interface Hl7Delimiters {
  field: string;
  component: string;
  repetition: string;
  escape: string;
  subcomponent: string;
  /** v2.7+ truncation character (fifth MSH-2 character), if present. */
  truncation?: string;
}

export const DEFAULT_DELIMITERS: Hl7Delimiters = {
  field: '|',
  component: '^',
  repetition: '~',
  escape: '\\',
  subcomponent: '&',
};

export interface UnescapeContext {
  delimiters: Hl7Delimiters;
  /** WHATWG label of the message charset, for \Xhh\ hexadecimal data. */
  encoding: string;
  quirks?: QuirkCollector;
  /** Location used in quirk details, e.g. `OBR-13`. */
  location?: string;
  /**
   * What formatting commands mean here (hl7-formatting.ts): line breaks (FT and identifiers,
   * the default) or, in any other text, one space.
   */
  formatting?: FormattingMode;
}

/**
 * Replaces escape sequences (HL7 v2.5.1 section 2.7) in one leaf value (a subcomponent, or a
 * component/field without deeper structure):
 * - \F\ \S\ \T\ \R\ \E\ and \P\ (truncation, v2.7) give back the delimiter;
 * - \Xhh..\ is hexadecimal data, decoded as bytes in the message charset;
 * - \.br\ \.sp\ (formatted text, FT) become line breaks; \H\ \N\ (highlighting) and
 *   the other formatting commands (.fi .nf .in .ti .sk .ce) carry no text and are dropped;
 *   outside FT (`formatting: 'text'`, hl7-formatting.ts) \.br\ and \.sp\ are one space;
 * - \Cxxyy\ and \Mxxyy[zz]\ (section 2.7.5) are ISO 2022 escape sequences written as HL7
 *   escapes: they switch the character set and carry no character. The ones of ISO-2022-JP
 *   (`\M2442\` JIS X 0208, `\C2842\` ASCII, ...; MSH-18 `ISO IR87`) are decoded with it, so
 *   `\M2442\;3ED\C2842\` is 山田; any other is dropped and the text around it kept;
 * - \Zdddd\ (locally defined) has a meaning only its sender knows: dropped;
 * - each of these is recorded as a quirk (the raw message keeps them); before, they were
 *   kept as text and a stored name read `\M2442\;3ED\C2842\` upstream, in FHIR and in the ORU;
 * - anything unknown is kept literally and recorded as a quirk, so no data is lost.
 */
export function unescapeValue(raw: string, ctx: UnescapeContext): string {
  const esc = ctx.delimiters.escape;
  if (esc === '' || !raw.includes(esc)) return raw;
  const state: EscapeState = { switched: false, noted: new Set(), sequences: new Map() };
  const out = unescapeSequences(raw, ctx, state);
  // only a \C..\ or \M..\ switches (an ESC sent as \X1B\ is a control character, as before)
  return state.switched ? applyCharsetSwitches(out, ctx) : out;
}

/** ESC (0x1B): what a \Cxxyy\ or \Mxxyyzz\ stands for, held in the text until it is decoded. */
const ISO2022_ESC = '\u001b';
/* eslint-disable no-control-regex -- ESC is what these patterns are about */
const ISO2022_DESIGNATION = /\u001b[\u0020-\u002f]+[\u0030-\u007e]/g;
const ISO2022_DESIGNATION_RUN =
  /(?:\u001b[\u0020-\u002f]+[\u0030-\u007e])+(\u001b[\u0020-\u002f]+[\u0030-\u007e])/g;
/** An ESC that does not start one of the designations the WHATWG ISO-2022-JP decoder reads
 * (ESC ( B, ESC ( J, ESC ( I, ESC $ @, ESC $ B). */
const NOT_ISO2022_JP = /\u001b(?!\(B|\(J|\(I|\$@|\$B)/;
const NOT_SEVEN_BIT = /[^\u0000-\u007f]/;
/* eslint-enable no-control-regex */

/**
 * Text holding the ISO 2022 escapes of \C..\ / \M..\: decoded as ISO-2022-JP when every one is
 * of that encoding and the text is 7-bit (the bytes a JIS sender wrote), else without them.
 * Linear in the text (no list of the switches: a value of a million of them is one pass).
 */
function applyCharsetSwitches(text: string, ctx: UnescapeContext): string {
  if (!NOT_SEVEN_BIT.test(text) && !NOT_ISO2022_JP.test(text)) {
    ctx.quirks?.add(
      'charset-escape',
      `${ctx.location ?? '?'}: ISO 2022 escapes read as ISO-2022-JP`,
    );
    // Designations with no character between them: only the last one counts (the WHATWG
    // decoder takes two in a row for an error, and `\C2842\\M2442\` is two switches in a row)
    const switchesOnly = text.replace(ISO2022_DESIGNATION_RUN, '$1');
    const decoded = new TextDecoder('iso-2022-jp').decode(Buffer.from(switchesOnly, 'latin1'));
    if (!decoded.includes('\ufffd')) return decoded;
  }
  ctx.quirks?.add('charset-escape', `${ctx.location ?? '?'}: character set escape dropped`);
  return text.replace(ISO2022_DESIGNATION, '').replaceAll(ISO2022_ESC, '');
}

/** What one value's escapes have done so far: a charset switch seen, quirks already noted. */
interface EscapeState {
  switched: boolean;
  /** The last sequence was a line command outside FT: one space, if text is on both sides. */
  space?: boolean;
  noted: Set<string>;
  /** The ISO 2022 escape of each \C..\ / \M..\ met (a value repeats the same few). */
  sequences: Map<string, string>;
}

/** A quirk once per value and kind (a million unknown sequences are one quirk, one lookup). */
function noteOnce(state: EscapeState, ctx: UnescapeContext, code: Hl7QuirkCode, detail: string) {
  const key = `${code} ${detail}`;
  if (state.noted.has(key)) return;
  state.noted.add(key);
  ctx.quirks?.add(code, `${ctx.location ?? '?'}: ${detail}`);
}

function unescapeSequences(raw: string, ctx: UnescapeContext, state: EscapeState): string {
  const esc = ctx.delimiters.escape;
  let out = '';
  // raw[copied..] is not in `out` yet: text and sequences kept literally are copied in one
  // slice when the next replacement comes (a million unknown sequences are one copy)
  let copied = 0;
  let i = 0;
  while (i < raw.length) {
    const next = raw.indexOf(esc, i);
    if (next === -1) break;
    i = next;
    const close = raw.indexOf(esc, i + 1);
    if (close === -1) {
      // A lone escape character: keep it (some senders do not escape backslashes).
      noteOnce(state, ctx, 'unknown-escape-sequence', 'unterminated escape');
      break;
    }
    let replaced = replaceEscape(raw.slice(i + 1, close), ctx, state);
    if (state.space) {
      state.space = false;
      const before = i > copied ? raw[i - 1] : out[out.length - 1];
      const after = raw[close + 1];
      const blank = (c: string | undefined) => c === undefined || /\s/.test(c);
      replaced = blank(before) || blank(after) ? '' : ' ';
    }
    if (replaced === undefined) {
      // The sequence may be patient text: only its location goes into the audited quirk.
      noteOnce(state, ctx, 'unknown-escape-sequence', 'kept literally');
    } else {
      if (i > copied) out += raw.slice(copied, i);
      if (replaced !== '') out += replaced;
      copied = close + 1;
    }
    i = close + 1;
  }
  return copied === 0 ? raw : copied < raw.length ? out + raw.slice(copied) : out;
}

/**
 * \Xhh..\ bytes above 0x7F in the message charset (section 2.7.7). In a UTF-8 message, bytes
 * that are no UTF-8 are the Latin-1 the original sender escaped (`Ger\XE4\t`: a RIS writing
 * 8859/1, whose feed an interface engine re-encoded to UTF-8 and relabelled `UNICODE UTF-8`
 * without touching its escapes): read as ISO 8859-1 (Windows-1252, as WHATWG reads it), and
 * said in a quirk (the location only: the bytes are patient text). Before, each such byte
 * was U+FFFD, the letter lost without a word, in the order, upstream, the ORU and the SR.
 */
function decodeHexData(bytes: Buffer, ctx: UnescapeContext, state: EscapeState): string {
  if (ctx.encoding === 'utf-8' && !isValidUtf8(bytes))
    noteOnce(state, ctx, 'hex-data-not-utf8', '\\X..\\ bytes are no UTF-8; read as ISO 8859-1');
  return hexDataText(bytes, ctx.encoding);
}

/** The text hexadecimal data stands for in a message read with `encoding` (decodeHexData). */
function hexDataText(bytes: Buffer, encoding: string): string {
  if (encoding !== 'utf-8' || isValidUtf8(bytes)) return decodeBytes(bytes, encoding);
  return decodeBytes(bytes, 'windows-1252');
}

/**
 * Line breaks one \.sp<n>\ gives at most: the count is the sender's text, and
 * `\.sp99999999\` (13 bytes) was read as 99,999,999 line breaks (five of them in OBR-13:
 * a 500 MB text, the event loop held 11 s, then AR 207; a larger count a RangeError).
 */
const MAX_SPACE_LINES = 10;

function replaceEscape(body: string, ctx: UnescapeContext, state: EscapeState): string | undefined {
  const d = ctx.delimiters;
  switch (body) {
    case 'F':
      return d.field;
    case 'S':
      return d.component;
    case 'T':
      return d.subcomponent;
    case 'R':
      return d.repetition;
    case 'E':
      return d.escape;
    case 'P':
      return d.truncation ?? '#';
    case 'H':
    case 'N':
      ctx.quirks?.add(
        'formatting-escape',
        `${ctx.location ?? '?'}: \\${body}\\ highlighting dropped`,
      );
      return '';
    default:
      break;
  }
  // Dispatched on the code letter, so an unknown sequence (`\Q\` a million times) is not tried
  // against every pattern: 7.5 MB of them held the event loop 2-3 s.
  const code = body.charAt(0);
  if (code !== 'X' && code !== 'C' && code !== 'M' && code !== 'Z' && code !== '.')
    return undefined;
  if (code === 'X' && /^X([0-9A-Fa-f]{2})+$/.test(body)) {
    // bytes below 0x80 are the same characters in every charset decoded here (all
    // ASCII-compatible): no Buffer for the common \X0D\ \X0A\ \X7C\
    let ascii = '';
    for (let k = 1; k < body.length; k += 2) {
      const byte = parseInt(body.slice(k, k + 2), 16);
      if (byte > 0x7f) return decodeHexData(Buffer.from(body.slice(1), 'hex'), ctx, state);
      ascii += String.fromCharCode(byte);
    }
    return ascii;
  }
  // \Cxxyy\ single-byte, \Mxxyy[zz]\ multi-byte character set escape (section 2.7.5): the
  // ISO 2022 escape sequence ESC xx yy [zz], read once the whole value is known
  if (
    (code === 'C' && /^C[0-9A-Fa-f]{4}$/.test(body)) ||
    (code === 'M' && /^M[0-9A-Fa-f]{4}([0-9A-Fa-f]{2})?$/.test(body))
  ) {
    state.switched = true;
    let seq = state.sequences.get(body);
    if (seq === undefined) {
      seq = ISO2022_ESC;
      for (let k = 1; k < body.length; k += 2) {
        seq += String.fromCharCode(parseInt(body.slice(k, k + 2), 16));
      }
      state.sequences.set(body, seq);
    }
    return seq;
  }
  if (code === 'Z' && /^Z[^\s]*$/.test(body)) {
    noteOnce(state, ctx, 'local-escape', 'locally defined escape dropped');
    return '';
  }
  const fmt = code === '.' ? /^\.(br|sp|fi|nf|in|ti|sk|ce)([+-]?\d*)$/.exec(body) : null;
  if (fmt) {
    const [, command, arg] = fmt;
    if (ctx.formatting === 'text') {
      // §2.7.6: formatting commands are for FT; in a name or a code a line is one space
      const line = command === 'br' || command === 'sp';
      noteOnce(
        state,
        ctx,
        'formatting-escape',
        `\\.${command}\\ outside formatted text (FT) ${line ? 'read as a space' : 'dropped'}`,
      );
      state.space = line;
      return '';
    }
    if (command === 'br') return '\n';
    if (command === 'sp') {
      const lines = Math.max(1, Number(arg || '1'));
      if (lines <= MAX_SPACE_LINES) return '\n'.repeat(lines);
      ctx.quirks?.add(
        'formatting-escape',
        `${ctx.location ?? '?'}: \\.sp\\ of more than ${MAX_SPACE_LINES} lines read as ${MAX_SPACE_LINES}`,
      );
      return '\n'.repeat(MAX_SPACE_LINES);
    }
    ctx.quirks?.add('formatting-escape', `${ctx.location ?? '?'}: \\.${command}\\ dropped`);
    return '';
  }
  return undefined;
}

/**
 * Escapes a plain value so that it can be written into any field position (section 2.7):
 * the escape character first, then every delimiter; CR and LF (which would end the segment)
 * and every other control character (C0 and DEL: ST/TX/FT hold printable text only, and a VT
 * or FS would end the MLLP frame that carries the message) as hexadecimal data (\Xhh\).
 */
export function escapeValue(value: string, delimiters: Hl7Delimiters = DEFAULT_DELIMITERS): string {
  const d = delimiters;
  let out = '';
  for (const ch of value) {
    if (ch === d.escape) out += `${d.escape}E${d.escape}`;
    else if (ch === d.field) out += `${d.escape}F${d.escape}`;
    else if (ch === d.component) out += `${d.escape}S${d.escape}`;
    else if (ch === d.subcomponent) out += `${d.escape}T${d.escape}`;
    else if (ch === d.repetition) out += `${d.escape}R${d.escape}`;
    else if (d.truncation !== undefined && ch === d.truncation) out += `${d.escape}P${d.escape}`;
    else if (ch < ' ' || ch === '\u007f')
      out += `${d.escape}X${ch.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}${d.escape}`;
    else out += ch;
  }
  return out;
}

/**
 * A plain value escaped (as escapeValue) and cut to at most `max` characters of the encoded
 * text, for a field with a maximum length (v2.5.1 section 2.5.5.2: the length counts the
 * field as encoded, escape sequences included). The cut falls between whole escape sequences
 * and whole characters: never inside `\F\` (a cut one reads as a stray escape character) nor
 * between the halves of a surrogate pair (a lone half is no character in any charset). The
 * bound is in UTF-16 units, so a reader counting either code points or units finds it within.
 */
export function escapeWithin(
  value: string,
  max: number,
  delimiters: Hl7Delimiters = DEFAULT_DELIMITERS,
): string {
  let out = '';
  for (const ch of value) {
    const piece = escapeValue(ch, delimiters);
    if (out.length + piece.length > max) break;
    out += piece;
  }
  return out;
}

/**
 * Rewrites the hexadecimal data (\Xhh..\, section 2.7.7) of an escaped value for a message in
 * another character set: \Xhh\ names bytes of the message's own charset, so `\XE9\` is é in a
 * Latin-1 or ASCII message and no character at all in a UTF-8 one. A sequence holding a byte
 * above 0x7F is decoded with `fromEncoding` (the label the value was read with) and written
 * as the character it stands for, escaped again; the rest of the text is left as it was
 * (escape sequences are paired left to right, as unescapeValue reads them).
 */
export function recodeHexData(
  raw: string,
  fromEncoding: string,
  delimiters: Hl7Delimiters = DEFAULT_DELIMITERS,
  /** Sequences the receiving charset reads as they were read here: left as they are. */
  keep: (bytes: Buffer) => boolean = () => false,
): string {
  const esc = delimiters.escape;
  if (esc === '' || !raw.includes(`${esc}X`)) return raw;
  let out = '';
  let i = 0;
  while (i < raw.length) {
    const open = raw.indexOf(esc, i);
    const close = open === -1 ? -1 : raw.indexOf(esc, open + 1);
    if (close === -1) break;
    const body = raw.slice(open + 1, close);
    out += raw.slice(i, open);
    const hex = /^X((?:[0-9A-Fa-f]{2})+)$/.exec(body)?.[1];
    const bytes = hex === undefined ? undefined : Buffer.from(hex, 'hex');
    out +=
      bytes && bytes.some((b) => b > 0x7f) && !keep(bytes)
        ? escapeValue(hexDataText(bytes, fromEncoding), delimiters)
        : raw.slice(open, close + 1);
    i = close + 1;
  }
  return out + raw.slice(i);
}

/**
 * Rewrites raw field text written with one message's delimiters (`from`) for a message with
 * other delimiters (`to`), keeping its structure (section 2.5: repetitions, components,
 * subcomponents) and meaning: the delimiter escapes \F\ \S\ \T\ \R\ \E\ and \P\ (v2.7
 * truncation) name `from`'s characters and are written as those characters escaped for `to`;
 * a character that is a delimiter of `to` but text in `from` (a sender with `!` as component
 * separator writing `^`) is escaped; the other sequences (\Xhh\, \.br\, \H\, \Zxx\ ...) are
 * kept with `to`'s escape character; control characters become \Xhh\. With equal delimiters
 * the text is returned as it was, but for control characters and a lone escape character
 * (read as text, written \E\). One pass, linear in the text.
 */
export function transcodeRaw(raw: string, from: Hl7Delimiters, to: Hl7Delimiters): string {
  const structural: Record<string, string> = {
    [from.repetition]: to.repetition,
    [from.component]: to.component,
    [from.subcomponent]: to.subcomponent,
  };
  // Structure first, then escapes (v2.5.1 §2.7: an escape sequence lies within one leaf, as
  // Hl7Segment reads it): `MUELLER\^HANS\` is two components, each ending in a lone escape
  // character. Before, the two backslashes were paired across the `^` as one sequence, and the
  // ORU named the patient `MUELLER\^HANS\` (one family name, no given name).
  let out = '';
  let start = 0;
  for (let i = 0; i <= raw.length; i += 1) {
    const mapped = i < raw.length ? structural[raw[i]] : '';
    if (mapped === undefined) continue;
    out += transcodeLeaf(raw.slice(start, i), from, to) + mapped;
    start = i + 1;
  }
  return out;
}

/** One leaf (no repetition, component or subcomponent separator of `from`) for transcodeRaw. */
function transcodeLeaf(raw: string, from: Hl7Delimiters, to: Hl7Delimiters): string {
  const named: Record<string, string> = {
    F: from.field,
    S: from.component,
    T: from.subcomponent,
    R: from.repetition,
    E: from.escape,
    P: from.truncation ?? '#',
  };
  const delimitersOfTo = new Set([
    to.field,
    to.component,
    to.repetition,
    to.escape,
    to.subcomponent,
  ]);
  let out = '';
  let i = 0;
  while (i < raw.length) {
    const ch = raw[i];
    if (ch === from.escape) {
      const close = raw.indexOf(from.escape, i + 1);
      if (close === -1) {
        out += escapeValue(raw.slice(i), to);
        break;
      }
      const body = raw.slice(i + 1, close);
      const literal = named[body];
      if (literal !== undefined) out += escapeValue(literal, to);
      else if ([...body].some((c) => delimitersOfTo.has(c) || c < ' ' || c === '\u007f'))
        out += escapeValue(raw.slice(i, close + 1), to);
      else out += `${to.escape}${body}${to.escape}`;
      i = close + 1;
      continue;
    }
    out += escapeValue(ch, to);
    i += 1;
  }
  return out;
}

/** A formatting command (§2.7.6): highlighting, or a line command and its argument. */
const FORMATTING_COMMAND = /^(?:H|N|\.(br|sp|fi|nf|in|ti|sk|ce)[+-]?\d*)$/;

/**
 * Raw field text (escaped with `delimiters`) with its formatting commands written as the
 * intake reads them outside FT (v2.5.1 §2.7.6, `formatting: 'text'` of unescapeValue): \.br\
 * and \.sp\ one space (none at either end of a leaf, none beside a space), \H\ \N\ and the
 * other commands nothing. Every other sequence and character is left as it is. For a field
 * we echo whose type is not FT (a name, an address): a RIS that renders the commands would
 * show a line break inside a patient's name, and one validating the field refuses them.
 */
export function flattenFormatting(
  raw: string,
  delimiters: Hl7Delimiters = DEFAULT_DELIMITERS,
): string {
  const esc = delimiters.escape;
  if (esc === '' || !raw.includes(esc)) return raw;
  const structural = new Set([
    delimiters.repetition,
    delimiters.component,
    delimiters.subcomponent,
  ]);
  const blank = (c: string | undefined) => c === undefined || structural.has(c) || /\s/.test(c);
  let out = '';
  let i = 0;
  while (i < raw.length) {
    const ch = raw[i]!;
    if (ch !== esc) {
      out += ch;
      i += 1;
      continue;
    }
    // an escape sequence lies within one leaf (§2.7): a separator before the closing
    // character means this one is a lone escape character, kept as it is
    let close = i + 1;
    while (close < raw.length && raw[close] !== esc && !structural.has(raw[close]!)) close += 1;
    if (close >= raw.length || raw[close] !== esc) {
      out += raw.slice(i, close);
      i = close;
      continue;
    }
    const command = FORMATTING_COMMAND.exec(raw.slice(i + 1, close));
    if (!command) {
      out += raw.slice(i, close + 1);
    } else if (command[1] === 'br' || command[1] === 'sp') {
      if (!blank(out[out.length - 1]) && !blank(raw[close + 1]) && out !== '') out += ' ';
    }
    i = close + 1;
  }
  return out;
}
