import { modifierIssues } from './fhir-modifiers';
import type {
  ImagingStudy,
  Patient,
  Practitioner,
  PractitionerRole,
  Resource,
  ServiceRequest,
} from '@medplum/fhirtypes';
import type {
  MappedField,
  OrderAction,
  OrderRequest,
  ToleratedQuirk,
} from '../domain/order-request';
import { identifierBoundProblems } from '../domain/identifier-bounds';
import { textBoundProblems } from '../domain/text-bounds';
import {
  DEFAULT_FHIR_ORDER_MAPPING_CONFIG,
  type FhirOrderMappingConfig,
} from './fhir-order.config';
import { EXTRACTORS } from './fhir-order.extractors';
import type { Scope } from './fhir-order.extract-helpers';
import { applyRow } from './table-driver';

export { DICOM_UID_SYSTEM, V2_0203 } from './fhir-order.extract-helpers';

/** Bumped whenever a row or an extractor changes meaning; stored with each order. */
export const FHIR_ORDER_MAPPING_VERSION = 'fhir-order-mapping/1.2.2';

/** A resolved resource and where it came from (for lineage): `contained #p1`, `Bundle.entry[1]`, `EHR Patient/123`. */
export interface Located<T extends Resource> {
  resource: T;
  source: string;
  /**
   * Where the resource is in the request, as FHIRPath for an OperationOutcome issue:
   * `ServiceRequest.contained[0]`, `Bundle.entry[0].resource`, `ServiceRequest.subject.resolve()`
   * (read from the EHR). Without it, the resource type.
   */
  path?: string;
}

/** Everything the ServiceRequest refers to, already resolved by the front door (I/O stays out of here). */
export interface FhirOrderContext {
  patient?: Located<Patient>;
  imagingStudies: Located<ImagingStudy>[];
  requester?: Located<Practitioner | PractitionerRole>;
  /** The requester's resource type once resolved (an Organization, a Device…), whatever it is. */
  requesterType?: string;
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

export type ExtractorId =
  | 'patient-identifiers'
  | 'patient-name'
  | 'patient-birth-date'
  | 'patient-gender'
  | 'placer-identifier'
  | 'filler-identifier'
  | 'accession'
  | 'accession-issuer'
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
  { target: 'accessionIssuer', source: "ServiceRequest.identifier.where(type.coding.code='ACSN').system | .assigner", extract: 'accession-issuer', required: false, ruleId: 'fhir.order.accession-issuer' },
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

/**
 * What the ServiceRequest asks for (R4 request-status): on an update, `revoked` and
 * `entered-in-error` cancel and any other status changes the order's metadata; a new order
 * must be `active` (a draft or on-hold request is not yet an order, and a revoked one is a
 * cancel of an order, sent with PUT).
 */
export function actionFor(
  sr: ServiceRequest,
  interaction: FhirInteraction,
): { action: OrderAction } | { issue: FhirMappingIssue } {
  const status = sr.status;
  const cancels = status === 'revoked' || status === 'entered-in-error';
  if (interaction === 'update') return { action: cancels ? 'cancel' : 'update' };
  if (status === 'active') return { action: 'create' };
  return {
    issue: {
      severity: 'error',
      code: 'business-rule',
      expression: 'ServiceRequest.status',
      diagnostics:
        status === undefined
          ? // R4 JSON lets a primitive carry only an extension (`_status`, e.g. data-absent-reason).
            'a new order must have status active; ServiceRequest.status has no value (only an extension)'
          : cancels
            ? `a new order must have status active (got ${status}): to cancel an order, PUT its ServiceRequest/{id} with this status`
            : `a new order must have status active (got ${status}); draft or on-hold requests are sent when they become active`,
    },
  };
}

/**
 * R4 request-status values an update can bring that the order cannot follow: there is no hold
 * upstream (the imaging service's contract has no pause), so the order runs on and the
 * message says so (`fhir-status-not-honoured`, a warning in the audit log) instead of an
 * "order changed" as for any metadata. `completed` is not here: an EHR completes its imaging
 * request when the exam is done, and the AI analysis of it goes on.
 */
const STATUS_NOT_HONOURED: Readonly<Record<string, string>> = {
  'on-hold':
    'the EHR put the request on hold (its authorization withdrawn for now); the order runs on: there is no hold upstream. Revoke the request to stop it',
  draft: 'the EHR set the request back to draft; the order runs on. Revoke the request to stop it',
  unknown: 'the EHR no longer knows the request status; the order runs on',
};

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
      issues.push(
        ...modifierIssues(located.resource, located.path ?? located.resource.resourceType ?? what),
      );
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
  const notHonoured =
    interaction === 'update' && sr.status && Object.hasOwn(STATUS_NOT_HONOURED, sr.status)
      ? STATUS_NOT_HONOURED[sr.status]
      : undefined;
  if (notHonoured) {
    quirks.push({
      code: 'fhir-status-not-honoured',
      detail: `status ${sr.status}: ${notHonoured}`,
    });
  }
  // `replaces` is matched by the front door against the orders held and decided by the
  // intake (inbound-fhir/replaces.matcher.ts, orders/use-cases/replace-decision.ts).
  lineage.push({
    target: 'action',
    source: 'ServiceRequest.status',
    value: action,
    ruleId: 'fhir.order.action',
    rule: `request-status${interaction === 'create' ? '' : ` (${interaction})`}: ${sr.status} → ${action}`,
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
          expression: ctx.patient
            ? `${ctx.patient.path ?? 'Patient'}.identifier`
            : 'ServiceRequest.subject',
          diagnostics: `${row.source} is required (${row.target}): the patient must carry at least one identifier`,
        });
      }
      continue;
    }
    applyRow(values, lineage, row, out.value, out.lines);
  }
  // One bound for every transport's identifiers (domain/identifier-bounds.ts), on the element
  // the value was read from (an ImagingStudy's accession: the request's supportingInfo).
  const bounds = identifierBoundProblems(values as Partial<OrderRequest>, lineage);
  // Free text over its bound (domain/text-bounds.ts), on its element; a cancel is not refused
  // for it (it names an order by its identifiers).
  const textBounds = action === 'cancel' ? [] : textBoundProblems(values, lineage);
  for (const p of [...bounds, ...textBounds].filter((b) => b.severity === 'refuse')) {
    const at = boundExpression(p.source, ctx);
    // the diagnostics name the element the expression names, not the lineage's inner source
    issues.push({
      severity: 'error',
      code: 'value',
      expression: at,
      diagnostics: `${at}: ${p.detail}`,
    });
  }
  // A warning for a request that becomes an order only (a refused one's would be noise).
  if (!issues.some((i) => i.severity === 'error')) {
    for (const p of bounds.filter((b) => b.severity === 'warn'))
      quirks.push({ code: 'accession-longer-than-dicom', detail: p.message });
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

/**
 * Where an identifier over its bound sits, as FHIRPath: the ServiceRequest's own element as
 * the lineage names it; a Patient's identifier under where the Patient is (contained, its
 * Bundle entry, `subject.resolve()`); an accession read from an ImagingStudy, the request's
 * supportingInfo.
 */
function boundExpression(source: string | undefined, ctx: FhirOrderContext): string {
  // A requester's display read as a name: the display is the element.
  if (source?.startsWith('ServiceRequest.requester.display'))
    return 'ServiceRequest.requester.display';
  if (source && !source.includes(' ')) return source;
  const patient = source ? /Patient\.identifier\[(\d+)\]/.exec(source) : null;
  if (patient)
    return `${ctx.patient?.path ?? 'ServiceRequest.subject'}.identifier[${patient[1]}].value`;
  const name = source ? /Patient\.(name\[\d+\]\S*)$/.exec(source) : null;
  if (name) return `${ctx.patient?.path ?? 'ServiceRequest.subject'}.${name[1]}`;
  return 'ServiceRequest.supportingInfo';
}
