import type { Bundle, OperationOutcome, ServiceRequest } from '@medplum/fhirtypes';
import { AppError } from '../common/app-error';
import { scanJson } from '../common/json-scan';
import type { AppConfig } from '../config/app-config';
import type { IntakeOrderResult } from '../domain/intake-outcome';
import type { MappedField, OrderRequest, ToleratedQuirk } from '../domain/order-request';
import { leftOutSummary, upstreamMetadataOf } from '../mappings/upstream-metadata';
import { fhirFrontDoorConfig } from '../inbound-fhir/fhir-front-door.config';
import { prepareBundle, responseEntries } from '../inbound-fhir/fhir-bundle.operation';
import { FhirError, operationOutcome } from '../inbound-fhir/fhir.error';
import { servedServiceRequest } from '../inbound-fhir/fhir-served.resources';
import { ReferenceResolver } from '../inbound-fhir/order-context.resolver';
import { prepareCreate } from '../inbound-fhir/service-request-create.operation';
import {
  answerMappedMessage,
  evaluateHl7Message,
  refusalAck,
  unparseableAck,
  type AckStamp,
} from '../inbound-hl7/hl7-order.pipeline';
import { hl7PipelineOptions } from '../inbound-hl7/mllp-listener.service';

/** The order id a dry run shows where the intake would assign one. */
export const DRY_RUN_ORDER_ID = 'dry-run';

/** Said in every dry-run answer. */
export const DRY_RUN_NOTES = [
  'Dry run: nothing was stored or sent (no inbound message, no order, no audit event, no job).',
  'Not part of a dry run: duplicate and state checks against stored orders (a resend of a known message or placer number, a conditional create (If-None-Exist, a Bundle entry ifNoneExist) matching stored orders, an order to cancel or change that does not exist); the answer assumes a new order, or an existing order for a cancel or change.',
  "The site's CONFIG_FILE mapping is applied, as at the front doors.",
  'FHIR: references outside the body (e.g. Patient/123) are not read from the EHR; contain them or send a Bundle.',
];

export interface DryRunOrder {
  sourceRef: string;
  request: OrderRequest;
  lineage: MappedField[];
  upstreamMetadata: Record<string, unknown>;
  /** What the order's timeline would say about keys left out or changed for the upstream. */
  upstreamMetadataNote?: string;
}

export interface DryRunResult {
  dryRun: true;
  input: 'hl7' | 'fhir';
  /** What we would answer: the ACK (HL7 text) or the FHIR status and body. */
  answer:
    | { kind: 'hl7'; code: string; accepted: boolean; text: string }
    | { kind: 'fhir'; status: number; accepted: boolean; body: unknown };
  messageType?: string;
  orders: DryRunOrder[];
  quirks: ToleratedQuirk[];
  notes: string[];
}

const STAMP: AckStamp = {
  controlId: () => 'DRYRUN',
  now: () => new Date(),
};

function sandboxOutcomeFromNotes(config: AppConfig): boolean {
  return config.IMAGING_SANDBOX_OUTCOME_FROM_NOTES || config.useEmbeddedSandbox;
}

function order(
  config: AppConfig,
  sourceRef: string,
  request: OrderRequest,
  lineage: MappedField[],
): DryRunOrder {
  const { metadata, leftOut, changed } = upstreamMetadataOf(request, {
    sandboxOutcomeFromNotes: sandboxOutcomeFromNotes(config),
  });
  return {
    sourceRef,
    request,
    lineage,
    upstreamMetadata: metadata,
    ...(leftOut.length > 0 || changed.length > 0
      ? { upstreamMetadataNote: leftOutSummary(leftOut, changed) }
      : {}),
  };
}

/** What the intake would report for an order, were it new (or the order it names known). */
function assumedResult(request: OrderRequest, sourceRef: string): IntakeOrderResult {
  switch (request.action) {
    case 'cancel':
      return { kind: 'cancel-accepted', orderId: DRY_RUN_ORDER_ID, sourceRef };
    case 'update':
      return { kind: 'updated', orderId: DRY_RUN_ORDER_ID, sourceRef };
    case 'create':
      return { kind: 'created', orderId: DRY_RUN_ORDER_ID, sourceRef };
    default:
      return { kind: 'status-recorded', orderId: null, sourceRef };
  }
}

/** One HL7 message through the MLLP front door's pure pipeline: the ACK and what it maps to. */
export function dryRunHl7(text: string, config: AppConfig): DryRunResult {
  const raw = Buffer.from(text.replace(/\r?\n/g, '\r'), 'utf8');
  if (raw.length > config.MLLP_MAX_MESSAGE_BYTES) {
    throw new AppError(
      'bad_request',
      `the message is ${raw.length} bytes, more than MLLP_MAX_MESSAGE_BYTES (${config.MLLP_MAX_MESSAGE_BYTES})`,
    );
  }
  const options = hl7PipelineOptions(config);
  const evaluation = evaluateHl7Message(raw, options);
  const base = { dryRun: true as const, input: 'hl7' as const, notes: DRY_RUN_NOTES };
  if (evaluation.kind === 'unparseable') {
    return {
      ...base,
      answer: {
        kind: 'hl7',
        code: 'AR',
        accepted: false,
        text: unparseableAck(raw, evaluation.reason, options, STAMP).toString('latin1'),
      },
      orders: [],
      quirks: [],
    };
  }
  if (evaluation.kind === 'refused') {
    const ack = refusalAck(evaluation.message, evaluation.outcome, evaluation.errors, STAMP);
    return {
      ...base,
      answer: { kind: 'hl7', code: ack.code, accepted: false, text: ack.bytes.toString('latin1') },
      messageType: evaluation.type,
      orders: [],
      quirks: evaluation.quirks,
    };
  }
  const { message, mapped, warnings } = evaluation;
  const sourceRefs = mapped.orders.map((o) => `ORC/OBR group ${o.groupIndex}`);
  const response = answerMappedMessage(
    message,
    mapped.orders,
    {
      results: mapped.orders.map((o, i) => assumedResult(o.request, sourceRefs[i]!)),
      patientOrdersUpdated: 0,
    },
    warnings,
    STAMP,
  );
  return {
    ...base,
    answer: {
      kind: 'hl7',
      code: response.code,
      accepted: response.accepted,
      text: response.body.toString('latin1'),
    },
    messageType: evaluation.type,
    orders: mapped.orders.map((o, i) => order(config, sourceRefs[i]!, o.request, o.lineage)),
    quirks: evaluation.quirks,
  };
}

/** A ServiceRequest or a transaction/batch Bundle through the FHIR front door's checks and mapping. */
export async function dryRunFhir(resource: unknown, config: AppConfig): Promise<DryRunResult> {
  const raw = Buffer.from(JSON.stringify(resource ?? null), 'utf8');
  if (raw.length > config.FHIR_MAX_BODY_BYTES) {
    throw new AppError(
      'bad_request',
      `the resource is ${raw.length} bytes, more than FHIR_MAX_BODY_BYTES (${config.FHIR_MAX_BODY_BYTES})`,
    );
  }
  const frontDoor = fhirFrontDoorConfig(config);
  const base = { dryRun: true as const, input: 'fhir' as const, notes: DRY_RUN_NOTES };
  const type = (resource as { resourceType?: unknown } | null)?.resourceType;
  const quirks: ToleratedQuirk[] = [];
  try {
    if (type === 'Bundle') {
      const { b, entries, orders, entryErrors } = await prepareBundle(
        raw,
        (siblings) => new ReferenceResolver(siblings, undefined),
        frontDoor,
        quirks,
      );
      const now = new Date().toISOString();
      const outcome = {
        results: orders.map((o) => assumedResult(o.request, o.sourceRef)),
        patientOrdersUpdated: 0,
      };
      const body: Bundle = {
        resourceType: 'Bundle',
        type: b.type === 'transaction' ? 'transaction-response' : 'batch-response',
        entry: responseEntries(entries, entryErrors, orders, outcome, now, new Map()),
      };
      return {
        ...base,
        answer: { kind: 'fhir', status: 200, accepted: true, body },
        messageType: `Bundle ${b.type}`,
        orders: orders.map((o) => order(config, o.sourceRef, o.request, o.lineage)),
        quirks,
      };
    }
    const resolver = new ReferenceResolver([], undefined);
    const { sr, mapped, request } = await prepareCreate(raw, undefined, resolver, frontDoor);
    const served: ServiceRequest = servedServiceRequest(
      sr,
      DRY_RUN_ORDER_ID,
      1,
      new Date().toISOString(),
    );
    return {
      ...base,
      answer: { kind: 'fhir', status: 201, accepted: true, body: served },
      messageType: 'ServiceRequest create',
      orders: [order(config, 'ServiceRequest', request, mapped.lineage)],
      quirks: [...resolver.quirks, ...mapped.quirks],
    };
  } catch (error) {
    if (!(error instanceof FhirError)) throw error;
    const body: OperationOutcome = operationOutcome(error.issues);
    return {
      ...base,
      answer: { kind: 'fhir', status: error.httpStatus, accepted: false, body },
      messageType: typeof type === 'string' ? type : undefined,
      orders: [],
      quirks,
    };
  }
}

/** The POST body: exactly one of `hl7` (message text) and `fhir` (a resource). */
export async function dryRun(body: unknown, config: AppConfig): Promise<DryRunResult> {
  const b = (body ?? {}) as { hl7?: unknown; fhir?: unknown };
  if (typeof b.hl7 === 'string' && b.fhir === undefined) {
    if (b.hl7.trim() === '') throw new AppError('bad_request', 'hl7 is empty');
    return dryRunHl7(b.hl7, config);
  }
  if (b.fhir !== undefined && b.hl7 === undefined) {
    const fhir = typeof b.fhir === 'string' ? parseJson(b.fhir) : b.fhir;
    return dryRunFhir(fhir, config);
  }
  throw new AppError(
    'bad_request',
    'send {"hl7": "<message text>"} or {"fhir": <ServiceRequest or Bundle>}, exactly one',
  );
}

/** How deeply a pasted resource may nest (as at the FHIR front door, fhir-http.ts). */
const FHIR_MAX_JSON_DEPTH = 100;

function parseJson(text: string): unknown {
  // As the FHIR front door does before it parses: what reads the value after JSON.parse is
  // recursive (a 20,000-level paste overflowed JSON.stringify: 500).
  if (scanJson(Buffer.from(text, 'utf8'), { maxDepth: FHIR_MAX_JSON_DEPTH }).exceeded === 'depth')
    throw new AppError('bad_request', `fhir nests deeper than ${FHIR_MAX_JSON_DEPTH} levels`);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new AppError('bad_request', `fhir is not valid JSON: ${(error as Error).message}`);
  }
}
