import { withoutLeading, withoutTrailing } from '../common/padding';

/**
 * DICOM attribute matching characters (PS3.4 §C.2.2.2.4: `*` and `?` are wildcards) and the
 * value delimiter `\` (PS3.5 §6.4): an identifier holding one is a query, not an identifier,
 * and would match other patients' studies. Intake refuses such accession numbers; the PACS
 * client never sends one.
 */
export function hasMatchingCharacters(value: string): boolean {
  return /[*?\\]/.test(value);
}

/** The answer an input gets when its accession number holds one (HL7 ERR / FHIR issue text). */
export const MATCHING_CHARACTERS_MESSAGE =
  'the accession number holds a DICOM matching character (* ? \\); it would match other studies';

/** A control character in an identifier: one rule for every identifier (domain/identifier-bounds.ts). */
export { hasControlCharacters } from '../domain/identifier-bounds';

export const CONTROL_CHARACTERS_MESSAGE =
  'the accession number holds a control character (TAB, CR, LF ...), which no DICOM Accession Number (SH) can hold: no study would ever match it';

/**
 * An SH / LO identifier (Accession Number, Patient ID) without its padding. PS3.5 §6.2 pads
 * these with SPACE (20H) only, and leading and trailing spaces are not significant; trailing
 * NULs (a common writer's mistake, the UI padding), also before the SPACE a writer padded a
 * NUL-terminated `ACC1\0` with to even length, are read as padding too. Nothing else is
 * padding: a TAB, CR or LF (not allowed in SH/LO), a no-break space (A0H in Latin-1) or an
 * ideographic space (U+3000) is part of the value, so `ACC1<TAB>` is not the accession `ACC1`.
 */
export function withoutPadding(value: string): string {
  return withoutLeading(withoutTrailing(value, '\0 '), ' ');
}

/**
 * Why two identifiers that differ look alike, for the audit entry of a refused study: only by
 * letter case, only by whitespace or control characters, or only by leading zeros. Undefined
 * when they differ otherwise. Never a reason to use the study: the order's identifier and the
 * study's are compared exactly (after the padding above).
 */
export function nearMiss(
  a: string,
  b: string,
): 'case' | 'whitespace-or-control' | 'leading-zeros' | undefined {
  if (a === b) return undefined;
  if (a.toLowerCase() === b.toLowerCase()) return 'case';
  // eslint-disable-next-line no-control-regex
  const bare = (v: string) => v.replace(/[\s\u0000-\u001f\u007f-\u009f]/g, '');
  if (bare(a) === bare(b)) return 'whitespace-or-control';
  const unzero = (v: string) => v.replace(/^0+(?=.)/, '');
  if (unzero(a) === unzero(b)) return 'leading-zeros';
  return undefined;
}
