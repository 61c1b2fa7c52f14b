import { sha256Hex } from '../common/hash';
import { boundedEi, controlIdLengthQuirk } from '../hl7/hl7-echo-lengths';
import { dedupeQuirks } from '../common/quirks';
import type { IntakeOutcome, IntakeResponse } from '../domain/intake-outcome';
import {
  buildAck,
  buildUnparseableAck,
  checkStructure,
  Hl7Error,
  type Hl7Component,
  type Hl7ErrorDetail,
  type Hl7Message,
  type Hl7ParseLimits,
  type Hl7Segment,
  type OrderControlReply,
  parseHl7,
  type StructureCheckOptions,
} from '../hl7';
import {
  DEFAULT_HL7_ORDER_MAPPING_CONFIG,
  type Hl7OrderMappingConfig,
} from '../mappings/hl7-order.config';
import {
  mapHl7Message,
  unmatchableIdentifierError,
  type MappedOrder,
} from '../mappings/hl7-order.mapping';

/** What the MLLP front door reads a message with (the site's mapping and bounds). */
export interface Hl7PipelineOptions {
  mapping?: Hl7OrderMappingConfig;
  structure?: StructureCheckOptions;
  limits?: Hl7ParseLimits;
  ourApplication?: string;
  ourFacility?: string;
}

/** How ACKs are stamped (MSH-10 of ours, MSH-7). */
export interface AckStamp {
  controlId: () => string;
  now: () => Date;
}

/**
 * One HL7 message read by the front door's rules, without storing anything: parsed, checked,
 * mapped. Used by the MLLP handler (which then stores and answers) and by the dry run.
 */
export type Hl7Evaluation =
  | { kind: 'unparseable'; reason: string; mshField?: number }
  | {
      kind: 'refused';
      message: Hl7Message;
      type: string;
      sender: string | null;
      quirks: Array<{ code: string; detail: string }>;
      outcome: 'error' | 'reject';
      errors: Hl7ErrorDetail[];
      mappingVersion?: string;
    }
  | {
      kind: 'mapped';
      message: Hl7Message;
      type: string;
      sender: string | null;
      quirks: Array<{ code: string; detail: string }>;
      mapped: ReturnType<typeof mapHl7Message>;
      warnings: Hl7ErrorDetail[];
      idempotencyKey: string;
    };

export function evaluateHl7Message(raw: Buffer, options: Hl7PipelineOptions = {}): Hl7Evaluation {
  let message: Hl7Message;
  try {
    message = parseHl7(raw, options.limits);
  } catch (error) {
    return {
      kind: 'unparseable',
      reason: (error as Error).message,
      mshField: error instanceof Hl7Error ? error.mshField : undefined,
    };
  }
  const type = `${message.messageType.code}^${message.messageType.trigger}`;
  // The sender's application and facility by their HD identity: the namespace ID, else the
  // universal ID (v2.5.1 2A.3.36: either names the entity). IHE-style senders write only the
  // OID (`^1.2.840.99.1^ISO`): read by namespace alone, two such RIS were one sender (null),
  // sharing their control IDs and placer numbers (one's cancel found the other's order).
  const hd = (field: number) => message.msh.value(field, 1, 1) ?? message.msh.value(field, 1, 2);
  const sender = [hd(3), hd(4)].filter(Boolean).join('^') || null;
  // a control ID longer than its version's 20 (a UUID under 2.5.1) is said with the message
  const lengthQuirk = controlIdLengthQuirk(message.version, message.msh.rawField(10));
  const ownQuirks = lengthQuirk ? [lengthQuirk] : [];
  const quirks = [...message.quirks.map((q) => ({ code: q.code, detail: q.detail })), ...ownQuirks];
  const structure = checkStructure(message, options.structure);
  if (structure.outcome !== 'accept') {
    return {
      kind: 'refused',
      message,
      type,
      sender,
      quirks,
      outcome: structure.outcome,
      errors: structure.errors,
    };
  }
  const mapped = mapHl7Message(message, options.mapping ?? DEFAULT_HL7_ORDER_MAPPING_CONFIG);
  const allQuirks = dedupeQuirks([...mapped.quirks, ...ownQuirks]);
  if (mapped.outcome === 'error') {
    return {
      kind: 'refused',
      message,
      type,
      sender,
      quirks: allQuirks,
      outcome: 'error',
      errors: mapped.errors,
      mappingVersion: mapped.mappingVersion,
    };
  }
  const warnings: Hl7ErrorDetail[] = [...structure.errors, ...mapped.errors].filter(
    (e) => e.severity !== 'E',
  );
  const idempotencyKey = message.controlId
    ? `mllp|${sender ?? ''}|${message.controlId}`
    : `mllp|${sender ?? ''}|sha256:${sha256Hex(raw)}`;
  return {
    kind: 'mapped',
    message,
    type,
    sender,
    quirks: allQuirks,
    mapped,
    warnings,
    idempotencyKey,
  };
}

/** The ACK (AE/AR with ERR) of a message refused by its structure or its mapping. */
export function refusalAck(
  message: Hl7Message,
  outcome: 'error' | 'reject',
  errors: Hl7ErrorDetail[],
  stamp: AckStamp,
): { code: string; bytes: Buffer } {
  return buildAck({
    inbound: message,
    outcome,
    errors,
    controlId: stamp.controlId(),
    now: stamp.now(),
  });
}

/**
 * AR 205 (table 0357 "Duplicate key identifier") at MSH-10: the sender already used this
 * control ID for a different message, which was accepted. Answering with that message's ACK
 * would report this one as processed; the sender must give it a control ID of its own.
 */
export function reusedControlIdAnswer(message: Hl7Message, stamp: AckStamp): IntakeResponse {
  const ack = refusalAck(
    message,
    'reject',
    [
      {
        location: 'MSH-10',
        code: 205,
        severity: 'E',
        message: `MSH-10 ${message.controlId} was already used by this sender for a different message; send this one with a new control ID`,
        brief: 'Send this message with a new MSH-10: its control ID was used for another one',
      },
    ],
    stamp,
  );
  return { code: ack.code, body: ack.bytes, contentType: 'application/hl7-v2', accepted: false };
}

/** The generic AR for input without a usable MSH. */
export function unparseableAck(
  raw: Buffer,
  reason: string,
  options: Hl7PipelineOptions,
  stamp: AckStamp,
  mshField?: number,
): Buffer {
  return buildUnparseableAck({
    raw,
    reason,
    mshField,
    ourApplication: options.ourApplication ?? 'IMAGING-AI-ADAPTER',
    ourFacility: options.ourFacility ?? '',
    now: stamp.now(),
    controlId: stamp.controlId(),
  });
}

/**
 * Where the placer number of an order group is: its ORC-2 (`ORC[2]-2` in the second group), or
 * OBR-2 for a group without ORC (tolerated v2.3 form).
 */
function placerNumberLocation(message: Hl7Message, groupIndex: number | undefined): string {
  const group = groupIndex === undefined ? undefined : message.orderGroups()[groupIndex - 1];
  const segment = group?.orc ?? group?.obr;
  return segment ? segment.locationOf(2) : 'ORC-2';
}

/** ORC-1 of an order group as the sender wrote it. */
function sentOrderControl(message: Hl7Message, groupIndex: number | undefined): string | undefined {
  const group = groupIndex === undefined ? undefined : message.orderGroups()[groupIndex - 1];
  return group?.orc?.value(1);
}

/**
 * ORC-2/ORC-3 of an order group (else its OBR-2/OBR-3) as the sender wrote it, the whole EI
 * (v2.5.1 2A.3.24: entity ID ^ namespace ID ^ universal ID ^ type), for the ORC of an ORR/ORI.
 * The order model keeps one system per number (namespace, else OID): answering from it gave
 * `PLC-1^RIS` for `PLC-1^RIS^1.2.3^ISO` and `PLC-1^1.2.3` (the OID as namespace) for
 * `PLC-1^^1.2.3^ISO`, not the number the placer sent.
 */
function sentEi(
  message: Hl7Message,
  groupIndex: number | undefined,
  field: 2 | 3,
): Hl7Component[] | undefined {
  const group = groupIndex === undefined ? undefined : message.orderGroups()[groupIndex - 1];
  const segment = [group?.orc, group?.obr].find((s) => s?.value(field) !== undefined);
  return segment
    ? boundedEi(segment.structure(field).slice(0, 4), segment.value(field)!)
    : undefined;
}

/** The most characters of an ST component written back in an ORI (v2.7 conformance length). */
const ST_MAX_CHARS = 199;

/**
 * A coded field (CWE/CE) of the sender's as its components, for an echo: components at
 * `texts` (the human-readable ones) left out when longer than an ST holds, undefined when a
 * code or coding system is (cut, it would name another code).
 */
function sentCoded(
  segment: Hl7Segment,
  field: number,
  count: number,
  texts: readonly number[],
): Hl7Component[] | undefined {
  const components = segment.structure(field).slice(0, count);
  const length = (c: readonly string[]) => c.reduce((n, s) => n + 1 + [...s].length, 0);
  if (components.some((c, i) => !texts.includes(i) && length(c) > ST_MAX_CHARS)) return undefined;
  return components.map((c, i) => (texts.includes(i) && length(c) > ST_MAX_CHARS ? undefined : c));
}

/**
 * What an ORI^O24 repeats of an OMI^O23 order group (OrderControlReply.imaging): OBR-4 and
 * IPC-1..5 of each IPC, as written; undefined for an ORM or a group without them (the answer
 * is then the plain ACK, see completeForOri). An identifier longer than its EI holds (a cancel
 * is not held to the identifier bounds) is left out, which leaves the group incomplete.
 */
function sentImaging(
  message: Hl7Message,
  groupIndex: number | undefined,
): OrderControlReply['imaging'] {
  if (message.messageType.code.toUpperCase() !== 'OMI') return undefined;
  const group = groupIndex === undefined ? undefined : message.orderGroups()[groupIndex - 1];
  const procedure = group?.obr ? sentCoded(group.obr, 4, 6, [1, 4]) : undefined;
  if (!group || !procedure) return undefined;
  const ei = (ipc: Hl7Segment, field: number) => {
    const value = ipc.value(field);
    return value === undefined || [...value].length > ST_MAX_CHARS
      ? undefined
      : boundedEi(ipc.structure(field).slice(0, 4), value);
  };
  const steps = group
    .all('IPC')
    .map((ipc) => [ei(ipc, 1), ei(ipc, 2), ei(ipc, 3), ei(ipc, 4), sentCoded(ipc, 5, 3, [1])]);
  return { procedure, steps };
}

/** Where a field of an order group's OBR is (`OBR[2]-4` in the second group). */
function obrFieldLocation(message: Hl7Message, groupIndex: number | undefined, field: number) {
  const group = groupIndex === undefined ? undefined : message.orderGroups()[groupIndex - 1];
  return group?.obr ? group.obr.locationOf(field) : `OBR-${field}`;
}

/**
 * The ERR of an order group the intake refused: an unknown order (204 at its ORC-2), a cancel or
 * change naming another patient (204 at PID-3: that order number is not this patient's; the
 * other patient's identifiers are not named), or a change of products for an order the
 * upstream already runs (207 at its OBR-4).
 */
function refusedOrderError(
  message: Hl7Message,
  r: IntakeOutcome['results'][number],
  order: MappedOrder | undefined,
): Hl7ErrorDetail | undefined {
  const groupIndex = order?.groupIndex;
  if (r.kind === 'unknown-order') {
    // A placer number with a control character (or over 199 characters) names no order taken
    // since the identifier rule: the cancel or change gets the refusal a new order with it gets
    // (102 at the field), not 204. Before, `ORC|CA|PL\X07\` was "unknown order".
    const unmatchable = order && unmatchableIdentifierError(order, 'order');
    if (unmatchable) return unmatchable;
    return {
      location: placerNumberLocation(message, groupIndex),
      code: 204,
      severity: 'E',
      message: `Unknown order: no order with this placer/filler number to ${r.action} (${r.sourceRef})`,
      brief: `Unknown placer/filler number, no order to ${r.action} (${r.sourceRef})`,
    };
  }
  if (r.kind !== 'change-refused') return undefined;
  if (r.reason === 'other-patient' && r.action === 'create') {
    return {
      location: placerNumberLocation(message, groupIndex),
      code: 205,
      severity: 'E',
      message: `Duplicate placer order number (${r.sourceRef}): it already names an order of a patient PID-3 does not identify; no order was created (a placer number names one order; a restarted numbering needs new numbers)`,
      brief: `Duplicate placer order number (${r.sourceRef}) of another patient: renumber`,
    };
  }
  if (r.reason === 'other-content') {
    const what = {
      'accession-number': 'accession number',
      'study-instance-uid': 'Study Instance UID',
      procedure: 'procedure',
      priority: 'priority',
      modality: 'modality',
    }[r.content ?? 'procedure'];
    return {
      location: placerNumberLocation(message, groupIndex),
      code: 205,
      severity: 'E',
      message: `Duplicate placer order number (${r.sourceRef}): it already names this patient's order with another ${what}; nothing was changed. Send a change as XO, or cancel (CA) and order again (NW) under a new number`,
      brief: `Duplicate placer number (${r.sourceRef}): change by XO, or CA and new NW`,
    };
  }
  if (r.reason === 'other-patient') {
    const unmatchable = order && unmatchableIdentifierError(order, 'patient');
    if (unmatchable) return unmatchable;
    return {
      location: 'PID-3',
      code: 204,
      severity: 'E',
      message: `Not this patient's order: the order this ${r.action} names (${r.sourceRef}) belongs to a patient PID-3 does not identify; nothing was applied (a patient is changed by an ADT A40 merge, not by an order message)`,
      brief: `Not this patient's order (${r.sourceRef}): merge patients by ADT^A40`,
    };
  }
  if (r.reason === 'study-used') {
    const accession = r.field === 'accession-number';
    // this order group's own IPC / ZDS (the second group's is IPC[2]), else the first
    const group = groupIndex === undefined ? undefined : message.orderGroups()[groupIndex - 1];
    const first = (id: string) => group?.first(id) ?? message.segmentsById(id)[0];
    return {
      location: accession
        ? (first('IPC')?.locationOf(1) ?? obrFieldLocation(message, groupIndex, 18))
        : (first('IPC')?.locationOf(3) ?? first('ZDS')?.locationOf(1) ?? 'IPC-3'),
      code: 207,
      severity: 'E',
      message: `Change not applied (${r.sourceRef}): the order's study has already been found by its ${accession ? 'accession number' : 'Study Instance UID'} and sent for analysis; a result under another ${accession ? 'accession' : 'Study Instance UID'} would not be the images' own. Cancel it (CA) and send a new order (NW)`,
      brief: `Study already sent for analysis (${r.sourceRef}): cancel (CA), send a new NW`,
    };
  }
  const placed = r.products?.placed.join(', ') || 'none';
  const asked = r.products?.asked.join(', ') || 'none';
  return {
    location: obrFieldLocation(message, groupIndex, 4),
    code: 207,
    severity: 'E',
    message: `Change not applied (${r.sourceRef}): the order already runs upstream with AI products ${placed}, and the new procedure asks for ${asked}, which cannot be changed on a running order; cancel it (CA) and send a new order (NW)`,
    brief: `AI products already run (${r.sourceRef}): cancel (CA), send a new NW`,
  };
}

/** The answer to a mapped message, from what the intake applied (or would apply). */
export function answerMappedMessage(
  message: Hl7Message,
  orders: readonly MappedOrder[],
  outcome: IntakeOutcome,
  warnings: Hl7ErrorDetail[],
  stamp: AckStamp,
): IntakeResponse {
  // results[i] answers orders[i]; the ERR names that order's own segment (ORC[2]-2 for the second).
  const errors = outcome.results.flatMap((r, i) => {
    const e = refusedOrderError(message, r, orders[i]);
    return e ? [e] : [];
  });
  if (errors.length > 0) {
    const ack = refusalAck(message, 'error', errors, stamp);
    return {
      code: ack.code,
      body: ack.bytes,
      contentType: 'application/hl7-v2',
      accepted: false,
      // The whole sentences, for the audit log: a v2.1-2.4 ACK carries only MSA-3's first 80
      // characters of the first (its ERR has no text), so the advice at the end was lost.
      error: {
        problems: errors.map((e) => ({
          ...(e.location ? { location: e.location } : {}),
          code: String(e.code),
          message: e.message,
        })),
      },
    };
  }
  // A message that cancels or changes orders is answered per order (ORR^O02 / ORI^O24 with
  // ORC-1 CR / UC / XR / OK); plain new orders get the ACK every RIS expects.
  const perOrder = orders.some(
    (o) => o.request.action === 'cancel' || o.request.action === 'update',
  );
  const orderControls = perOrder
    ? outcome.results.map((result, i) => {
        const request = orders[i]!.request;
        // Table 0119 answers a discontinue (DC) with DR / UD as a cancel (CA) with CR / UC:
        // `ORC|CR|` answered a cancel the placer never sent. A filler's OD (order
        // discontinued) is a discontinue as its OC is a cancel: it was answered CR / UC.
        const sent = sentOrderControl(message, orders[i]!.groupIndex);
        const discontinue = sent === 'DC' || sent === 'OD';
        const control: OrderControlReply['control'] =
          result.kind === 'cancel-accepted'
            ? discontinue
              ? 'DR'
              : 'CR'
            : result.kind === 'cancel-too-late'
              ? discontinue
                ? 'UD'
                : 'UC'
              : result.kind === 'change-too-late'
                ? 'UX'
                : result.kind === 'updated'
                  ? 'XR'
                  : 'OK';
        return {
          control,
          placer: request.placerOrderNumber
            ? (sentEi(message, orders[i]!.groupIndex, 2) ??
              boundedEi(
                [request.placerOrderNumber.value, request.placerOrderNumber.system],
                request.placerOrderNumber.value,
              ))
            : undefined,
          filler: request.fillerOrderNumber
            ? (sentEi(message, orders[i]!.groupIndex, 3) ??
              boundedEi(
                [request.fillerOrderNumber.value, request.fillerOrderNumber.system],
                request.fillerOrderNumber.value,
              ))
            : undefined,
          imaging: sentImaging(message, orders[i]!.groupIndex),
        };
      })
    : undefined;
  const ack = buildAck({
    inbound: message,
    outcome: 'accept',
    errors: warnings,
    orderControls,
    controlId: stamp.controlId(),
    now: stamp.now(),
  });
  return { code: ack.code, body: ack.bytes, contentType: 'application/hl7-v2', accepted: true };
}
