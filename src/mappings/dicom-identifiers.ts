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
