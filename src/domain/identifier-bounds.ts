import type { MappedField, OrderRequest } from './order-request';

/**
 * How long an order's identifiers may be, whatever transport brought them: one rule for the
 * HL7 and the FHIR mapping (each names its own field or element, from the lineage).
 *
 * - Placer, filler and placer group numbers and the accession number: at most 199 characters.
 *   HL7 v2.7 gives EI.1 (entity identifier) and ST fields such as OBR-18 a conformance length of
 *   199 (v2.5.1 said 199 for EI as a whole); FHIR Identifier.value sets none, but an order
 *   number is a key a RIS, a PACS and an EHR all have to hold. A 5,000-character placer number
 *   was taken, stored, indexed and compared on every message of its sender.
 * - The accession number over 16 characters, the most a DICOM Accession Number (0008,0050,
 *   SH, PS3.5 Table 6.2-1) holds: taken, with a quirk. A study is used for the order only
 *   when its accession equals the order's (studies/study-identity.ts), so a modality or PACS
 *   that keeps to SH (truncates or refuses) never yields a study that matches; PACS that store
 *   longer values (Orthanc, many RIS-driven worklists) do match, and real RIS numbers such as
 *   `ACC-20240318-0042` (17) are sent. Our own DICOM outputs write such a value empty, never cut.
 *
 * Lengths are counted in characters (code points), as HL7 and DICOM count them.
 */
export const ORDER_IDENTIFIER_MAX_CHARS = 199;
export const DICOM_ACCESSION_MAX_CHARS = 16;

/** The identifiers bounded, by their OrderRequest path (a lineage target). */
const BOUNDED = [
  ['placerOrderNumber.value', 'placer order number', (r) => r.placerOrderNumber?.value],
  ['fillerOrderNumber.value', 'filler order number', (r) => r.fillerOrderNumber?.value],
  ['placerGroupNumber.value', 'placer group number', (r) => r.placerGroupNumber?.value],
  ['accessionNumber', 'accession number', (r) => r.accessionNumber],
] as const satisfies ReadonlyArray<
  readonly [string, string, (r: Partial<OrderRequest>) => string | undefined]
>;

export interface IdentifierBoundProblem {
  /** The OrderRequest path (`placerOrderNumber.value`), as the lineage's targets name it. */
  target: string;
  /** Where the transport read it (the lineage's source), when the lineage has it. */
  source?: string;
  /** `refuse`: the order is not taken; `warn`: taken, with a quirk. */
  severity: 'refuse' | 'warn';
  /** PHI-free: names the identifier and its length, never its value. */
  message: string;
}

/** The problems of an order's identifiers (none for a cancel: it names an order, makes none). */
export function identifierBoundProblems(
  request: Partial<OrderRequest>,
  lineage: readonly MappedField[],
): IdentifierBoundProblem[] {
  if (request.action === 'cancel') return [];
  const out: IdentifierBoundProblem[] = [];
  for (const [target, what, read] of BOUNDED) {
    const value = read(request);
    if (value === undefined) continue;
    const length = [...value].length;
    const source = lineage.find((l) => l.target === target)?.source;
    const at = source ?? target;
    if (length > ORDER_IDENTIFIER_MAX_CHARS) {
      out.push({
        target,
        source,
        severity: 'refuse',
        message: `${at}: the ${what} is ${length} characters, more than the ${ORDER_IDENTIFIER_MAX_CHARS} an order identifier may have (HL7 v2.7 EI.1/ST); send the number the order is known by`,
      });
    } else if (target === 'accessionNumber' && length > DICOM_ACCESSION_MAX_CHARS) {
      out.push({
        target,
        source,
        severity: 'warn',
        message: `${at}: the accession number is ${length} characters, more than the ${DICOM_ACCESSION_MAX_CHARS} a DICOM Accession Number (SH) holds; a study whose PACS keeps to SH will never match this order`,
      });
    }
  }
  return out;
}
