import type {
  CodeableConcept,
  Coding,
  HumanName,
  Identifier as FhirIdentifier,
  Reference,
  ServiceRequest,
} from '@medplum/fhirtypes';
import type {
  AssigningAuthority,
  CodedConcept,
  Identifier,
  PersonName,
  ToleratedQuirk,
} from '../domain/order-request';
import { NOT_A_RECORD_ID_TYPES, PATIENT_RECORD_ID_TYPES } from '../domain/patient-identity';
import type { FhirOrderMappingConfig } from './fhir-order.config';
import { lookupProducts } from './product-table';
import { unpadded } from '../common/padding';
import type { FhirMappingIssue, FhirOrderContext } from './fhir-order.mapping';
import type { LineageLine } from './table-driver';

/*
 * The imperative part of the FHIR R4 → OrderRequest mapping: how one row of FHIR_ORDER_FIELD_MAP
 * reads its value (identifiers, names, codings). Pure functions; the table and the driver stay
 * in fhir-order.mapping.ts.
 */

/** HL7 v2 table 0203 identifier types, as FHIR R4 carries them (v2-0203 code system). */
export const V2_0203 = 'http://terminology.hl7.org/CodeSystem/v2-0203';
/** DICOM UIDs as FHIR identifiers (R4 imagingstudy.html: system urn:dicom:uid, value urn:oid:…). */
export const DICOM_UID_SYSTEM = 'urn:dicom:uid';

/** What an extractor returns: the value (if any), its lineage, and problems found on the way. */
export interface Extracted {
  value?: unknown;
  lines: LineageLine[];
  issues?: FhirMappingIssue[];
  quirks?: ToleratedQuirk[];
}

/** What an extractor reads: the request, its resolved references, the site configuration. */
export interface Scope {
  sr: ServiceRequest;
  ctx: FhirOrderContext;
  config: FhirOrderMappingConfig;
}

export const EMPTY: Extracted = { lines: [] };

/** A value stored as read from one place (`source`), with the quirks met on the way if any. */
export function readFrom(value: string, source: string, quirks?: ToleratedQuirk[]): Extracted {
  return { value, lines: [{ suffix: '', source, value }], ...(quirks ? { quirks } : {}) };
}

/**
 * Identifier types as senders write them in `Identifier.type.text` alone, with no coding:
 * Epic's Patient.identifier is `{"type": {"text": "MRN"}, …}` beside `CEID`, `EPI`, `FHIR`
 * and `EXTERNAL` ones (open.epic.com Patient.Read (R4)). A text that is a v2-0203 code (or
 * `MRN`), or the table's display of one, is read as that code; any other text is no type.
 * Unread, no identifier of such a patient was a record number: the order was known by the
 * first (the CEID), which no PACS holds as PatientID, so its study never matched.
 */
const TYPE_TEXTS: Readonly<Record<string, string>> = {
  'MEDICAL RECORD NUMBER': 'MR',
  'PATIENT INTERNAL IDENTIFIER': 'PI',
  'SOCIAL SECURITY NUMBER': 'SS',
  'PLACER IDENTIFIER': 'PLAC',
  'FILLER IDENTIFIER': 'FILL',
  'ACCESSION ID': 'ACSN',
  // Epic's ServiceRequest.identifier: `{"type": {"text": "Accession Number"}, …}`, no coding
  'ACCESSION NUMBER': 'ACSN',
};

/**
 * Identifier types coded in another code system than v2-0203, as `system|code` → the v2-0203
 * code they mean. DICOM's 121022 "Accession Number" (PS3.16 CID 7, system DCM) is how IHE
 * and DICOM-based profiles type the accession. Read as the coding's own code, it was no
 * accession: the order had none, and its study was never found by it.
 */
const TYPE_CODINGS: Readonly<Record<string, string>> = {
  'http://dicom.nema.org/resources/ontology/DCM|121022': 'ACSN',
};
const TEXT_CODES: ReadonlySet<string> = new Set([
  ...PATIENT_RECORD_ID_TYPES,
  ...NOT_A_RECORD_ID_TYPES,
  'PLAC',
  'FILL',
  'ACSN',
]);

/** The v2-0203 code `Identifier.type.text` names, when it names one (see TYPE_TEXTS). */
export function typeFromText(id: FhirIdentifier): string | undefined {
  if (id.type?.coding?.some((c) => c.code) || typeof id.type?.text !== 'string') return undefined;
  const text = id.type.text.trim().toUpperCase();
  return TEXT_CODES.has(text) ? text : TYPE_TEXTS[text];
}

/** The v2-0203 type code of a FHIR identifier, if typed that way (by bare code, or by text). */
export function typeCode(id: FhirIdentifier): string | undefined {
  const coding = id.type?.coding?.find((c) => c.system === V2_0203 || c.system === undefined);
  const mapped = id.type?.coding
    ?.map((c) => TYPE_CODINGS[`${c.system ?? ''}|${c.code ?? ''}`])
    .find((code) => code !== undefined);
  return coding?.code ?? mapped ?? id.type?.coding?.[0]?.code ?? typeFromText(id);
}

/**
 * An identifier's value without the spaces around it (`unpadded`: a padded ` ACC-1 ` is the
 * accession `ACC-1`, as in HL7); undefined when it has none or only spaces.
 */
export function identifierValue(id: FhirIdentifier): string | undefined {
  return typeof id.value === 'string' ? unpadded(id.value) : undefined;
}

export function toIdentifier(id: FhirIdentifier): Identifier | undefined {
  const value = identifierValue(id);
  if (value === undefined) return undefined;
  const out: Identifier = { value };
  const system = typeof id.system === 'string' ? unpadded(id.system) : undefined;
  if (system) out.system = system;
  const type = typeCode(id);
  if (type) out.type = type;
  return out;
}

export function srIdentifier(
  sr: ServiceRequest,
  type: string,
): { id: FhirIdentifier; index: number } | undefined {
  const index = (sr.identifier ?? []).findIndex(
    (i) => typeCode(i) === type && identifierValue(i) !== undefined,
  );
  return index >= 0 ? { id: sr.identifier![index]!, index } : undefined;
}

/**
 * The request's placer identifier: the first typed PLAC (v2-0203), else the first untyped
 * identifier (many EHRs send one untyped business identifier, R4 servicerequest.html#identifier).
 * An identifier typed otherwise (VN, MR, ACSN, a local type) is never the order's number: one
 * accession covers several requested procedures, one visit several orders.
 */
export function placerIdentifierOf(
  sr: ServiceRequest,
): { id: FhirIdentifier; index: number; untyped: boolean } | undefined {
  const typed = srIdentifier(sr, 'PLAC');
  if (typed) return { ...typed, untyped: false };
  const index = (sr.identifier ?? []).findIndex(
    (i) => identifierValue(i) !== undefined && typeCode(i) === undefined,
  );
  return index >= 0 ? { id: sr.identifier![index]!, index, untyped: true } : undefined;
}

export function identifierLines(prefix: string, id: Identifier, source: string): LineageLine[] {
  const lines: LineageLine[] = [
    { suffix: `${prefix}.value`, source: `${source}.value`, value: id.value },
  ];
  if (id.system)
    lines.push({ suffix: `${prefix}.system`, source: `${source}.system`, value: id.system });
  if (id.type) lines.push({ suffix: `${prefix}.type`, source: `${source}.type`, value: id.type });
  return lines;
}

/**
 * The name to use (R4 datatypes.html#HumanName): `official` or `usual` first, never one whose
 * use is `old` or whose period has ended, else the first.
 */
export function currentName(
  names: HumanName[] | undefined,
): { name: HumanName; index: number } | undefined {
  if (!names || names.length === 0) return undefined;
  const live = names
    .map((name, index) => ({ name, index }))
    .filter(({ name }) => name.use !== 'old' && !name.period?.end);
  const pick = live.find(({ name }) => name.use === 'official') ??
    live.find(({ name }) => name.use === 'usual') ??
    live[0] ?? { name: names[0]!, index: 0 };
  return pick;
}

/**
 * The values of a repeating primitive: R4 JSON writes `null` where a repetition has no value,
 * only an extension (json.html#primitive: `"given": [null, "Peter"]` beside `"_given":
 * [{data-absent-reason}, null]`). Kept, the null reached the upstream metadata's PN, whose
 * builder threw: the order's place job failed at every attempt.
 */
function present(values: ReadonlyArray<string | null> | undefined): string[] {
  return (values ?? []).filter((v): v is string => typeof v === 'string' && v !== '');
}

export function toPersonName(name: HumanName): PersonName {
  const out: PersonName = {};
  if (name.family) out.family = name.family;
  const given = present(name.given);
  const prefix = present(name.prefix);
  const suffix = present(name.suffix);
  if (given.length) out.given = given;
  if (prefix.length) out.prefix = prefix.join(' ');
  if (suffix.length) out.suffix = suffix.join(' ');
  if (!out.family && !out.given && name.text) out.family = name.text;
  return out;
}

export function nameLines(prefix: string, name: PersonName, source: string): LineageLine[] {
  const lines: LineageLine[] = [];
  if (name.family)
    lines.push({ suffix: `${prefix}.family`, source: `${source}.family`, value: name.family });
  name.given?.forEach((g, i) =>
    lines.push({ suffix: `${prefix}.given[${i}]`, source: `${source}.given[${i}]`, value: g }),
  );
  if (name.prefix)
    lines.push({ suffix: `${prefix}.prefix`, source: `${source}.prefix`, value: name.prefix });
  if (name.suffix)
    lines.push({ suffix: `${prefix}.suffix`, source: `${source}.suffix`, value: name.suffix });
  return lines;
}

/** A credential or generational suffix as it follows a name in a display ("MD", "PA-C", "Jr."). */
const NAME_SUFFIX =
  /^(M\.?D\.?|D\.?O\.?|Ph\.?D\.?|R\.?N\.?|N\.?P\.?|P\.?A\.?(-C)?|APRN|CRNP|DNP|CNM|MBBS|MBChB|FRCR|FRCPC?|DDS|DMD|DPM|Jr\.?|Sr\.?|II|III|IV)$/i;

/**
 * A display such as "Dr. Adam Careful" when the requester cannot be resolved: best effort,
 * recorded as a quirk. EHRs write "Family, Given Middle" (Oracle Health: "Smart, Nancy MD")
 * or "Given Family, Credential" (Epic: "Physician Family Medicine, MD"): what comes before a
 * comma followed by a name is the family name, and credentials (after a comma or at the end)
 * are the suffix. Split on spaces alone, "Stern, Carl" was family "Carl", given "Stern,".
 */
export function nameFromDisplay(display: unknown): PersonName {
  if (typeof display !== 'string') return {};
  const parts = display
    .split(',')
    .map((p) => p.trim().replace(/\s+/g, ' '))
    .filter(Boolean);
  const suffixes: string[] = [];
  while (parts.length > 1 && NAME_SUFFIX.test(parts[parts.length - 1]!))
    suffixes.unshift(parts.pop()!);
  const out: PersonName = {};
  let family: string | undefined;
  let words: string[];
  if (parts.length > 1) {
    family = parts[0];
    words = parts.slice(1).join(' ').split(' ');
  } else {
    words = (parts[0] ?? '').split(' ').filter(Boolean);
  }
  while (words.length > (family ? 0 : 1) && NAME_SUFFIX.test(words[words.length - 1]!))
    suffixes.unshift(words.pop()!);
  if (words.length > (family ? 0 : 1) && /^(dr|prof|mr|mrs|ms)\.?$/i.test(words[0]!))
    out.prefix = words.shift();
  out.family = family ?? words.pop();
  if (words.length) out.given = words;
  if (suffixes.length) out.suffix = suffixes.join(' ');
  return out;
}

export function codedFrom(concept: CodeableConcept, preferred?: Coding): CodedConcept {
  const coding = preferred ?? concept.coding?.[0];
  const out: CodedConcept = {};
  if (coding?.code) out.code = coding.code;
  if (coding?.system) out.system = coding.system;
  const display = coding?.display ?? concept.text;
  if (display) out.display = display;
  return out;
}

export function codingKey(
  config: FhirOrderMappingConfig,
  system: string | undefined,
): string | undefined {
  if (system === undefined) return undefined;
  // own keys only: a system `constructor` found Object's, a function taken for a mnemonic
  return Object.hasOwn(config.systemAliases, system) ? config.systemAliases[system] : system;
}

/** The coding of ServiceRequest.code the product table knows, else the first one. */
export function pickProcedureCoding(
  concept: CodeableConcept | undefined,
  config: FhirOrderMappingConfig,
): { coding?: Coding; index: number; products: readonly string[] } {
  const codings = concept?.coding ?? [];
  for (let i = 0; i < codings.length; i++) {
    const c = codings[i]!;
    const hit = lookupProducts(config.productTable, c.code, codingKey(config, c.system));
    if (hit.row) return { coding: c, index: i, products: hit.products };
  }
  return { coding: codings[0], index: 0, products: [] };
}

/** The resource type a reference names (`Organization/1`, `…/Device/7/_history/2`, `type`), if any. */
export function referencedType(ref: Reference | undefined): string | undefined {
  const r = typeof ref?.reference === 'string' ? ref.reference : '';
  const named = /(?:^|\/)([A-Z][A-Za-z]+)(?:\/[^/?#]+(?:\/_history\/[^/]+)?|\?.*)$/.exec(r)?.[1];
  return named ?? (typeof ref?.type === 'string' ? ref.type : undefined);
}

export function referenceOf(ref: Reference | undefined): string | undefined {
  return typeof ref?.reference === 'string' ? ref.reference : undefined;
}

/**
 * Every accession number the order carries: ServiceRequest.identifier of type ACSN, then those
 * of the ImagingStudies it refers to (R4 ServiceRequest notes), each with where it is (`path`:
 * FHIRPath for an OperationOutcome, `source`: for lineage).
 */
function accessionCandidates({
  sr,
  ctx,
}: Scope): Array<{ value: string; path: string; source: string; id: FhirIdentifier }> {
  const out: Array<{ value: string; path: string; source: string; id: FhirIdentifier }> = [];
  (sr.identifier ?? []).forEach((i, index) => {
    const value = identifierValue(i);
    if (typeCode(i) !== 'ACSN' || value === undefined) return;
    const path = `ServiceRequest.identifier[${index}].value`;
    out.push({ value, path, source: path, id: i });
  });
  for (const study of ctx.imagingStudies) {
    (study.resource.identifier ?? []).forEach((i, index) => {
      const value = identifierValue(i);
      if (typeCode(i) !== 'ACSN' || value === undefined) return;
      out.push({
        value,
        path: `${study.path ?? 'ImagingStudy'}.identifier[${index}].value`,
        source: `${study.source} ImagingStudy.identifier[${index}].value`,
        id: i,
      });
    });
  }
  return out;
}

/**
 * The order's accession number: the first ACSN identifier of the ServiceRequest, else of an
 * ImagingStudy it refers to. Every other one must carry the same number (as HL7's IPC-1 and
 * OBR-18 must agree): the accession is what the study is found and checked by (DICOM
 * (0008,0050)), so two numbers name two exams and the order has no one study. The first was
 * taken silently; an ImagingStudy of another exam gave the order its Study Instance UID.
 */
export function accessionOf(scope: Scope): Extracted {
  const [taken, ...others] = accessionCandidates(scope);
  if (!taken) return EMPTY;
  const issues: FhirMappingIssue[] = others
    .filter((o) => o.value !== taken.value)
    .map((o) => ({
      severity: 'error',
      code: 'business-rule',
      expression: o.path,
      diagnostics: `${o.path}: the accession number "${o.value}" differs from ${taken.path} ("${taken.value}"); an order is one exam with one accession number, and a study is used only when its accession matches`,
    }));
  if (issues.length > 0) return { value: undefined, lines: [], issues };
  return readFrom(taken.value, taken.source);
}

/**
 * Who issued the accession number taken by accessionOf: its identifier's `system` (a URI,
 * `urn:oid:` for an OID: the DICOM Universal Entity ID), and the `assigner`'s identifier value
 * or display (a local name: the Local Namespace Entity ID). Compared with the study's Issuer
 * of Accession Number Sequence (0008,0051).
 */
export function accessionIssuerOf(scope: Scope): Extracted {
  const [taken] = accessionCandidates(scope);
  if (!taken) return EMPTY;
  const at = taken.source.replace(/\.value$/, '');
  const lines: LineageLine[] = [];
  const issuer: AssigningAuthority = {};
  const system = typeof taken.id.system === 'string' ? unpadded(taken.id.system) : undefined;
  if (system) {
    issuer.universalId = system;
    issuer.universalIdType = /^urn:oid:/i.test(system) ? 'ISO' : 'URI';
    lines.push({ suffix: '.universalId', source: `${at}.system`, value: system });
  }
  const assigner = taken.id.assigner;
  const local =
    typeof assigner?.identifier?.value === 'string'
      ? { value: unpadded(assigner.identifier.value), source: `${at}.assigner.identifier.value` }
      : typeof assigner?.display === 'string'
        ? { value: unpadded(assigner.display), source: `${at}.assigner.display` }
        : undefined;
  if (local?.value) {
    issuer.namespace = local.value;
    lines.push({ suffix: '.namespace', source: local.source, value: local.value });
  }
  return lines.length === 0 ? EMPTY : { value: issuer, lines };
}
