import { withoutLeading, withoutTrailing } from '../common/padding';
import { OutboundError } from './outbound.error';

/**
 * Makes a value valid for its DICOM Value Representation, whatever an order or a report held
 * (issue #15: hostile HL7 escapes such as `\E\` and `\X0D0A\` and over-long texts produced
 * split and over-long values). One table, from PS3.5 §6.2 (Table 6.2-1):
 *
 * - maximum length (per value; PN per component group), counted in bytes of UTF-8 (see
 *   `truncate`);
 * - whether `\` may appear: it is the value delimiter (PS3.5 §6.4) for every VR except the
 *   text VRs ST, LT, UT and UR, so in a single value of any other VR it would split the value;
 * - which control characters are allowed: none in the string VRs; CR, LF and FF in the text
 *   VRs ST, LT, UT. A TAB is not among them (PS3.5 Table 6.2-1: "the Control Characters CR, LF,
 *   FF, and ESC"): it was kept, and an impression or a device name with a tab made the SR
 *   invalid (dciodvfy: "Character invalid for this VR" 0x9); it is written as a space. PS3.5 allows ESC in string values for ISO 2022 code extensions only,
 *   which the ISO_IR 192 we declare cannot use (PS3.3 C.12.1.1.2), so ESC goes too; so do the
 *   C1 controls U+0080-U+009F (a NEL, a terminal's CSI), control characters in UTF-8 as in
 *   any set. Both were written as they came (a name read with its JIS escape sequences, an
 *   upstream text with a colour code).
 */
interface VrRule {
  maxLength: number;
  /** Text VRs: backslash and CR/LF/FF/TAB are part of the value. */
  text: boolean;
  /** CS: upper-case letters, digits, space and underscore only. */
  codeString?: boolean;
}

const VR_RULES: Readonly<Record<string, VrRule>> = {
  AE: { maxLength: 16, text: false },
  AS: { maxLength: 4, text: false },
  CS: { maxLength: 16, text: false, codeString: true },
  DA: { maxLength: 8, text: false },
  DS: { maxLength: 16, text: false },
  DT: { maxLength: 26, text: false },
  IS: { maxLength: 12, text: false },
  LO: { maxLength: 64, text: false },
  LT: { maxLength: 10_240, text: true },
  PN: { maxLength: 64, text: false },
  SH: { maxLength: 16, text: false },
  ST: { maxLength: 1_024, text: true },
  TM: { maxLength: 14, text: false },
  UC: { maxLength: 65_536, text: false },
  UI: { maxLength: 64, text: false },
  UR: { maxLength: 65_536, text: true },
  UT: { maxLength: 1_000_000, text: true },
};

// eslint-disable-next-line no-control-regex
const STRING_FORBIDDEN = /[\u0000-\u001f\u007f-\u009f\\]/g;
// eslint-disable-next-line no-control-regex
const TEXT_FORBIDDEN = /[\u0000-\u0008\u000b\u000e-\u001f\u007f-\u009f]/g;
const TAB = /\t/g;
/**
 * A UTF-16 surrogate without its pair (a JSON `"\ud800"` escape) is no character: UTF-8 cannot
 * hold it and the writer put U+FFFD in its place, silently. For an identifier that was another
 * identifier (`PID-1\ud800` written `PID-1\ufffd`, not the study's own); made explicit here,
 * the identifier is no longer valid as it stands and is written empty (validForAttribute).
 */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * DA and TM have a format, not only a length (PS3.5 Table 6.2-1): YYYYMMDD and
 * HH[MM[SS[.F{1,6}]]]. A source study may carry the ACR-NEMA forms `YYYY.MM.DD` and
 * `HH:MM:SS` (PS3.5 notes them as not valid any more), which are rewritten; any other value
 * is written empty (these are Type 2 attributes), since cutting it to length leaves an
 * invalid one (`2026-11-20` became `2026-11-`).
 */
const FORMATS: Readonly<Record<string, (v: string) => string>> = {
  DA: (v) => {
    const m = /^(\d{4})[.-]?(\d{2})[.-]?(\d{2})$/.exec(v);
    return m && +m[2]! >= 1 && +m[2]! <= 12 && +m[3]! >= 1 && +m[3]! <= daysIn(+m[1]!, +m[2]!)
      ? `${m[1]}${m[2]}${m[3]}`
      : '';
  },
  TM: (v) => {
    const m = /^(\d{2})(?::?(\d{2})(?::?(\d{2})(\.\d{1,6})?)?)?$/.exec(v);
    if (!m || +m[1]! > 23 || +(m[2] ?? 0) > 59 || +(m[3] ?? 0) > 60) return '';
    return `${m[1]}${m[2] ?? ''}${m[3] ?? ''}${m[4] ?? ''}`;
  },
};

/**
 * Days of a month of the Gregorian calendar. A day past them (30 February, 31 September: what
 * date-shifting anonymisers and hand-keyed birth dates give) is no date; it was written as is.
 */
function daysIn(year: number, month: number): number {
  // the leap years repeat every 400 years
  return new Date(Date.UTC(2000 + (year % 400), month, 0)).getUTCDate();
}

/** Values an attribute may take (PS3.3), by keyword: anything else is written empty. */
const ENUMERATED: Readonly<Record<string, readonly string[]>> = {
  PatientSex: ['M', 'F', 'O'], // PS3.3 C.7.1.1
};

/**
 * The encoding a data set is written in: UTF-8 (ISO_IR 192), or Latin-1 (ISO_IR 100) when
 * every value fits it (see dicom-result.builder.ts). Lengths are counted in its bytes.
 */
export type DicomTextEncoding = 'utf8' | 'latin1';

/**
 * What a length is counted in: the bytes of the encoding written, or characters (Unicode code
 * points) as PS3.5 Table 6.2-1 counts them (identifiers only, see validForAttribute).
 */
type LengthMeasure = DicomTextEncoding | 'characters';

/** One value made valid for `vr`; unknown VRs and non-strings pass unchanged. */
export function validForVr(vr: string, value: string, encoding: LengthMeasure = 'utf8'): string {
  const rule = VR_RULES[vr];
  return rule ? validForRule(vr, rule, value, encoding, rule.maxLength) : value;
}

/** validForVr with the VR's length limit `maxLength` (Infinity: every other rule, no cut). */
function validForRule(
  vr: string,
  rule: VrRule,
  value: string,
  encoding: LengthMeasure,
  maxLength: number,
): string {
  const wellFormed = value.replace(LONE_SURROGATE, '\ufffd');
  let v = rule.text
    ? wellFormed.replace(TAB, ' ').replace(TEXT_FORBIDDEN, '')
    : wellFormed.replace(STRING_FORBIDDEN, ' ');
  if (!rule.text) v = v.replace(/\s+/g, ' ').trim();
  if (rule.codeString) v = v.toUpperCase().replace(/[^A-Z0-9 _]/g, '_');
  const format = FORMATS[vr];
  if (format) return format(v);
  if (vr === 'PN') {
    // PS3.5 §6.2: up to three component groups (alphabetic=ideographic=phonetic) of up to
    // five components each (family^given^middle^prefix^suffix). Components past the fifth
    // are kept, in the fifth, rather than dropped. PS3.5 allows 64 characters per group, but
    // dciodvfy (and PACS with a 64-byte name column) measure the whole value: `A×64=C` and a
    // kanji name with its kana reading were refused. So the groups share the 64 bytes, in
    // order: the alphabetic group first, then what room is left for the others.
    let room = maxLength;
    const groups: string[] = [];
    for (const group of v.split('=').slice(0, 3)) {
      const separator = groups.length > 0 ? 1 : 0;
      if (room - separator <= 0) break;
      const c = group.split('^');
      const five = c.length > 5 ? [...c.slice(0, 4), c.slice(4).join(' ').trim()] : c;
      const kept = truncate(five.join('^'), room - separator, encoding);
      groups.push(kept);
      room -= separator + lengthOf(kept, encoding);
    }
    return groups.join('=');
  }
  return truncate(v, maxLength, encoding);
}

/**
 * Values we copy that a reader knows the patient or the exam by, and which are written cut
 * when longer than their VR takes (PN 64 bytes for the three groups, LO 64): a Russian name
 * with its patronymic (43 characters, valid in the modality's study since PS3.5 counts PN in
 * characters) is 84 bytes of UTF-8. Such a cut is recorded with the delivery attempt (quirk
 * `value-cut-to-type`, as the ORU records a name part cut to its XPN component), naming the
 * attribute and the lengths, never the value. Before, the SR's Patient Name was cut silently.
 */
const RECORDED_CUTS: Readonly<Record<string, { tag: string; keeps: string }>> = {
  PatientName: { tag: '0010,0010', keeps: 'the source study keeps the whole name' },
  ReferringPhysicianName: { tag: '0008,0090', keeps: 'the source study keeps the whole name' },
  StudyDescription: { tag: '0008,1030', keeps: 'the source study keeps the whole text' },
  RequestedProcedureDescription: { tag: '0032,1060', keeps: 'the order keeps the whole text' },
};

/** One line for `cuts` when `written` is `keyword`'s value shorter than valid `whole`. */
function cutOf(
  keyword: string,
  vr: string,
  whole: string,
  written: string,
  encoding: DicomTextEncoding,
): string | undefined {
  const recorded = RECORDED_CUTS[keyword];
  if (!recorded || written === whole) return undefined;
  const charset = encoding === 'latin1' ? 'ISO_IR 100' : 'ISO_IR 192';
  return `${keyword} (${recorded.tag}): ${lengthOf(whole, 'characters')} characters, ${lengthOf(whole, encoding)} bytes in ${charset}, written as its first ${lengthOf(written, 'characters')} characters (${vr}, ${VR_RULES[vr]!.maxLength} bytes as written); ${recorded.keeps}`;
}

/**
 * Identifiers a PACS files what we send by (reconciles on): made valid they would be another
 * exam's or patient's (`ACC-2026-000000000042` cut to `ACC-2026-0000000`, `PID-7\\8` joined to
 * `PID-7 8`), or another requested procedure's (a 21-character filler number cut to the 16 of
 * a Requested Procedure ID, SH, beside the accession: IHE SWF's pair). A value that is not
 * valid as it stands (beyond its space padding) is written empty (Type 2 in the SR and PDF
 * IODs), never altered.
 */
const IDENTIFIERS = new Set([
  'AccessionNumber',
  'PatientID',
  'RequestedProcedureID',
  // the ID domains of the two (`HOSPA\\HOSP_B` joined is a third domain, not either one)
  'IssuerOfPatientID',
  'LocalNamespaceEntityID',
  'UniversalEntityID',
]);

/**
 * A value of the attribute `keyword` made valid: its VR, then its enumerated values.
 *
 * An identifier is measured as PS3.5 Table 6.2-1 measures it, in characters ("16 chars
 * maximum" for SH, 64 for LO), when the data set is UTF-8: it cannot be cut, and a PACS matches
 * it by its characters. Counted in UTF-8 bytes as other values are (see `truncate`), the
 * 16-character accession `MÜNCHEN-ÄÖÜ-1234` (20 bytes) was written empty whenever another value
 * needed UTF-8 beside it (a Cyrillic name, a CJK impression): the SR and PDF lost the exam they
 * belong to. dciodvfy, which counts bytes, reports such an accession's length; it is valid.
 */
function validForAttribute(
  keyword: string,
  vr: string,
  value: string,
  encoding: DicomTextEncoding,
  cuts?: string[],
): string {
  if (vr === 'UI') return uidAsItStands(keyword, value);
  const v = validForVr(vr, value, encoding);
  const rule = VR_RULES[vr];
  if (cuts && rule && RECORDED_CUTS[keyword]) {
    const cut = cutOf(keyword, vr, validForRule(vr, rule, value, encoding, Infinity), v, encoding);
    if (cut) cuts.push(cut);
  }
  if (IDENTIFIERS.has(keyword)) {
    const asItStands = withoutLeading(withoutTrailing(value, ' '), ' ');
    if (v === asItStands) return v;
    return encoding === 'utf8' && validForVr(vr, value, 'characters') === asItStands
      ? asItStands
      : '';
  }
  const allowed = ENUMERATED[keyword];
  return allowed && !allowed.includes(v) ? '' : v;
}

/**
 * A UID (PS3.5 §9.1): components of digits separated by dots, none empty, none with a leading
 * zero (a component of `0` alone is allowed), at most 64 characters. Its trailing NUL padding
 * (PS3.5 §6.2, UI is padded with 0x00) is not part of it.
 */
const UID = /^(?:0|[1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*))*$/;

export function isValidUid(value: string): boolean {
  return value.length <= 64 && UID.test(value);
}

/**
 * A UID as legacy equipment writes it: components of digits, none empty, one with a leading
 * zero (`1.2.840.113619.2.55.3.0604…`, as older scanners number their studies). Not valid by
 * PS3.5 §9.1, yet it is the study's own UID, the one its PACS files it under: written as it
 * stands, the SR and PDF land with their study; refused, the result would never reach it.
 */
const LEGACY_UID = /^[0-9]+(?:\.[0-9]+)*$/;

/**
 * Every UID we write identifies something a PACS files or matches by: the study, series and
 * instance (ours and those we reference), the device. Made valid for its VR it was another one
 * (`1.2.3\\4` written `1.2.3 4`, a 70-character UID cut to 64), and letters or an empty
 * component passed as they were: the SR was filed under another study, or refused. A UID that
 * cannot be written as it stands (leading zeros aside: LEGACY_UID) is not written: the object is not built, and the delivery
 * says which attribute held it (a dead letter on the order's timeline). The value itself stays
 * out of the message, as everything that came from outside.
 */
function uidAsItStands(keyword: string, value: string): string {
  const asItStands = withoutTrailing(value, '\0');
  if (isValidUid(asItStands)) return asItStands;
  if (asItStands.length <= 64 && LEGACY_UID.test(asItStands)) return asItStands;
  throw new OutboundError(
    'invalid_uid',
    `${keyword} is not a valid DICOM UID (PS3.5 §9.1: digits and dots, no empty component, at most 64 characters; this one has ${asItStands.length} characters): the DICOM object was not written rather than filed under an altered UID`,
    { attribute: keyword },
  );
}

/**
 * An identifier as it is written when it is valid for `vr` as it stands (its space padding
 * off), else undefined (validForAttribute writes it empty). The same in both encodings we
 * write: identifiers are measured in characters, and Latin-1 has one byte per character. For
 * Type 1C and 3 identifiers, which are left out rather than written empty.
 */
export function identifierAsItStands(vr: string, value: string): string | undefined {
  const asItStands = withoutLeading(withoutTrailing(value, ' '), ' ');
  return asItStands !== '' && validForVr(vr, value, 'characters') === asItStands
    ? asItStands
    : undefined;
}

/**
 * Cut to `max` bytes of the encoding we write (UTF-8 for ISO_IR 192, Latin-1 for ISO_IR
 * 100), never inside a character. PS3.5 Table 6.2-1 counts characters, but readers count bytes:
 * dciodvfy refused 64 CJK characters (192 bytes) as "Length invalid for this VR", and dcmjs
 * threw "Value exceeds max length" on 40 emoji (80 UTF-16 units), so no SR or PDF was written
 * for such a patient. 64 bytes are at most 64 characters, so both readings hold.
 */
function truncate(value: string, max: number, encoding: LengthMeasure): string {
  if (lengthOf(value, encoding) <= max) return value;
  let out = '';
  let bytes = 0;
  for (const char of value) {
    const size = lengthOf(char, encoding);
    if (bytes + size > max) break;
    out += char;
    bytes += size;
  }
  return out;
}

function lengthOf(value: string, measure: LengthMeasure): number {
  if (measure !== 'characters') return Buffer.byteLength(value, measure);
  // code points: a surrogate pair is one character
  return value.length - (value.match(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g)?.length ?? 0);
}

/**
 * Applies validForVr to every string of a naturalized dcmjs dataset (nested sequences
 * included), looking each keyword's VR up in the dictionary. `cuts` receives a line per
 * RECORDED_CUTS value written shorter than it came.
 */
export function sanitizeDataset(
  dataset: Record<string, unknown>,
  vrOf: (keyword: string) => string | undefined,
  encoding: DicomTextEncoding = 'utf8',
  cuts?: string[],
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(dataset)) {
    const vr = vrOf(key);
    if (vr === 'SQ' && Array.isArray(value)) {
      out[key] = value.map((item) =>
        item && typeof item === 'object' && !ArrayBuffer.isView(item)
          ? sanitizeDataset(item as Record<string, unknown>, vrOf, encoding, cuts)
          : item,
      );
    } else if (typeof value === 'string' && vr) {
      out[key] = validForAttribute(key, vr, value, encoding, cuts);
    } else if (Array.isArray(value) && vr) {
      out[key] = value.map((v) =>
        typeof v === 'string' ? validForAttribute(key, vr, v, encoding, cuts) : v,
      );
    } else {
      out[key] = value;
    }
  }
  return out;
}

/**
 * Whether a data set's text is best written in Latin-1 (ISO_IR 100): every string value fits
 * it and one at least is not ASCII. PS3.5 Table 6.2-1 counts SH, LO and PN in characters but
 * dciodvfy (and PACS with byte-sized columns) count the bytes as written: a 16-character
 * accession with four umlauts is 20 bytes in UTF-8, 16 in Latin-1, and it is an identifier
 * that cannot be cut (it was written empty). ASCII-only data sets stay ISO_IR 192.
 */
export function prefersLatin1(dataset: unknown): boolean {
  let nonAscii = false;
  const visit = (v: unknown): boolean => {
    if (typeof v === 'string') {
      for (let i = 0; i < v.length; i++) {
        const c = v.charCodeAt(i);
        if (c > 0xff) return false;
        if (c > 0x7f) nonAscii = true;
      }
      return true;
    }
    if (Array.isArray(v)) return v.every(visit);
    if (v && typeof v === 'object' && !ArrayBuffer.isView(v) && !(v instanceof ArrayBuffer))
      return Object.values(v).every(visit);
    return true;
  };
  return visit(dataset) && nonAscii;
}
