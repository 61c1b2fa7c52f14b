import type { Hl7ErrorCondition } from '../hl7/hl7-ack.builder';
import type { Hl7Message, Hl7OrderGroup, Hl7Segment } from '../hl7/hl7-message';
import { QuirkCollector } from '../hl7/hl7-quirk';
import type {
  Identifier,
  MappedField,
  OrderRequest,
  PatientInfo,
  ToleratedQuirk,
} from '../domain/order-request';
import type { PatientEvent } from '../domain/patient-event';
import {
  identifierBoundProblems,
  unmatchableIdentifierProblems,
  type BoundedValues,
} from '../domain/identifier-bounds';
import { textBoundProblems } from '../domain/text-bounds';
import { DEFAULT_HL7_ORDER_MAPPING_CONFIG, Hl7OrderMappingConfig } from './hl7-order.config';
import { applyRows, type Hl7FieldRule, type Scope } from './hl7-order.rows';
import type { TransformProblem } from './hl7-value.kit';
import { DEFAULT_PRODUCTS_RULE_ID, resolveProducts } from './product-table';

/** Bumped whenever a row, a transform or a code table changes meaning; stored with each order. */
export const HL7_ORDER_MAPPING_VERSION = 'hl7-order-mapping/1.10.0';

/**
 * The HL7v2 → OrderRequest table, one row per target, sources in priority order. Clauses
 * (HL7 v2.5.1 unless noted): PID (chapter 3), ORC, OBR, TQ1, IPC (chapter 4), NTE
 * (chapter 2); IHE RAD TF-2 RAD-4 for IPC-1 (accession), IPC-3 (Study Instance UID), IPC-5
 * (modality) and, in ORM v2.3.1, OBR-18 (accession), OBR-24 (modality) and the ZDS segment
 * (ZDS-1 Study Instance UID). TQ1-9 comes before ORC-7.6 because v2.5 moved timing/priority from
 * ORC-7 (kept for backward compatibility) to TQ1. Accession sources come from the site config
 * (rowsFor). `action` precedes `products`: unknown procedures only matter for new and changed
 * orders. `products` reads every procedure code of the OBR (OBR-4 and its alternate, then OBR-44
 * and its alternate: OBR_PROCEDURE_CODE_PLACES in hl7-value.products.ts), the first the product
 * table knows.
 *
 * requestedAt is when the examination is to start, as FHIR's occurrence[x] before authoredOn:
 * TQ1-7 (start date/time, v2.5+), then the TQ start of the older ORC-7.4 / OBR-27.4 (kept for
 * backward compatibility since v2.5), then OBR-36 (scheduled date/time: the time the filler
 * scheduled the observation, which a RIS feeding a worklist fills with ORC-7 empty), then OBR-6
 * (requested date/time: "not used" since v2.3, its meaning moved to the TQ start; senders that
 * still fill it often stamp it with the message time, so it comes after OBR-36, mapping
 * 1.10.0: read first, it put such an exam at the minute the order was sent), and only then ORC-9, the date/time of *this transaction* (§4.5.1.9):
 * the time the order was entered for NW, but the time of the change for XO, so reading it first
 * moved a changed order to the minute the clerk edited it (and an order scheduled for 10:30 to
 * the 09:15 it was typed in). ORC-9 is a fallback only (that it differs from the start is no
 * conflict), and for NW only: an XO without timing would otherwise move the order to the time
 * of the change. requestedAt becomes OBR-7 of our ORU and DiagnosticReport.effectiveDateTime.
 * priority: TQ1-9, ORC-7.6, OBR-27.6, then OBR-5 (v2.3+ keep it "for backward compatibility
 * only", and RIS/EHR feeds still put S there with ORC-7 empty: read first in mapping 1.3.0, as
 * a fallback, never compared with the others; a stat head CT had been sent as routine).
 * orderingProvider: ORC-12, OBR-16, then (v2.7+, where those two are kept for backward
 * compatibility only) PRT-5 of the order group's PRT whose PRT-4 is OP (table 0912).
 * reasonForStudy: OBR-31 (reason for study), else the order's DG1-3 diagnoses (every DG1 of the
 * order group, ORM_O01 ORDER_DETAIL / OMI_O23 ORDER, §6.5.2.3: EHRs send the ICD-10 there and
 * leave OBR-31 empty), else OBR-13 free text.
 */
// prettier-ignore
export const HL7_ORDER_FIELD_MAP = [
  { target: 'patient.identifiers', sources: ['PID-3'], transform: 'cx-list', required: true, ruleId: 'hl7.patient.identifiers' },
  { target: 'patient.name', sources: ['PID-5'], transform: 'xpn', required: false, ruleId: 'hl7.patient.name' },
  { target: 'patient.birthDate', sources: ['PID-7'], transform: 'partial-date', required: false, ruleId: 'hl7.patient.birth-date' },
  { target: 'patient.sex', sources: ['PID-8'], transform: 'sex-0001', required: false, ruleId: 'hl7.patient.sex' },
  { target: 'action', sources: ['ORC-1'], transform: 'order-control', required: true, ruleId: 'hl7.order.action' },
  { target: 'placerOrderNumber', sources: ['ORC-2', 'OBR-2'], transform: 'ei', required: false, ruleId: 'hl7.order.placer-number', onConflict: 'must-agree' },
  { target: 'fillerOrderNumber', sources: ['ORC-3', 'OBR-3'], transform: 'ei', required: false, ruleId: 'hl7.order.filler-number', onConflict: 'must-agree' },
  { target: 'accessionNumber', sources: ['IPC-1', 'OBR-18'], transform: 'accession', required: false, ruleId: 'hl7.order.accession', onConflict: 'must-agree' },
  { target: 'accessionIssuer', sources: ['IPC-1', 'OBR-18'], transform: 'accession-issuer', required: false, ruleId: 'hl7.order.accession-issuer' },
  { target: 'placerGroupNumber', sources: ['ORC-4'], transform: 'ei', required: false, ruleId: 'hl7.order.placer-group' },
  { target: 'procedure', sources: ['OBR-4', 'OBR-44'], transform: 'coded', required: false, ruleId: 'hl7.order.procedure' },
  { target: 'modality', sources: ['IPC-5', 'OBR-24'], transform: 'modality', required: false, ruleId: 'hl7.order.modality' },
  { target: 'studyInstanceUid', sources: ['IPC-3', 'ZDS-1'], transform: 'uid', required: false, ruleId: 'hl7.order.study-uid', onConflict: 'must-agree' },
  { target: 'priority', sources: ['TQ1-9', 'ORC-7.6', 'OBR-27.6', { at: 'OBR-5', fallbackOnly: true, notAfterLeftOut: true }], transform: 'priority-0027', required: false, ruleId: 'hl7.order.priority', onConflict: 'must-agree' },
  { target: 'orderingProvider', sources: ['ORC-12', 'OBR-16', { at: 'PRT-5', transform: 'prt-ordering-provider' }], transform: 'xcn', required: false, ruleId: 'hl7.order.ordering-provider' },
  { target: 'reasonForStudy', sources: ['OBR-31', { at: 'DG1-3', transform: 'dg1-diagnoses' }, { at: 'OBR-13', transform: 'free-text-reason' }], transform: 'coded-list', required: false, ruleId: 'hl7.order.reason' },
  { target: 'requestedAt', sources: ['TQ1-7', 'ORC-7.4', 'OBR-27.4', 'OBR-36', 'OBR-6', { at: 'ORC-9', fallbackOnly: true, forActions: ['create'] }], transform: 'dtm-instant', required: false, ruleId: 'hl7.order.requested-at' },
  { target: 'notes', sources: ['NTE-3'], transform: 'nte-notes', required: false, ruleId: 'hl7.order.notes' },
  { target: 'products', sources: ['OBR-4'], transform: 'product-table', required: false, ruleId: 'hl7.order.products' },
] as const satisfies readonly Hl7FieldRule[];

/** ADT^A40 (v2.5.1 chapter 3): MRG-1 holds the prior (non-surviving) patient identifiers. */
export const HL7_MERGE_FIELD_MAP = [
  {
    target: 'priorIdentifiers',
    sources: ['MRG-1'],
    transform: 'cx-list',
    required: true,
    ruleId: 'hl7.merge.prior-identifiers',
  },
] as const satisfies readonly Hl7FieldRule[];

export interface Hl7MappingError {
  location?: string;
  code: Hl7ErrorCondition;
  severity: 'E' | 'W';
  message: string;
  /** The sentence in 80 characters, advice first, for a v2.1-2.4 MSA-3 (Hl7ErrorDetail.brief). */
  brief?: string;
}

export interface MappedOrder {
  /** 1-based ORC/OBR group the order came from. */
  groupIndex: number;
  request: OrderRequest;
  lineage: MappedField[];
}

export interface Hl7MappingResult {
  mappingVersion: string;
  /** `accept` when no error of severity E was found (warnings allowed). */
  outcome: 'accept' | 'error';
  /** One per order group that mapped without error, in message order. */
  orders: MappedOrder[];
  /** ADT^A08 / ADT^A40 results, for the orders already open for that patient. */
  patientEvents: PatientEvent[];
  quirks: ToleratedQuirk[];
  errors: Hl7MappingError[];
}

/** Where an HL7 order's bounded identifiers usually sit (when the lineage does not say). */
const BOUNDED_FIELDS: Record<string, string> = {
  'placerOrderNumber.value': 'ORC-2',
  'fillerOrderNumber.value': 'ORC-3',
  'placerGroupNumber.value': 'ORC-4',
  accessionNumber: 'OBR-18',
  'patient.identifiers[].value': 'PID-3',
  'priorIdentifiers[].value': 'MRG-1',
  // free text (domain/text-bounds.ts), when the lineage does not say
  'patient.name': 'PID-5',
  'orderingProvider.name': 'ORC-12',
  procedure: 'OBR-4',
  reasonForStudy: 'OBR-31',
  modality: 'OBR-24',
  notes: 'NTE-3',
};

/** The fallback field of a bounded value's path (`patient.name.given[1]` → PID-5). */
function boundedField(target: string): string | undefined {
  const path = target.replace(/\[\d+\]/g, '[]');
  if (BOUNDED_FIELDS[path]) return BOUNDED_FIELDS[path];
  const key = Object.keys(BOUNDED_FIELDS).find(
    (k) => path.startsWith(`${k}.`) || path.startsWith(`${k}[`),
  );
  return key ? BOUNDED_FIELDS[key] : undefined;
}

/**
 * The identifiers (and free-text values) over their bound as ERR 102 (the value breaks its
 * field's length) at their field.
 */
function boundErrors(
  values: Record<string, unknown>,
  lineage: MappedField[],
  bounds = [
    ...identifierBoundProblems(values as BoundedValues, lineage),
    ...textBoundProblems(values, lineage),
  ],
): TransformProblem[] {
  return bounds
    .filter((b) => b.severity === 'refuse')
    .map((p) => ({
      location: (p.source ?? boundedField(p.target) ?? 'PID-3').replace(/\.1$/, ''),
      code: 102 as const,
      severity: 'E' as const,
      message: p.message,
      ...(p.brief ? { brief: p.brief } : {}),
    }));
}

/**
 * The field-level refusal (102 at the field, as a new order gets) of a cancel or change that
 * found no order (`order`) or another patient's (`patient`), when its identifiers are ones no
 * order can hold (domain/identifier-bounds.ts, unmatchableIdentifierProblems); none otherwise.
 */
export function unmatchableIdentifierError(
  order: MappedOrder,
  which: 'order' | 'patient',
): TransformProblem | undefined {
  const values = order.request as unknown as Record<string, unknown>;
  const problems = unmatchableIdentifierProblems(values as BoundedValues, order.lineage, which);
  return boundErrors(values, order.lineage, problems)[0];
}

/** The table with the site's accession source order applied. */
export function rowsFor(config: Hl7OrderMappingConfig): readonly Hl7FieldRule[] {
  const custom =
    config.accessionSources.join(',') !==
    DEFAULT_HL7_ORDER_MAPPING_CONFIG.accessionSources.join(',');
  return HL7_ORDER_FIELD_MAP.map((row) =>
    row.target === 'accessionIssuer'
      ? { ...row, sources: config.accessionSources }
      : row.target === 'accessionNumber'
        ? {
            ...row,
            sources: config.accessionSources,
            // A site's own source list is its declared precedence: other places may hold other
            // things (a conflict is recorded as a quirk, not refused).
            onConflict: custom ? ('first-wins' as const) : row.onConflict,
          }
        : row,
  );
}

/** A create/update with no procedure at all follows the unknown-procedure rule too. */
function productsWithoutProcedure(
  request: Record<string, unknown>,
  group: Hl7OrderGroup,
  config: Hl7OrderMappingConfig,
  lineage: MappedField[],
): TransformProblem | undefined {
  if (request.products !== undefined) return undefined;
  const action = request.action;
  // ORM_O01 makes the order detail optional (v2.5.1 §4.4.1: ORC [OBR ...]): a change sent as
  // the ORC alone (a new start or priority) names no procedure and asks for no other products;
  // the order keeps its own (the change is merged over the stored request). It was refused
  // AE 101 "procedure code missing" at OBR-4 of an OBR the message did not have.
  if (action === 'update' && !group.obr) return undefined;
  request.products = [];
  if (action !== 'create' && action !== 'update') return undefined;
  // Without an OBR the place to name is the group's ORC (the segment, field 1, as ERR-2 names
  // one): `OBR-4` was read as the first OBR of the message, another order's (AE 101 at
  // `OBR^1^4`, which held that order's procedure).
  const location = group.obr ? group.obr.locationOf(4) : (group.orc?.locationOf(1) ?? 'ORC-1');
  const resolved = resolveProducts(config.productTable, config.unknownProcedure, []);
  if (resolved.kind === 'reject') {
    if (!group.obr) {
      const at = location.replace(/-1$/, '');
      return {
        location,
        code: 100,
        severity: 'E',
        message: `${at} has no OBR: a new order names its requested procedure in OBR-4 (ORC followed by its OBR); cannot choose AI products`,
        brief: `Send an OBR after ${at}: a new order needs its procedure (OBR-4)`,
      };
    }
    return {
      location,
      code: 101,
      severity: 'E',
      message: 'Requested procedure code missing; cannot choose AI products',
    };
  }
  request.products = resolved.products.map((p) => p.product);
  resolved.products.forEach((p, i) =>
    lineage.push({
      target: `products[${i}]`,
      source: location,
      value: p.product,
      ruleId: p.ruleId ?? DEFAULT_PRODUCTS_RULE_ID,
      rule: p.rule,
    }),
  );
  return undefined;
}

/**
 * An OBR with no ORC of its own (a second OBR after one ORC, or none at all): ORM_O01 and
 * OMI_O23 give each order its own ORC (v2.5.1 §4.4.1, §4.4.6), and whether the previous ORC's
 * order control, placer number and times were meant for this OBR too is a guess. Refused at
 * that OBR, saying so; the rows would have reported "ORC-1 required" at the other order's ORC.
 */
function groupWithoutOrc(group: Hl7OrderGroup): TransformProblem | undefined {
  if (group.orc || !group.obr) return undefined;
  const at = group.obr.locationOf(1).replace(/-1$/, '');
  return {
    // The segment, as ERR-2 names one (field 1, like `MSH[2]-1` for a second MSH).
    location: group.obr.locationOf(1),
    code: 100,
    severity: 'E',
    message: `${at} has no ORC of its own: each order in ORM_O01/OMI_O23 is an ORC followed by its OBR (one OBR per ORC)`,
    brief: `Send an ORC before each OBR: ${at} has no ORC of its own`,
  };
}

/**
 * A second PID in a message of one patient (ORM_O01, OMI_O23: v2.5.1 §4.4.1, §4.4.6; ADT_A01
 * for A08, §3.3.8): which patient the orders (or the update) belong to is a guess. An interface
 * engine that joins two messages and drops the second MSH, or a mother's PID written before
 * the newborn's, left the orders filed under the first PID, whatever the second said. Refused
 * at that PID, as a second MSH is (ADT_A39, A40, repeats its PATIENT group: not here).
 */
function secondPatient(message: Hl7Message): Hl7MappingError | undefined {
  const second = message.segmentsById('PID')[1];
  if (!second) return undefined;
  return {
    location: second.locationOf(1),
    code: 100,
    severity: 'E',
    message: `${second.locationOf(1).replace(/-1$/, '')}: a second patient in a message of one patient (one PID per ${message.messageType.code}^${message.messageType.trigger}); which patient the message means is a guess`,
    brief: `Send one patient per message: ${second.locationOf(1).replace(/-1$/, '')} is a second PID`,
  };
}

function mergeQuirks(message: Hl7Message, mapping: QuirkCollector): ToleratedQuirk[] {
  const all = new QuirkCollector();
  for (const q of message.quirks) all.add(q.code, q.detail);
  for (const q of mapping.quirks) all.add(q.code, q.detail);
  return all.quirks.map((q) => ({ code: q.code, detail: q.detail }));
}

function dedupe(errors: Hl7MappingError[]): Hl7MappingError[] {
  const seen = new Set<string>();
  return errors.filter((e) => {
    const key = `${e.location}|${e.code}|${e.severity}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

const PATIENT_ROWS = HL7_ORDER_FIELD_MAP.filter((r) => r.target.startsWith('patient.'));

/**
 * PID fields whose explicit null `""` in an ADT^A08 deletes the order's value (v2.5.1 §2.5.3):
 * a registry withdrawing a wrong birth date or sex. Before, `""` read as "not sent" and the
 * order kept (and sent upstream and in its ORU) the value the registry had withdrawn.
 */
const PID_DELETABLE = [
  [7, 'birthDate'],
  [8, 'sex'],
] as const;

/**
 * Maps a parsed, structure-checked message (see checkStructure) to OrderRequests (ORM^O01,
 * OMI^O23: one per order group) or patient events (ADT^A08, ADT^A40). Pure and deterministic:
 * the same message and config always give the same result.
 */
export function mapHl7Message(
  message: Hl7Message,
  config: Hl7OrderMappingConfig = DEFAULT_HL7_ORDER_MAPPING_CONFIG,
): Hl7MappingResult {
  const quirks = new QuirkCollector();
  const errors: Hl7MappingError[] = [];
  const orders: MappedOrder[] = [];
  const patientEvents: PatientEvent[] = [];
  const type = message.messageType;
  const code = type.code;
  const trigger = type.trigger;

  const twoPatients = code === 'ADT' && trigger === 'A40' ? undefined : secondPatient(message);
  if (twoPatients) {
    errors.push(twoPatients); // refused whole: nothing of the message is read
  } else if (code === 'ORM' || code === 'OMI') {
    const rows = rowsFor(config);
    const groups = message.orderGroups();
    for (const seg of message.unplacedStudySegments) {
      const at = seg.locationOf(1).replace(/-1$/, '');
      errors.push({
        location: seg.locationOf(1),
        code: 100,
        severity: 'W',
        message: `${at} comes before the first ORC and belongs to none of the ${groups.length} orders; not read (it goes after its order's OBR)`,
      });
    }
    for (const group of groups) {
      const lone = groupWithoutOrc(group);
      if (lone) {
        errors.push(lone);
        continue;
      }
      const out = applyRows(rows, { message, group }, config, quirks, { source: 'hl7v2' });
      if (!out.failed.has('products')) {
        const missing = productsWithoutProcedure(out.values, group, config, out.lineage);
        if (missing) out.problems.push(missing);
      }
      // One bound for every transport's identifiers (domain/identifier-bounds.ts); 102: the
      // value breaks its field's length (EI.1 / ST, 199 in v2.7).
      const bounds = identifierBoundProblems(out.values as Partial<OrderRequest>, out.lineage);
      out.problems.push(...boundErrors(out.values, out.lineage, bounds));
      // Free text over its bound (domain/text-bounds.ts): 102 at the field. A cancel is not
      // refused for it (it names an order by its numbers; its text is not kept on the order).
      if (out.values.action !== 'cancel')
        out.problems.push(
          ...boundErrors(out.values, out.lineage, textBoundProblems(out.values, out.lineage)),
        );
      // A warning for an order that is taken only (a refused one's would be noise).
      if (!out.problems.some((p) => p.severity === 'E')) {
        for (const p of bounds.filter((b) => b.severity === 'warn'))
          quirks.add('accession-longer-than-dicom', p.message);
      }
      errors.push(...out.problems);
      if (out.problems.some((p) => p.severity === 'E')) continue;
      orders.push({
        groupIndex: group.index,
        request: out.values as unknown as OrderRequest,
        lineage: out.lineage,
      });
    }
  } else if (code === 'ADT' && (trigger === 'A08' || trigger === 'A31')) {
    // A31 (ADT_A05, an IHE PAM ITI-30 identity feed's update) says what an A08 says of the patient
    const out = applyRows(PATIENT_ROWS, { message }, config, quirks);
    // identifiers and free text (the patient's name), as an order's
    out.problems.push(...boundErrors(out.values, out.lineage));
    errors.push(...out.problems);
    if (!out.problems.some((p) => p.severity === 'E')) {
      const pid = message.segment('PID');
      const cleared = PID_DELETABLE.filter(([field]) => pid?.isExplicitNull(field)).map(
        ([, target]) => target,
      );
      patientEvents.push({
        kind: 'patient-update',
        ...(trigger === 'A31' ? { trigger } : {}),
        patient: out.values.patient as PatientInfo,
        lineage: out.lineage,
        ...(cleared.length > 0 ? { cleared } : {}),
      });
    }
  } else if (code === 'ADT' && (trigger === 'A40' || trigger === 'A47')) {
    // ADT_A39 structure: MSH EVN {PID [PD1] MRG [PV1]}; each PID starts one merge. ADT_A30
    // (A47): MSH EVN PID [PD1] MRG, one patient (a second PID is refused above).
    const pairs: Hl7Segment[][] = [];
    for (const seg of message.segments) {
      if (seg.id === 'PID') pairs.push([seg]);
      else if (pairs.length > 0 && seg.id !== 'PID') pairs[pairs.length - 1].push(seg);
    }
    for (const pair of pairs) {
      const scope: Scope = { message, pair };
      const out = applyRows([...PATIENT_ROWS, ...HL7_MERGE_FIELD_MAP], scope, config, quirks);
      // identifiers and free text (the surviving patient's name), as an order's
      out.problems.push(...boundErrors(out.values, out.lineage));
      errors.push(...out.problems);
      if (out.problems.some((p) => p.severity === 'E')) continue;
      patientEvents.push({
        kind: 'patient-merge',
        patient: out.values.patient as PatientInfo,
        priorIdentifiers: out.values.priorIdentifiers as Identifier[],
        trigger,
        lineage: out.lineage,
      });
    }
  }
  const finalErrors = dedupe(errors);
  return {
    mappingVersion: HL7_ORDER_MAPPING_VERSION,
    outcome: finalErrors.some((e) => e.severity === 'E') ? 'error' : 'accept',
    orders,
    patientEvents,
    quirks: mergeQuirks(message, quirks),
    errors: finalErrors,
  };
}
