import type { MappedField, OrderRequest } from './order-request';
import type { BoundedValues, IdentifierBoundProblem } from './identifier-bounds';

/**
 * How long the free-text values of an order may be, whatever transport brought them: one
 * table, applied once to the source-neutral order (HL7 and FHIR mappings name their own field
 * or element from the lineage), beside the identifiers' bound (identifier-bounds.ts).
 *
 * A value over its bound is not a name, a code or a note a clinician wrote: it is a broken
 * interface or an attack (a 9 MB PID-5.1 was taken, stored, and written back in the ORU's
 * PID-5). It is refused at its field (HL7 AE 102, FHIR 422 on the element), the message kept.
 * A value within its bound is kept whole in our record; each writer fits it to its own type
 * where it must (DICOM PN/LO 64 in outbound/dicom-vr.ts, the upstream's 1,024 per metadata key
 * in mappings/upstream-metadata.ts), so a long but real name is never refused here.
 *
 * The bounds, in characters (code points, as HL7 and DICOM count them):
 * - a name part (family, each given name, prefix, suffix) of the patient or the ordering
 *   provider: 1,000. HL7 v2.5.1 gives a whole XPN 250 (FN.1 surname 50), v2.7 sets no total,
 *   FHIR HumanName none; the longest names on record are a few hundred characters.
 * - a code (procedure, reason for study): 199, like an identifier (HL7 v2.7 CWE.1 ST; it is a
 *   key of a code table, compared with the product table).
 * - a code system: 1,000 (a FHIR canonical URI or an HL7 CWE.3 coding system name).
 * - a display text (procedure, reason for study): 1,000 (HL7 v2.7 CWE.2 ST 199; FHIR string,
 *   free text from OBR-13 or DG1-4 included).
 * - the modality: 64 (a DICOM modality code is CS, 16; IPC-5/OBR-24/ImagingStudy.modality).
 * - a note (NTE-3, ServiceRequest.note.text): 65,536, the HL7 v2.5.1 FT maximum.
 */
export interface TextBound {
  /** The OrderRequest path; `[]` stands for any index of a list. */
  path: string;
  /** What the value is, for the answer (PHI-free). */
  what: string;
  maxChars: number;
  /** The type the bound comes from, for the answer. */
  basis: string;
}

export const NAME_PART_MAX_CHARS = 1_000;
export const CODE_MAX_CHARS = 199;
export const TEXT_MAX_CHARS = 1_000;
export const MODALITY_MAX_CHARS = 64;
export const NOTE_MAX_CHARS = 65_536;

const NAME_BASIS = 'no name part is that long; HL7 v2.5.1 XPN holds 250 in all';

function nameBounds(at: string, whose: string): TextBound[] {
  return (
    [
      ['family', 'family name'],
      ['given[]', 'given name'],
      ['prefix', 'name prefix'],
      ['suffix', 'name suffix'],
    ] as const
  ).map(([part, what]) => ({
    path: `${at}.${part}`,
    what: `${whose} ${what}`,
    maxChars: NAME_PART_MAX_CHARS,
    basis: NAME_BASIS,
  }));
}

/** Every free-text value of the order model, with its bound. */
export const ORDER_TEXT_BOUNDS: readonly TextBound[] = [
  ...nameBounds('patient.name', "patient's"),
  ...nameBounds('orderingProvider.name', "ordering provider's"),
  {
    path: 'procedure.code',
    what: 'procedure code',
    maxChars: CODE_MAX_CHARS,
    basis: 'HL7 v2.7 CWE.1, ST',
  },
  {
    path: 'procedure.system',
    what: 'procedure coding system',
    maxChars: TEXT_MAX_CHARS,
    basis: 'a coding system name or URI',
  },
  {
    path: 'procedure.display',
    what: 'procedure text',
    maxChars: TEXT_MAX_CHARS,
    basis: 'HL7 v2.7 CWE.2 is ST 199',
  },
  {
    path: 'reasonForStudy[].code',
    what: 'reason-for-study code',
    maxChars: CODE_MAX_CHARS,
    basis: 'HL7 v2.7 CWE.1, ST',
  },
  {
    path: 'reasonForStudy[].system',
    what: 'reason-for-study coding system',
    maxChars: TEXT_MAX_CHARS,
    basis: 'a coding system name or URI',
  },
  {
    path: 'reasonForStudy[].display',
    what: 'reason-for-study text',
    maxChars: TEXT_MAX_CHARS,
    basis: 'HL7 v2.7 CWE.2 is ST 199',
  },
  {
    path: 'modality',
    what: 'modality',
    maxChars: MODALITY_MAX_CHARS,
    basis: 'a DICOM modality is CS, 16',
  },
  { path: 'notes[]', what: 'note', maxChars: NOTE_MAX_CHARS, basis: 'HL7 v2.5.1 FT' },
];

/** The string values at `path` (`a.b[].c`), each with its concrete path (`a.b[2].c`). */
function valuesAt(root: unknown, path: string): Array<[target: string, value: string]> {
  let at: Array<[string, unknown]> = [['', root]];
  for (const step of path.split('.')) {
    const list = step.endsWith('[]');
    const key = list ? step.slice(0, -2) : step;
    const next: Array<[string, unknown]> = [];
    for (const [prefix, value] of at) {
      if (value === null || typeof value !== 'object') continue;
      const child = (value as Record<string, unknown>)[key];
      const name = prefix ? `${prefix}.${key}` : key;
      if (!list) next.push([name, child]);
      else if (Array.isArray(child)) child.forEach((c, i) => next.push([`${name}[${i}]`, c]));
    }
    at = next;
  }
  return at.filter((e): e is [string, string] => typeof e[1] === 'string');
}

/**
 * The free-text values of an order (or a patient event's patient) over their bound: each a
 * refusal naming the value, its length and its bound, never the value. The mappings do not
 * apply it to a cancel: it names its order by numbers, and its text is not kept on the order.
 */
export function textBoundProblems(
  request: BoundedValues | Partial<OrderRequest>,
  lineage: readonly MappedField[],
): IdentifierBoundProblem[] {
  const out: IdentifierBoundProblem[] = [];
  let sources: Map<string, string> | undefined;
  for (const bound of ORDER_TEXT_BOUNDS) {
    for (const [target, value] of valuesAt(request, bound.path)) {
      // Code units first: a string shorter in UTF-16 units is shorter in code points too.
      if (value.length <= bound.maxChars) continue;
      const length = [...value].length;
      if (length <= bound.maxChars) continue;
      sources ??= new Map(lineage.map((l) => [l.target, l.source]));
      const source = sources.get(target);
      const detail = `the ${bound.what} is ${length} characters, more than the ${bound.maxChars} it may have (${bound.basis}); send it as the record holds it`;
      out.push({
        target,
        source,
        severity: 'refuse',
        message: `${source ?? target}: ${detail}`,
        detail,
        brief: `The ${bound.what} is ${length} characters, more than the ${bound.maxChars}`,
      });
    }
  }
  return out;
}
