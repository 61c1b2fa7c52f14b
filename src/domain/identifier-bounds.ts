import { composedIdentifier } from './identifier-form';
import type { Identifier, MappedField, OrderRequest } from './order-request';

/**
 * How long an order's identifiers may be, whatever transport brought them: one rule for the
 * HL7 and the FHIR mapping (each names its own field or element, from the lineage).
 *
 * - Patient identifiers (PID-3, MRG-1, Patient.identifier), placer, filler and placer group
 *   numbers and the accession number: at most 199 characters.
 *   HL7 v2.7 gives EI.1 (entity identifier) and ST fields such as OBR-18 a conformance length of
 *   199 (v2.5.1 said 199 for EI as a whole); FHIR Identifier.value sets none, but an order
 *   number is a key a RIS, a PACS and an EHR all have to hold. A 5,000-character placer number
 *   was taken, stored, indexed and compared on every message of its sender, and a random
 *   8,000-character patient identifier passed the largest row a PostgreSQL index holds: the
 *   store failed, AR 207 "resend later", nothing kept, and the RIS resent it for ever.
 * - The accession number over 16 characters, the most a DICOM Accession Number (0008,0050,
 *   SH, PS3.5 Table 6.2-1) holds: taken, with a quirk. A study is used for the order only
 *   when its accession equals the order's (studies/study-identity.ts), so a modality or PACS
 *   that keeps to SH (truncates or refuses) never yields a study that matches; PACS that store
 *   longer values (Orthanc, many RIS-driven worklists) do match, and real RIS numbers such as
 *   `ACC-20240318-0042` (17) are sent. Our own DICOM outputs write such a value empty, never cut.
 *
 * Lengths are counted in characters (code points) of the composed form (NFC, identifier-form.ts),
 * as HL7 and DICOM count them: not bytes, and not the code points of a decomposed `Ü`.
 */
export const ORDER_IDENTIFIER_MAX_CHARS = 199;

/**
 * A control character (C0, TAB, CR and LF included, DEL, or C1: U+0080-U+009F, which a Windows
 * RIS's undefined code-page bytes 0x81 0x8D 0x8F 0x90 0x9D and UTF-8 C2 80-C2 9F decode to;
 * they passed as part of the identifier). No DICOM SH or LO value holds one
 * (PS3.5 §6.2: the default repertoire without control characters but ESC), and a RIS never
 * names its order by one again: an identifier holding one (the TAB or CR a barcode scanner
 * appends, sent escaped as `\X09\`, or a `\.br\`) can equal no study's Patient ID or Accession
 * Number and no later message's order number. Refused for every identifier below, as one rule.
 */
export function hasControlCharacters(value: string): boolean {
  // eslint-disable-next-line no-control-regex
  return /[\u0000-\u001f\u007f-\u009f]/.test(value);
}
export const DICOM_ACCESSION_MAX_CHARS = 16;

/** What the bound is applied to: an order, or a patient event's patient (and merged identifiers). */
export type BoundedValues = Partial<OrderRequest> & { priorIdentifiers?: Identifier[] };

/** The identifiers bounded, by their OrderRequest path (a lineage target), with what they are. */
function boundedOf(r: BoundedValues): Array<[target: string, what: string, value: string]> {
  const out: Array<[string, string, string]> = [];
  const add = (target: string, what: string, value: unknown) => {
    if (typeof value === 'string') out.push([target, what, value]);
  };
  (r.patient?.identifiers ?? []).forEach((id, i) =>
    add(`patient.identifiers[${i}].value`, 'patient identifier', id?.value),
  );
  (r.priorIdentifiers ?? []).forEach((id, i) =>
    add(`priorIdentifiers[${i}].value`, 'prior patient identifier', id?.value),
  );
  add('placerOrderNumber.value', 'placer order number', r.placerOrderNumber?.value);
  add('fillerOrderNumber.value', 'filler order number', r.fillerOrderNumber?.value);
  add('placerGroupNumber.value', 'placer group number', r.placerGroupNumber?.value);
  add('accessionNumber', 'accession number', r.accessionNumber);
  return out;
}

export interface IdentifierBoundProblem {
  /** The OrderRequest path (`placerOrderNumber.value`), as the lineage's targets name it. */
  target: string;
  /** Where the transport read it (the lineage's source), when the lineage has it. */
  source?: string;
  /** `refuse`: the order is not taken; `warn`: taken, with a quirk. */
  severity: 'refuse' | 'warn';
  /** PHI-free: names the identifier and its length, never its value. */
  message: string;
  /**
   * The message without its leading `where:` (the lineage's source), for a transport that
   * names the element itself: a FHIR OperationOutcome's expression and diagnostics name the same
   * element (a requester's name read from `requester.display` is refused at that element, not
   * at the internal `requester.display.family`).
   */
  detail: string;
  /** The refusal in 80 characters, the advice first (a v2.3/2.4 ACK's MSA-3, ST 80). */
  brief?: string;
}

/** The problems of an order's identifiers (none for a cancel: it names an order, makes none). */
export function identifierBoundProblems(
  request: BoundedValues,
  lineage: readonly MappedField[],
): IdentifierBoundProblem[] {
  return request.action === 'cancel' ? [] : boundProblemsOf(request, lineage);
}

/**
 * Why a cancel or change that found no order (`order`: its placer or filler number), or found
 * another patient's (`patient`: its patient identifiers), could name none: the identifiers that
 * break the rule, which no order taken since can hold. A cancel is not refused for them up front
 * (identifierBoundProblems): an order stored before the rule may still be named by them and
 * cancelled. When none is found, the answer is the field-level refusal a new order with the
 * same values gets (AE 102 at the field), not "unknown order".
 */
export function unmatchableIdentifierProblems(
  request: BoundedValues,
  lineage: readonly MappedField[],
  which: 'order' | 'patient',
): IdentifierBoundProblem[] {
  const names =
    which === 'order' ? /^(placer|filler)OrderNumber\./ : /^patient\.identifiers\[\d+\]\./;
  return boundProblemsOf(request, lineage).filter(
    (p) => p.severity === 'refuse' && names.test(p.target),
  );
}

function boundProblemsOf(
  request: BoundedValues,
  lineage: readonly MappedField[],
): IdentifierBoundProblem[] {
  const out: IdentifierBoundProblem[] = [];
  let sources: Map<string, string> | undefined;
  for (const [target, what, value] of boundedOf(request)) {
    // in characters of the composed form the order will hold (identifier-form.ts): `Ü` written
    // `U` + U+0308 is one character, and a 16-character accession so written fits a DICOM SH
    const length = [...composedIdentifier(value)].length;
    const control = hasControlCharacters(value);
    if (length <= DICOM_ACCESSION_MAX_CHARS && !control) continue;
    // One index of the lineage, built on the first problem: a find per identifier made a
    // PID-3 of 80,000 repetitions quadratic.
    sources ??= new Map(lineage.map((l) => [l.target, l.source]));
    const source = sources.get(target);
    const at = source ?? target;
    if (control) {
      const place = at.replace(/\.1$/, '');
      out.push({
        target,
        source,
        severity: 'refuse',
        message: `${at}: the ${what} holds a control character (TAB, CR, LF ...), which no DICOM Patient ID or Accession Number (LO, SH) and no later message can equal: the order would never match; remove it`,
        detail: `the ${what} holds a control character (TAB, CR, LF ...), which no DICOM Patient ID or Accession Number (LO, SH) and no later message can equal: the order would never match; remove it`,
        brief: `Remove the control character from the ${what} (${place})`,
      });
    } else if (length > ORDER_IDENTIFIER_MAX_CHARS) {
      out.push({
        target,
        source,
        severity: 'refuse',
        message: `${at}: the ${what} is ${length} characters, more than the ${ORDER_IDENTIFIER_MAX_CHARS} an identifier may have (HL7 v2.7 EI.1, CX.1, ST); send the number it is known by`,
        detail: `the ${what} is ${length} characters, more than the ${ORDER_IDENTIFIER_MAX_CHARS} an identifier may have (HL7 v2.7 EI.1, CX.1, ST); send the number it is known by`,
        brief: `Send the number it is known by: ${at} is ${length} characters, more than the ${ORDER_IDENTIFIER_MAX_CHARS}`,
      });
    } else if (target === 'accessionNumber' && length > DICOM_ACCESSION_MAX_CHARS) {
      out.push({
        target,
        source,
        severity: 'warn',
        message: `${at}: the accession number is ${length} characters, more than the ${DICOM_ACCESSION_MAX_CHARS} a DICOM Accession Number (SH) holds; a study whose PACS keeps to SH will never match this order`,
        detail: `the accession number is ${length} characters, more than the ${DICOM_ACCESSION_MAX_CHARS} a DICOM Accession Number (SH) holds; a study whose PACS keeps to SH will never match this order`,
      });
    }
  }
  return out;
}
