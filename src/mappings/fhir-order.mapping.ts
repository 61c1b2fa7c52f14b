import { modifierIssues } from './fhir-modifiers';
import { hasMatchingCharacters, MATCHING_CHARACTERS_MESSAGE } from './dicom-identifiers';
import type {
  CodeableConcept,
  Coding,
  HumanName,
  Identifier as FhirIdentifier,
  ImagingStudy,
  Patient,
  Practitioner,
  PractitionerRole,
  Reference,
  Resource,
  ServiceRequest,
} from '@medplum/fhirtypes';
import type {
  AdministrativeSex,
  CodedConcept,
  Identifier,
  MappedField,
  OrderAction,
  OrderPriority,
  OrderRequest,
  PersonName,
  Practitioner as OrderPractitioner,
  ToleratedQuirk,
} from '../domain/order-request';
import {
  DEFAULT_FHIR_ORDER_MAPPING_CONFIG,
  type FhirOrderMappingConfig,
} from './fhir-order.config';
import { lookupProducts } from './product-table';

/** Bumped whenever a row or an extractor changes meaning; stored with each order. */
export const FHIR_ORDER_MAPPING_VERSION = 'fhir-order-mapping/1.0.0';

/** HL7 v2 table 0203 identifier types, as FHIR R4 carries them (v2-0203 code system). */
export const V2_0203 = 'http://terminology.hl7.org/CodeSystem/v2-0203';
/** DICOM UIDs as FHIR identifiers (R4 imagingstudy.html: system urn:dicom:uid, value urn:oid:…). */
export const DICOM_UID_SYSTEM = 'urn:dicom:uid';

/** A resolved resource and where it came from (for lineage): `contained #p1`, `Bundle.entry[1]`, `EHR Patient/123`. */
export interface Located<T extends Resource> {
  resource: T;
  source: string;
}

/** Everything the ServiceRequest refers to, already resolved by the front door (I/O stays out of here). */
export interface FhirOrderContext {
  patient?: Located<Patient>;
  imagingStudies: Located<ImagingStudy>[];
  requester?: Located<Practitioner | PractitionerRole>;
  /** reasonReference targets that could be resolved, keyed by their reference string. */
  reasons: Map<string, Located<Resource>>;
}

/** How the ServiceRequest reached us decides what a status means. */
export type FhirInteraction = 'create' | 'update';

/** One problem, shaped for an OperationOutcome issue (R4 issue-type codes). */
export interface FhirMappingIssue {
  severity: 'error' | 'warning';
  code: 'required' | 'value' | 'business-rule' | 'not-supported' | 'code-invalid' | 'not-found';
  expression: string;
  diagnostics: string;
}

export interface FhirMappingResult {
  mappingVersion: string;
  outcome: 'accept' | 'error';
  request?: OrderRequest;
  lineage: MappedField[];
  quirks: ToleratedQuirk[];
  issues: FhirMappingIssue[];
}

type ExtractorId =
  | 'patient-identifiers'
  | 'patient-name'
  | 'patient-birth-date'
  | 'patient-gender'
  | 'placer-identifier'
  | 'filler-identifier'
  | 'accession'
  | 'requisition'
  | 'procedure'
  | 'modality'
  | 'study-uid'
  | 'priority'
  | 'requester'
  | 'reasons'
  | 'occurrence'
  | 'notes'
  | 'products';

/** One row of the declarative table: target, where it is read (FHIRPath-like), how, under which rule ID. */
export interface FhirFieldRule {
  readonly target: string;
  readonly source: string;
  readonly extract: ExtractorId;
  readonly required: boolean;
  readonly ruleId: string;
}

/**
 * The FHIR R4 → OrderRequest table, one row per target. Clauses: R4 servicerequest.html
 * (identifier, requisition, code, priority, requester, reasonCode/reasonReference,
 * occurrence[x], note), patient.html (identifier, name, gender, birthDate), imagingstudy.html
 * (identifier urn:dicom:uid = Study Instance UID, modality, series.modality); identifier types
 * PLAC/FILL/ACSN from v2 table 0203 as used by the HL7 Imaging ServiceRequest IG.
 * `products` is last: unknown codes follow the configured rule (FhirOrderMappingConfig).
 */
// prettier-ignore
export const FHIR_ORDER_FIELD_MAP = [
  { target: 'patient.identifiers', source: 'Patient.identifier', extract: 'patient-identifiers', required: true, ruleId: 'fhir.patient.identifiers' },
  { target: 'patient.name', source: 'Patient.name', extract: 'patient-name', required: false, ruleId: 'fhir.patient.name' },
  { target: 'patient.birthDate', source: 'Patient.birthDate', extract: 'patient-birth-date', required: false, ruleId: 'fhir.patient.birth-date' },
  { target: 'patient.sex', source: 'Patient.gender', extract: 'patient-gender', required: false, ruleId: 'fhir.patient.gender' },
  { target: 'placerOrderNumber', source: "ServiceRequest.identifier.where(type.coding.code='PLAC') | ServiceRequest.identifier.first()", extract: 'placer-identifier', required: false, ruleId: 'fhir.order.placer-number' },
  { target: 'fillerOrderNumber', source: "ServiceRequest.identifier.where(type.coding.code='FILL')", extract: 'filler-identifier', required: false, ruleId: 'fhir.order.filler-number' },
  { target: 'accessionNumber', source: "ServiceRequest.identifier.where(type.coding.code='ACSN') | ImagingStudy.identifier.where(type.coding.code='ACSN')", extract: 'accession', required: false, ruleId: 'fhir.order.accession' },
  { target: 'placerGroupNumber', source: 'ServiceRequest.requisition', extract: 'requisition', required: false, ruleId: 'fhir.order.requisition' },
  { target: 'procedure', source: 'ServiceRequest.code', extract: 'procedure', required: false, ruleId: 'fhir.order.procedure' },
  { target: 'modality', source: 'ImagingStudy.modality | ImagingStudy.series.modality', extract: 'modality', required: false, ruleId: 'fhir.order.modality' },
  { target: 'studyInstanceUid', source: "ImagingStudy.identifier.where(system='urn:dicom:uid')", extract: 'study-uid', required: false, ruleId: 'fhir.order.study-uid' },
  { target: 'priority', source: 'ServiceRequest.priority', extract: 'priority', required: false, ruleId: 'fhir.order.priority' },
  { target: 'orderingProvider', source: 'ServiceRequest.requester', extract: 'requester', required: false, ruleId: 'fhir.order.requester' },
  { target: 'reasonForStudy', source: 'ServiceRequest.reasonCode | ServiceRequest.reasonReference', extract: 'reasons', required: false, ruleId: 'fhir.order.reason' },
  { target: 'requestedAt', source: 'ServiceRequest.occurrence[x] | ServiceRequest.authoredOn', extract: 'occurrence', required: false, ruleId: 'fhir.order.occurrence' },
  { target: 'notes', source: 'ServiceRequest.note.text', extract: 'notes', required: false, ruleId: 'fhir.order.notes' },
  { target: 'products', source: 'ServiceRequest.code.coding', extract: 'products', required: false, ruleId: 'fhir.order.products' },
] as const satisfies readonly FhirFieldRule[];

interface Line {
  suffix: string;
  source: string;
  value: string;
}

interface Extracted {
  value?: unknown;
  lines: Line[];
  issues?: FhirMappingIssue[];
  quirks?: ToleratedQuirk[];
}

interface Scope {
  sr: ServiceRequest;
  ctx: FhirOrderContext;
  config: FhirOrderMappingConfig;
}

const EMPTY: Extracted = { lines: [] };

/** The v2-0203 type code of a FHIR identifier, if typed that way (or by bare code). */
function typeCode(id: FhirIdentifier): string | undefined {
  const coding = id.type?.coding?.find((c) => c.system === V2_0203 || c.system === undefined);
  return coding?.code ?? id.type?.coding?.[0]?.code;
}

function toIdentifier(id: FhirIdentifier): Identifier | undefined {
  if (!id.value) return undefined;
  const out: Identifier = { value: id.value };
  if (id.system) out.system = id.system;
  const type = typeCode(id);
  if (type) out.type = type;
  return out;
}

function srIdentifier(
  sr: ServiceRequest,
  type: string,
): { id: FhirIdentifier; index: number } | undefined {
  const index = (sr.identifier ?? []).findIndex((i) => typeCode(i) === type && i.value);
  return index >= 0 ? { id: sr.identifier![index]!, index } : undefined;
}

function identifierLines(prefix: string, id: Identifier, source: string): Line[] {
  const lines: Line[] = [{ suffix: `${prefix}.value`, source: `${source}.value`, value: id.value }];
  if (id.system)
    lines.push({ suffix: `${prefix}.system`, source: `${source}.system`, value: id.system });
  if (id.type) lines.push({ suffix: `${prefix}.type`, source: `${source}.type`, value: id.type });
  return lines;
}

/**
 * The name to use (R4 datatypes.html#HumanName): `official` or `usual` first, never one whose
 * use is `old` or whose period has ended, else the first.
 */
function currentName(
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

function toPersonName(name: HumanName): PersonName {
  const out: PersonName = {};
  if (name.family) out.family = name.family;
  if (name.given?.length) out.given = [...name.given];
  if (name.prefix?.length) out.prefix = name.prefix.join(' ');
  if (name.suffix?.length) out.suffix = name.suffix.join(' ');
  if (!out.family && !out.given && name.text) out.family = name.text;
  return out;
}

function nameLines(prefix: string, name: PersonName, source: string): Line[] {
  const lines: Line[] = [];
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

/** A display such as "Dr. Adam Careful" when the requester cannot be resolved: best effort, recorded as a quirk. */
function nameFromDisplay(display: unknown): PersonName {
  if (typeof display !== 'string') return {};
  const words = display.trim().split(/\s+/);
  const out: PersonName = {};
  if (words.length > 1 && /^(dr|prof|mr|mrs|ms)\.?$/i.test(words[0]!)) out.prefix = words.shift();
  out.family = words.pop();
  if (words.length) out.given = words;
  return out;
}

function codedFrom(concept: CodeableConcept, preferred?: Coding): CodedConcept {
  const coding = preferred ?? concept.coding?.[0];
  const out: CodedConcept = {};
  if (coding?.code) out.code = coding.code;
  if (coding?.system) out.system = coding.system;
  const display = coding?.display ?? concept.text;
  if (display) out.display = display;
  return out;
}

function codingKey(config: FhirOrderMappingConfig, system: string | undefined): string | undefined {
  return system === undefined ? undefined : (config.systemAliases[system] ?? system);
}

/** The coding of ServiceRequest.code the product table knows, else the first one. */
function pickProcedureCoding(
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

function referenceOf(ref: Reference | undefined): string | undefined {
  return typeof ref?.reference === 'string' ? ref.reference : undefined;
}

/** ServiceRequest.identifier of type ACSN, else an ImagingStudy's (R4 ServiceRequest notes). */
function accessionOf({ sr, ctx }: Scope): Extracted {
  const found = srIdentifier(sr, 'ACSN');
  if (found) {
    return {
      value: found.id.value,
      lines: [
        {
          suffix: '',
          source: `ServiceRequest.identifier[${found.index}].value`,
          value: found.id.value!,
        },
      ],
    };
  }
  for (const study of ctx.imagingStudies) {
    const index = (study.resource.identifier ?? []).findIndex(
      (i) => typeCode(i) === 'ACSN' && i.value,
    );
    if (index >= 0) {
      const value = study.resource.identifier![index]!.value!;
      return {
        value,
        lines: [
          {
            suffix: '',
            source: `${study.source} ImagingStudy.identifier[${index}].value`,
            value,
          },
        ],
      };
    }
  }
  return EMPTY;
}

const EXTRACTORS: Record<ExtractorId, (s: Scope) => Extracted> = {
  'patient-identifiers': ({ ctx }) => {
    const p = ctx.patient;
    if (!p) return EMPTY;
    const lines: Line[] = [];
    const ids: Identifier[] = [];
    (p.resource.identifier ?? []).forEach((raw, i) => {
      const id = toIdentifier(raw);
      if (!id) return;
      lines.push(...identifierLines(`[${ids.length}]`, id, `${p.source} Patient.identifier[${i}]`));
      ids.push(id);
    });
    return ids.length ? { value: ids, lines } : EMPTY;
  },
  'patient-name': ({ ctx }) => {
    const p = ctx.patient;
    const picked = currentName(p?.resource.name);
    if (!p || !picked) return EMPTY;
    const name = toPersonName(picked.name);
    const quirks: ToleratedQuirk[] =
      picked.index > 0
        ? [
            {
              code: 'fhir-name-not-first',
              detail: `Patient.name[${picked.index}] used: earlier names are old or ended`,
            },
          ]
        : [];
    return {
      value: name,
      lines: nameLines('', name, `${p.source} Patient.name[${picked.index}]`),
      quirks,
    };
  },
  'patient-birth-date': ({ ctx }) => {
    const b = ctx.patient?.resource.birthDate;
    return b
      ? {
          value: b,
          lines: [{ suffix: '', source: `${ctx.patient!.source} Patient.birthDate`, value: b }],
        }
      : EMPTY;
  },
  'patient-gender': ({ ctx }) => {
    // R4 administrative-gender and our AdministrativeSex share their four codes.
    const g = ctx.patient?.resource.gender;
    if (!g) return EMPTY;
    const sex: AdministrativeSex = g;
    return {
      value: sex,
      lines: [{ suffix: '', source: `${ctx.patient!.source} Patient.gender`, value: g }],
    };
  },
  'placer-identifier': ({ sr }) => {
    const typed = srIdentifier(sr, 'PLAC');
    let found = typed;
    const quirks: ToleratedQuirk[] = [];
    if (!found) {
      // Many EHRs send one untyped business identifier: it is the placer's (R4 servicerequest.html#identifier).
      const index = (sr.identifier ?? []).findIndex(
        (i) => i.value && !['ACSN', 'FILL'].includes(typeCode(i) ?? ''),
      );
      if (index >= 0) {
        found = { id: sr.identifier![index]!, index };
        quirks.push({
          code: 'fhir-placer-untyped',
          detail: `ServiceRequest.identifier[${index}] has no PLAC type; used as placer number`,
        });
      }
    }
    if (!found) return EMPTY;
    const id = toIdentifier(found.id)!;
    return {
      value: id,
      lines: identifierLines('', id, `ServiceRequest.identifier[${found.index}]`),
      quirks,
    };
  },
  'filler-identifier': ({ sr }) => {
    const found = srIdentifier(sr, 'FILL');
    if (!found) return EMPTY;
    const id = toIdentifier(found.id)!;
    return {
      value: id,
      lines: identifierLines('', id, `ServiceRequest.identifier[${found.index}]`),
    };
  },
  accession: (scope) => {
    // An accession with DICOM matching characters would query other patients' studies.
    const out = accessionOf(scope);
    if (typeof out.value === 'string' && hasMatchingCharacters(out.value)) {
      const at = out.lines[0]?.source ?? 'ServiceRequest.identifier';
      return {
        value: undefined,
        lines: [],
        issues: [
          {
            severity: 'error',
            code: 'value',
            expression: at.includes(' ') ? 'ServiceRequest.supportingInfo' : at,
            diagnostics: `${at}: ${MATCHING_CHARACTERS_MESSAGE}`,
          },
        ],
      };
    }
    return out;
  },
  requisition: ({ sr }) => {
    const id = sr.requisition ? toIdentifier(sr.requisition) : undefined;
    return id ? { value: id, lines: identifierLines('', id, 'ServiceRequest.requisition') } : EMPTY;
  },
  procedure: ({ sr, config }) => {
    if (!sr.code) return EMPTY;
    const picked = pickProcedureCoding(sr.code, config);
    const coded = codedFrom(sr.code, picked.coding);
    if (!coded.code && !coded.display) return EMPTY;
    const source = picked.coding
      ? `ServiceRequest.code.coding[${picked.index}]`
      : 'ServiceRequest.code.text';
    const lines: Line[] = [];
    if (coded.code) lines.push({ suffix: '.code', source: `${source}.code`, value: coded.code });
    if (coded.system)
      lines.push({ suffix: '.system', source: `${source}.system`, value: coded.system });
    if (coded.display)
      lines.push({ suffix: '.display', source: `${source}.display`, value: coded.display });
    return { value: coded, lines };
  },
  modality: ({ ctx }) => {
    for (const study of ctx.imagingStudies) {
      const direct = study.resource.modality?.find((m) => m.code);
      if (direct?.code) {
        return {
          value: direct.code,
          lines: [
            { suffix: '', source: `${study.source} ImagingStudy.modality`, value: direct.code },
          ],
        };
      }
      const index = (study.resource.series ?? []).findIndex((s) => s.modality?.code);
      if (index >= 0) {
        const code = study.resource.series![index]!.modality.code!;
        return {
          value: code,
          lines: [
            {
              suffix: '',
              source: `${study.source} ImagingStudy.series[${index}].modality`,
              value: code,
            },
          ],
        };
      }
    }
    return EMPTY;
  },
  'study-uid': ({ ctx }) => {
    for (const study of ctx.imagingStudies) {
      const ids = study.resource.identifier ?? [];
      const index = ids.findIndex((i) => i.system === DICOM_UID_SYSTEM && i.value);
      if (index < 0) continue;
      const raw = ids[index]!.value!;
      const quirks: ToleratedQuirk[] = [];
      // R4 imagingstudy.html: the Study Instance UID is an identifier with system urn:dicom:uid
      // and the UID as a urn:oid: URI. Some servers send the bare UID: tolerated.
      let uid = raw;
      if (raw.startsWith('urn:oid:')) uid = raw.slice('urn:oid:'.length);
      else
        quirks.push({
          code: 'fhir-dicom-uid-bare',
          detail: `${study.source} ImagingStudy.identifier[${index}] lacks the urn:oid: prefix`,
        });
      if (!/^[0-9]+(\.[0-9]+)*$/.test(uid) || uid.length > 64) {
        return {
          lines: [],
          issues: [
            {
              severity: 'error',
              code: 'value',
              expression: `ImagingStudy.identifier[${index}].value`,
              diagnostics:
                'not a DICOM UID (digits and dots, at most 64 characters; DICOM PS3.5 §9.1)',
            },
          ],
        };
      }
      return {
        value: uid,
        lines: [
          {
            suffix: '',
            source: `${study.source} ImagingStudy.identifier[${index}].value`,
            value: uid,
          },
        ],
        quirks,
      };
    }
    return EMPTY;
  },
  priority: ({ sr }) => {
    // R4 request-priority and our OrderPriority share their four codes.
    if (!sr.priority) return EMPTY;
    const p: OrderPriority = sr.priority;
    return { value: p, lines: [{ suffix: '', source: 'ServiceRequest.priority', value: p }] };
  },
  requester: ({ sr, ctx }) => {
    if (!sr.requester) return EMPTY;
    const out: OrderPractitioner = {};
    const lines: Line[] = [];
    const quirks: ToleratedQuirk[] = [];
    const resolved = ctx.requester;
    if (resolved?.resource.resourceType === 'Practitioner') {
      const p = resolved.resource;
      const idIndex = (p.identifier ?? []).findIndex((i) => i.value);
      if (idIndex >= 0) {
        out.identifier = toIdentifier(p.identifier![idIndex]!);
        lines.push(
          ...identifierLines(
            '.identifier',
            out.identifier!,
            `${resolved.source} Practitioner.identifier[${idIndex}]`,
          ),
        );
      }
      const picked = currentName(p.name);
      if (picked) {
        out.name = toPersonName(picked.name);
        lines.push(
          ...nameLines('.name', out.name, `${resolved.source} Practitioner.name[${picked.index}]`),
        );
      }
    }
    if (!out.identifier && sr.requester.identifier) {
      out.identifier = toIdentifier(sr.requester.identifier);
      if (out.identifier)
        lines.push(
          ...identifierLines('.identifier', out.identifier, 'ServiceRequest.requester.identifier'),
        );
    }
    if (!out.name && sr.requester.display) {
      out.name = nameFromDisplay(sr.requester.display);
      lines.push(...nameLines('.name', out.name, 'ServiceRequest.requester.display'));
      quirks.push({
        code: 'fhir-requester-display-only',
        detail: 'requester name split from Reference.display (not resolvable)',
      });
    }
    return out.identifier || out.name ? { value: out, lines, quirks } : EMPTY;
  },
  reasons: ({ sr, ctx }) => {
    const reasons: CodedConcept[] = [];
    const lines: Line[] = [];
    (sr.reasonCode ?? []).forEach((cc, i) => {
      const coded = codedFrom(cc);
      if (!coded.code && !coded.display) return;
      lines.push({
        suffix: `[${reasons.length}]`,
        source: `ServiceRequest.reasonCode[${i}]`,
        value: coded.code ?? coded.display!,
      });
      reasons.push(coded);
    });
    (sr.reasonReference ?? []).forEach((ref, i) => {
      const key = referenceOf(ref);
      const target = key ? ctx.reasons.get(key) : undefined;
      const code = (target?.resource as { code?: CodeableConcept } | undefined)?.code;
      const coded = code ? codedFrom(code) : ref.display ? { display: ref.display } : undefined;
      if (!coded || (!coded.code && !coded.display)) return;
      const source = code
        ? `${target!.source} ${target!.resource.resourceType}.code`
        : `ServiceRequest.reasonReference[${i}].display`;
      lines.push({ suffix: `[${reasons.length}]`, source, value: coded.code ?? coded.display! });
      reasons.push(coded);
    });
    return reasons.length ? { value: reasons, lines } : EMPTY;
  },
  occurrence: ({ sr }) => {
    const candidates: Array<[string | undefined, string]> = [
      [sr.occurrenceDateTime, 'ServiceRequest.occurrenceDateTime'],
      [sr.occurrencePeriod?.start, 'ServiceRequest.occurrencePeriod.start'],
      [sr.occurrenceTiming?.event?.[0], 'ServiceRequest.occurrenceTiming.event[0]'],
      [sr.authoredOn, 'ServiceRequest.authoredOn'],
    ];
    const hit = candidates.find(([v]) => Boolean(v));
    if (!hit) return EMPTY;
    // A dateTime with a time is normalised to a UTC instant; a date (or partial date) stays as sent.
    const raw = hit[0]!;
    const value =
      raw.includes('T') && !Number.isNaN(Date.parse(raw)) ? new Date(raw).toISOString() : raw;
    return { value, lines: [{ suffix: '', source: hit[1], value }] };
  },
  notes: ({ sr }) => {
    const notes = (sr.note ?? []).map((n) => n.text).filter((t): t is string => Boolean(t));
    return notes.length
      ? {
          value: notes,
          lines: notes.map((n, i) => ({
            suffix: `[${i}]`,
            source: `ServiceRequest.note[${i}].text`,
            value: n,
          })),
        }
      : EMPTY;
  },
  products: ({ sr, config }) => {
    const picked = pickProcedureCoding(sr.code, config);
    if (picked.products.length > 0) {
      return {
        value: [...picked.products],
        lines: picked.products.map((p, i) => ({
          suffix: `[${i}]`,
          source: `ServiceRequest.code.coding[${picked.index}]`,
          value: p,
        })),
      };
    }
    const rule = config.unknownProcedure;
    switch (rule.kind) {
      case 'reject':
        return {
          value: [],
          lines: [],
          issues: [
            {
              severity: 'error',
              code: 'code-invalid',
              expression: sr.code?.coding?.length
                ? 'ServiceRequest.code.coding'
                : 'ServiceRequest.code',
              diagnostics: sr.code?.coding?.length
                ? `no AI product is configured for ${sr.code.coding.map((c) => `${c.system ?? '(no system)'}|${c.code ?? ''}`).join(', ')}`
                : 'a coded procedure is required to choose the AI products',
            },
          ],
        };
      case 'default-products':
        return {
          value: [...rule.products],
          lines: rule.products.map((p, i) => ({
            suffix: `[${i}]`,
            source: 'ServiceRequest.code (unknown: default rule)',
            value: p,
          })),
          quirks: [
            {
              code: 'fhir-unknown-procedure',
              detail: 'procedure not in the product table: default products used',
            },
          ],
        };
      default:
        return rule satisfies never;
    }
  },
};

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split('.');
  let obj = target;
  for (const key of keys.slice(0, -1)) {
    if (typeof obj[key] !== 'object' || obj[key] === null) obj[key] = {};
    obj = obj[key] as Record<string, unknown>;
  }
  obj[keys[keys.length - 1]!] = value;
}

/**
 * What the ServiceRequest asks for (R4 request-status): `revoked` and `entered-in-error`
 * cancel; a new order must be `active` (a draft or on-hold request is not yet an order); an
 * update with any other status changes the order's metadata.
 */
export function actionFor(
  sr: ServiceRequest,
  interaction: FhirInteraction,
): { action: OrderAction } | { issue: FhirMappingIssue } {
  const status = sr.status;
  if (status === 'revoked' || status === 'entered-in-error') return { action: 'cancel' };
  if (interaction === 'update') return { action: 'update' };
  if (status === 'active') return { action: 'create' };
  return {
    issue: {
      severity: 'error',
      code: 'business-rule',
      expression: 'ServiceRequest.status',
      diagnostics: `a new order must have status active (got ${status}); draft or on-hold requests are sent when they become active`,
    },
  };
}

/** Maps one ServiceRequest (and what it refers to) into the source-neutral order. Pure. */
export function mapServiceRequest(
  sr: ServiceRequest,
  ctx: FhirOrderContext,
  interaction: FhirInteraction,
  config: FhirOrderMappingConfig = DEFAULT_FHIR_ORDER_MAPPING_CONFIG,
): FhirMappingResult {
  const issues: FhirMappingIssue[] = [];
  const quirks: ToleratedQuirk[] = [];
  const lineage: MappedField[] = [];
  // Modifiers first: a request whose meaning a modifier changes is never turned into an order.
  issues.push(...modifierIssues(sr, 'ServiceRequest'));
  for (const [what, located] of [
    ['Patient', ctx.patient],
    ['requester', ctx.requester],
    ...ctx.imagingStudies.map((s, i) => [`ImagingStudy[${i}]`, s] as const),
  ] as const) {
    // Contained resources were checked with the ServiceRequest.
    if (located && !located.source.startsWith('contained'))
      issues.push(...modifierIssues(located.resource, located.resource.resourceType ?? what));
  }
  if (!config.acceptedIntents.includes(sr.intent)) {
    issues.push({
      severity: 'error',
      code: 'business-rule',
      expression: 'ServiceRequest.intent',
      diagnostics: `intent ${sr.intent} is not an order (accepted: ${config.acceptedIntents.join(', ')})`,
    });
  }
  const decided = actionFor(sr, interaction);
  if ('issue' in decided) issues.push(decided.issue);
  const action: OrderAction = 'action' in decided ? decided.action : 'create';
  lineage.push({
    target: 'action',
    source: 'ServiceRequest.status',
    value: sr.status,
    ruleId: 'fhir.order.action',
  });

  const values: Record<string, unknown> = {
    source: 'fhir',
    action,
    patient: { identifiers: [] },
    products: [],
  };
  const scope: Scope = { sr, ctx, config };
  for (const row of FHIR_ORDER_FIELD_MAP) {
    // A cancel needs no products: unknown procedures only matter for new and changed orders.
    if (row.extract === 'products' && action === 'cancel') continue;
    const out = EXTRACTORS[row.extract](scope);
    if (out.issues) issues.push(...out.issues);
    if (out.quirks) quirks.push(...out.quirks);
    if (out.value === undefined) {
      if (row.required && action !== 'cancel') {
        issues.push({
          severity: 'error',
          code: 'required',
          expression: ctx.patient ? 'Patient.identifier' : 'ServiceRequest.subject',
          diagnostics: `${row.source} is required (${row.target}): the patient must carry at least one identifier`,
        });
      }
      continue;
    }
    setPath(values, row.target, out.value);
    for (const line of out.lines) {
      lineage.push({
        target: `${row.target}${line.suffix}`,
        source: line.source,
        value: line.value,
        ruleId: row.ruleId,
      });
    }
  }
  const errors = issues.filter((i) => i.severity === 'error');
  return {
    mappingVersion: FHIR_ORDER_MAPPING_VERSION,
    outcome: errors.length ? 'error' : 'accept',
    request: errors.length ? undefined : (values as unknown as OrderRequest),
    lineage,
    quirks,
    issues,
  };
}
