import { CONTROL_ID_MAX_CHARS } from './hl7-echo-lengths';
import { Hl7Error } from './hl7.error';
import { DEFAULT_DELIMITERS, Hl7Delimiters } from './hl7-escape';
import { QuirkCollector } from './hl7-quirk';

// What parseHl7 reads before any field: the delimiters the header declares (MSH-1, MSH-2)
// and the segment terminator (v2.5.1 chapter 2: CR; LF and CRLF are tolerated as quirks).

/** A character that may serve as a delimiter: printable ASCII, not a letter, digit or space. */
const DELIMITER_CHAR = /^[!-/:-@[-`{-~]$/;

export function readDelimiters(mshLine: string, quirks: QuirkCollector): Hl7Delimiters {
  const field = mshLine[3];
  if (field === undefined || !DELIMITER_CHAR.test(field)) {
    throw new Hl7Error(
      'HL7_BAD_ENCODING_CHARACTERS',
      'MSH-1 field separator missing or invalid',
      1,
    );
  }
  const end = mshLine.indexOf(field, 4);
  const enc = end === -1 ? mshLine.slice(4) : mshLine.slice(4, end);
  // MSH-2 (v2.5.1 §2.15.9.2; v2.7 added a fifth, the truncation character): four or five
  // distinct printable non-alphanumeric characters, none equal to the field separator.
  const problem = encodingCharactersProblem(enc);
  if (problem !== undefined) {
    throw new Hl7Error(
      'HL7_BAD_ENCODING_CHARACTERS',
      `MSH-2 encoding characters invalid: ${problem}; MSH-2 holds four or five distinct characters (component, repetition, escape, subcomponent, v2.7+ truncation; usually ^~\\&), no letter, digit, space or control character`,
      2,
    );
  }
  const delimiters: Hl7Delimiters = {
    field,
    component: enc[0],
    repetition: enc[1],
    escape: enc[2],
    subcomponent: enc[3],
  };
  if (enc.length >= 5) {
    // v2.7 added the truncation character as a fifth encoding character (MSH-2).
    delimiters.truncation = enc[4];
    quirks.add('truncation-character', `MSH-2 "${enc}"`);
  }
  const std = DEFAULT_DELIMITERS;
  if (
    field !== std.field ||
    delimiters.component !== std.component ||
    delimiters.repetition !== std.repetition ||
    delimiters.escape !== std.escape ||
    delimiters.subcomponent !== std.subcomponent
  ) {
    quirks.add('custom-encoding-characters', `MSH-1 "${field}" MSH-2 "${enc}"`);
  }
  return delimiters;
}

/** A character as the answer names it: itself when printable ASCII, else its code (U+0009). */
function shown(c: string): string {
  return /^[!-~]$/.test(c)
    ? `"${c}"`
    : `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
}

/**
 * What is wrong with MSH-2, said specifically (the sender has to fix its header, and "invalid"
 * alone does not say how): missing, too short or long, which character is not allowed, which
 * one is repeated (MSH-2 ends at the field separator, so it cannot hold it). A doubled escape character (`^~\\&`, a header
 * written from a string literal) is named as such. Undefined when MSH-2 is valid.
 */
function encodingCharactersProblem(enc: string): string | undefined {
  if (enc === '') return 'MSH-2 is empty';
  // only the head is looked at (and named): MSH-2 runs to the next field separator, however far
  const chars = [...enc.slice(0, 9)];
  const described =
    chars.map((c) => (/^[ -~]$/.test(c) ? c : '?')).join('') + (enc.length > 8 ? '…' : '');
  if (/^[A-Za-z0-9]{2}/.test(enc))
    return `"${described}" is text, not encoding characters: MSH-2 seems to be missing (MSH-1 followed by MSH-3?)`;
  if (enc.length < 4) return `"${described}" has ${enc.length} character(s), four are needed`;
  if (chars.length > 5) return `"${described}" has ${enc.length} characters, at most five`;
  for (let i = 0; i < chars.length; i += 1) {
    const c = chars[i];
    if (!DELIMITER_CHAR.test(c)) {
      const kind = /[A-Za-z]/.test(c)
        ? 'a letter'
        : /\d/.test(c)
          ? 'a digit'
          : c === ' '
            ? 'a space'
            : 'not a printable ASCII character';
      return `character ${i + 1} ${shown(c)} of "${described}" is ${kind}`;
    }
    const first = chars.indexOf(c);
    if (first < i) {
      const doubledEscape = c === '\\' && i === 3 && first === 2;
      return `${shown(c)} is both character ${first + 1} and ${i + 1} of "${described}"${doubledEscape ? ' (the escape character written twice, as a string literal would)' : ''}`;
    }
  }
  return undefined;
}

/**
 * The text without the NUL padding some senders put after the last segment (a C string's
 * terminator counted in the length, a fixed-size buffer): NULs, and the white space among
 * them, at the very end. A backward scan, linear in the padding. Without this, a padding
 * that followed the last segment separator was read as a stray line and joined to the last
 * field: OBR-4.3 `LN` became `LN\n\0\0` and a known procedure was refused AE 103.
 */
function withoutNulPadding(text: string, quirks: QuirkCollector): string {
  let end = text.length;
  let nuls = 0;
  for (; end > 0; end -= 1) {
    const c = text.charCodeAt(end - 1);
    if (c === 0) nuls += 1;
    else if (c !== 0x0d && c !== 0x0a && c !== 0x20 && c !== 0x09) break;
  }
  if (nuls === 0) return text;
  quirks.add('nul-padding', `${nuls} NUL byte(s) after the last segment dropped`);
  return `${text.slice(0, end)}\r`;
}

/** Splits into segment lines, tolerating CR, LF, CRLF and mixes; records what it saw. */
export function splitSegments(input: string, quirks: QuirkCollector): string[] {
  const text = withoutNulPadding(input, quirks);
  const crlf = (text.match(/\r\n/g) ?? []).length;
  const cr = (text.match(/\r(?!\n)/g) ?? []).length;
  const lf = (text.match(/(?<!\r)\n/g) ?? []).length;
  const kinds = [crlf > 0, cr > 0, lf > 0].filter(Boolean).length;
  if (kinds > 1) quirks.add('mixed-separators', `CRLF ${crlf}, CR ${cr}, LF ${lf}`);
  else if (crlf > 0) quirks.add('crlf-separators', `${crlf} segment separators are CRLF`);
  else if (lf > 0) quirks.add('lf-separators', `${lf} segment separators are LF`);

  const lines = text.split(/\r\n|\r|\n/);
  const out: string[] = [];
  let blanks = 0;
  for (const line of lines) {
    if (line.trim() === '') {
      blanks += 1;
      continue;
    }
    out.push(line);
  }
  // A trailing separator after the last segment is normal; only inner blank lines are a quirk.
  const trailing = lines.length > 0 && lines[lines.length - 1].trim() === '' ? 1 : 0;
  if (blanks - trailing > 0)
    quirks.add('blank-lines', `${blanks - trailing} blank line(s) skipped`);
  return out;
}

/**
 * MSH-10 of a message whose header could not be parsed (e.g. unusable MSH-2), found by the
 * field separator alone, so that even an AR for such a message echoes the control ID in
 * MSA-2 (v2.5.1 §2.9.2) and the sender can match it. Only the first line is read, and only
 * printable ASCII up to ST's 199 characters is returned; undefined when not found.
 */
export function salvageControlId(raw: Buffer | string): string | undefined {
  const head = (
    typeof raw === 'string' ? raw.slice(0, 4096) : raw.subarray(0, 4096).toString('latin1')
  )
    .replace(/^\uFEFF|^\u00EF\u00BB\u00BF/, '')
    .trimStart();
  if (!head.startsWith('MSH')) return undefined;
  const separator = head[3];
  if (separator === undefined || !DELIMITER_CHAR.test(separator)) return undefined;
  const line = head.split(/[\r\n]/, 1)[0];
  const fields = line.split(separator);
  // MSH-10 follows MSH-9, the message type (`ORM^O01`: code, then a trigger such as O01): a header
  // without MSH-2 (`MSH|RIS|HOSP|…`) has every field one place early, and reading the tenth
  // place echoed its MSH-11 (`P`) in MSA-2 as if it were the control ID.
  const messageType = /^[A-Z]{3}(?:[^A-Za-z0-9 ][A-Z]\d{2}(?:[^A-Za-z0-9 ]|$)|$)/;
  const at = !messageType.test(fields[8] ?? '') && messageType.test(fields[7] ?? '') ? 8 : 9;
  const value = fields[at];
  if (!value || !/^[\x20-\x7e]+$/.test(value)) return undefined;
  return value.slice(0, CONTROL_ID_MAX_CHARS);
}
