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
    throw new Hl7Error('HL7_BAD_ENCODING_CHARACTERS', 'MSH-1 field separator missing or invalid');
  }
  const end = mshLine.indexOf(field, 4);
  const enc = end === -1 ? mshLine.slice(4) : mshLine.slice(4, end);
  // MSH-2 (v2.5.1 §2.15.9.2; v2.7 added a fifth, the truncation character): four or five
  // distinct printable non-alphanumeric characters, none equal to the field separator.
  if (
    enc.length < 4 ||
    enc.length > 5 ||
    ![...enc].every((c) => DELIMITER_CHAR.test(c)) ||
    new Set(enc + field).size !== enc.length + 1
  ) {
    throw new Hl7Error(
      'HL7_BAD_ENCODING_CHARACTERS',
      'MSH-2 encoding characters invalid: four or five distinct characters, no letter, digit, space or control character',
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
  const value = line.split(separator)[9];
  if (!value || !/^[\x20-\x7e]+$/.test(value)) return undefined;
  return value.slice(0, 199);
}
