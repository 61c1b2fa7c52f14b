/**
 * How PHI is hidden from analysts on the audit API and page (docs/audit.md, "Masking"), by
 * allow-list (issue #15): a value is shown only when it sits in a field known to carry no
 * PHI; everything else — free text, narrative, extensions, unknown keys and segments, NTE,
 * OBR-13/31 — is hidden whole. Names keep their initials, birth dates their year, patient
 * identifiers their last two characters. Order identifiers (accession, placer/filler
 * numbers, Study Instance UID), codes, statuses and timestamps stay readable: they name the
 * order, not the patient, and are what an analyst is asked about.
 *
 * Pure functions, no Nest or database: the same rules serve order fields, lineage values,
 * audit event details, raw HL7 and raw FHIR. This file masks our own JSON (OrderRequest,
 * lineage lines, event details) and hands FHIR resources and embedded HL7 to their maskers;
 * the rules are in phi-masking.values.ts, the FHIR allow-list in phi-masking.fhir.ts, the
 * HL7 field tables in phi-masking.hl7.ts, DICOM tag dumps and upstream reports in
 * phi-masking.documents.ts.
 */

import { maskFhir, PERSON_RESOURCES } from './phi-masking.fhir';
import { maskFreeText } from './phi-masking.free-text';
import { maskHl7Text } from './phi-masking.hl7';
import { maskIdentifiers, maskLeaves, maskValue, type MaskRule } from './phi-masking.values';

export { maskDate, maskIdentifier, maskName, maskValue, type MaskRule } from './phi-masking.values';
export {
  HL7_CODED_FREE_TEXT,
  HL7_PHI_FIELDS,
  HL7_VISIBLE_FIELDS,
  hl7Delimiters,
  hl7Fields,
  hl7Segments,
  maskHl7Field,
  maskHl7Text,
} from './phi-masking.hl7';
export { maskDicomValue, maskUpstreamReport } from './phi-masking.documents';

/**
 * OrderRequest paths (lineage `target`s) shown as they are: identifiers of the order, codes,
 * statuses and times. Every other path is PHI or free text.
 */
const VISIBLE_TARGETS: readonly RegExp[] = [
  /^(source|action|accessionNumber|studyInstanceUid|modality|priority|requestedAt)$/,
  /^(placerOrderNumber|fillerOrderNumber|placerGroupNumber)(\.(value|system|type))?$/,
  /^procedure(\.(code|system|display))?$/,
  /^products(\[\d+\])?$/,
  /^patient\.sex$/,
  /^patient\.identifiers\[\d+\]\.(system|type)$/,
  /^reasonForStudy\[\d+\]\.(code|system)$/,
  // The ordering provider is a clinician acting in their role, not the patient.
  /^orderingProvider\./,
];

/**
 * The rule for an OrderRequest path (lineage `target`), or undefined when it is shown as it
 * is. Allow-list: a path not known to be PHI-free is hidden whole.
 */
export function ruleForTarget(target: string): MaskRule | undefined {
  if (/^patient\.name/.test(target)) return 'name';
  if (/^patient\.birthDate/.test(target)) return 'date';
  if (/^(patient\.identifiers|priorIdentifiers)(\[\d+\])?(\.value)?$/.test(target)) return 'id';
  if (VISIBLE_TARGETS.some((re) => re.test(target))) return undefined;
  return 'full';
}

/** An OrderRequest (ours): every string leaf masked by its path's rule. */
function isOrderRequest(obj: Record<string, unknown>): boolean {
  return (
    typeof obj.source === 'string' &&
    typeof obj.action === 'string' &&
    typeof obj.patient === 'object' &&
    obj.patient !== null
  );
}

function maskByPath(v: unknown, path: string): unknown {
  if (typeof v === 'string') {
    const rule = ruleForTarget(path);
    return rule ? maskValue(rule, v) : v;
  }
  if (Array.isArray(v)) return v.map((x, i) => maskByPath(x, `${path}[${i}]`));
  if (v === null || typeof v !== 'object') return v;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(v as Record<string, unknown>)) {
    out[key] = maskByPath(inner, path ? `${path}.${key}` : key);
  }
  return out;
}

/** Keys whose values are PHI wherever they appear in our own JSON (order requests, event details). */
const KEY_RULES: Readonly<Record<string, MaskRule>> = {
  birthDate: 'date',
  deceasedDateTime: 'date',
  address: 'full',
  telecom: 'full',
  notes: 'full',
  note: 'full',
  photo: 'full',
};

/**
 * Masks PHI anywhere in a JSON value. `person`: inside a resource about a person, so nested
 * `name` and `identifier` (e.g. Patient.contact.name) are PHI too. Covers our OrderRequest
 * (`patient`), lineage lines (by target), identifier lists, FHIR resources, and embedded HL7
 * text (outbound ORU payloads).
 */
export function maskJson(value: unknown, context: { person?: boolean } = {}): unknown {
  if (typeof value === 'string') {
    return /^(\uFEFF)?MSH./.test(value) ? maskHl7Text(value) : value;
  }
  if (Array.isArray(value)) return value.map((v) => maskJson(v, context));
  if (value === null || typeof value !== 'object') return value;
  const obj = value as Record<string, unknown>;
  if (isLineageLine(obj)) return maskLineageLine(obj);
  if (isOrderRequest(obj)) return maskByPath(obj, '');
  if (typeof obj.resourceType === 'string') return maskFhir(obj, false);
  const person =
    context.person ||
    (typeof obj.resourceType === 'string' && PERSON_RESOURCES.has(obj.resourceType));
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(obj)) {
    const keyRule = KEY_RULES[key];
    if (keyRule) out[key] = maskLeaves(v, keyRule);
    else if (key === 'patient' || key === 'subject') out[key] = maskPatientLike(v);
    else if (person && key === 'name') out[key] = maskLeaves(v, 'name', ['use', 'period']);
    else if (person && key === 'identifier') out[key] = maskIdentifiers(v);
    else if (key === 'identifiers' || key === 'priorIdentifiers') out[key] = maskIdentifiers(v);
    else out[key] = maskJson(v, { person });
  }
  return out;
}

/**
 * The peer's own words kept in an outbound event's detail (outbound.attempt): the EHR's
 * OperationOutcome issues, the RIS's ACK text (MSA-3) and ERR segment. A peer may quote the
 * patient there ("Patient Mustermann, Erika born 1964-08-12 unknown"), so they are masked as
 * the peer's raw answer is: the issues by the FHIR allow-list (codes, severity and expression
 * kept; diagnostics and details hidden), the ERR segment by the HL7 one, MSA-3 hidden whole.
 */
const PEER_TEXT: Readonly<Record<string, (v: unknown) => unknown>> = {
  operationOutcome: (v) => maskFhir({ resourceType: 'OperationOutcome', issue: v }, false).issue,
  text: (v) => (typeof v === 'string' ? maskValue('full', v) : maskLeaves(v, 'full')),
  err: (v) => (typeof v === 'string' ? maskHl7Text(`ERR|${v}`).slice(4) : maskLeaves(v, 'full')),
};

/**
 * An audit event's detail for an analyst: maskJson, plus the peers' free text of outbound
 * events and the upstream's words in a failed call's error (`upstream.call`: `new-order:
 * upstream answered 422 (invalid_metadata: patient_name …)`, which may echo the metadata sent).
 */
export function maskEventDetail(
  kind: string,
  detail: Record<string, unknown>,
): Record<string, unknown> {
  const masked = maskJson(detail) as Record<string, unknown>;
  if (kind === 'upstream.call') return maskCallError(masked);
  if (!kind.startsWith('outbound.')) return masked;
  for (const [key, mask] of Object.entries(PEER_TEXT)) {
    if (key in detail) masked[key] = mask(detail[key]);
  }
  return masked;
}

export interface LineageLine {
  target: string;
  source: string;
  value: string;
  ruleId: string;
  rule?: string;
}

function isLineageLine(obj: Record<string, unknown>): obj is Record<string, unknown> & LineageLine {
  return (
    typeof obj.target === 'string' &&
    typeof obj.source === 'string' &&
    typeof obj.ruleId === 'string' &&
    'value' in obj
  );
}

export function maskLineageLine<T extends LineageLine>(line: T): T {
  const rule = ruleForTarget(line.target);
  if (!rule || typeof line.value !== 'string') return line;
  // The conversion rule quotes the source text (`HL7 DT: 19560214 → 1956-02-14`): keep its
  // name, hide the values.
  const converted =
    typeof line.rule === 'string' ? { rule: `${line.rule.replace(/:.*$/s, '')}: ***` } : {};
  return { ...line, value: maskValue(rule, line.value), ...converted };
}

/** Our PatientInfo, or a FHIR Reference (`display` is the person's name). */
function maskPatientLike(v: unknown): unknown {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return maskJson(v, {});
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(v as Record<string, unknown>)) {
    if (key === 'display') out[key] = maskLeaves(inner, 'name');
    else out[key] = (maskJson({ [key]: inner }, { person: true }) as Record<string, unknown>)[key];
  }
  return out;
}

/**
 * An `upstream.call` detail's `error.message` for an analyst. The upstream's own words (its
 * error body's message) are not shown here, only its machine code (`error.upstreamCode`,
 * kept apart when the call failed): the event of a refused create names no order, so the
 * order's values are not at hand to mask them with, and patterns alone let "Erika
 * Mustermann" in prose through. The order's timeline has them, masked with the order's own
 * values (upstream-errors.ts `describe`); an admin's reveal shows them whole. Our own words
 * (`gave up after 6 attempts (last: status 500)`) go through the free-text rule.
 */
function maskCallError(detail: Record<string, unknown>): Record<string, unknown> {
  const error = detail.error;
  if (error === null || typeof error !== 'object' || Array.isArray(error)) return detail;
  const { message, upstreamCode, adapterNote } = error as {
    message?: unknown;
    upstreamCode?: unknown;
    adapterNote?: unknown;
  };
  if (typeof message !== 'string') return detail;
  const head = UPSTREAM_ANSWERED.exec(message)?.[0];
  if (!head) return { ...detail, error: { ...error, message: maskFreeText(message) } };
  const code = typeof upstreamCode === 'string' ? upstreamCode : undefined;
  const answered =
    code !== undefined && message.startsWith(`${head}${code})`)
      ? `${head}${code})`
      : `${head}${code !== undefined ? `${code}: ` : ''}[the upstream's words: on the order's timeline])`;
  // Our note on the answer (a redirect not followed) follows the upstream's words in the
  // message; kept apart, it is shown after them (before: cut off with them).
  const ours =
    typeof adapterNote === 'string' && adapterNote ? `, ${maskFreeText(adapterNote)}` : '';
  return { ...detail, error: { ...error, message: `${answered}${ours}` } };
}

/** `<operation>: upstream answered <status> (`, as upstream-http.ts writes a refused call. */
const UPSTREAM_ANSWERED = /^[A-Za-z][\w.-]{0,63}: upstream answered \d{3} \(/;
