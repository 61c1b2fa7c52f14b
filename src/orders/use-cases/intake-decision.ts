import { uuidv7 } from '../../common/uuid-v7';
import { isOrderState, isTerminal, type OrderState } from '../../domain/order-state';
import { namesAnotherPatient } from '../../domain/patient-identity';
import type { OrderRequest } from '../../domain/order-request';
import type { IntakeOrderRow } from '../../persistence/order.repository';
import type { ReplaceStep } from './replace-decision';
import type {
  IntakeOrder,
  IntakeOrderResult,
  IntakeOutcome,
  IntakePatientEvent,
} from '../intake.model';

type OrderRow = IntakeOrderRow;

export type PlannedStep = ReturnType<typeof decide>;
export type CreateStep = Extract<PlannedStep, { kind: 'create' }>;

export interface IntakePlan {
  steps: PlannedStep[];
  outcome: IntakeOutcome;
  /** The open orders each patient event (ADT A08, one PID/MRG pair of an A40) applies to. */
  patientOrders: Array<{ event: IntakePatientEvent; row: OrderRow }>;
  /**
   * Open orders whose patient has the event's number under another assigning authority: left
   * alone, and said in their timeline (an HD written differently by the RIS and the ADT source,
   * `HOSPA&1.2.3&ISO` and `&1.2.3&ISO`, reads as another authority: the analyst sees why).
   */
  patientOrdersElsewhere?: Array<{ event: IntakePatientEvent; row: OrderRow }>;
  /** What becomes of the requests the message's orders replace (FHIR `replaces`). */
  replacements?: ReplaceStep[];
}

/** A cancel or change of an order nobody knows: refused as unknown. */
function unknownOrder(order: IntakeOrder, action: 'cancel' | 'change') {
  return {
    kind: 'unknown' as const,
    order,
    result: {
      kind: 'unknown-order' as const,
      action,
      sourceRef: order.sourceRef,
    } satisfies IntakeOrderResult,
  };
}

/**
 * A cancel or change of an order that has ended (delivered, failed, cancelled): not applied,
 * answered as such (HL7 UC / UX), with the state the order is in.
 */
function tooLate<K extends 'cancel-too-late' | 'change-too-late'>(
  kind: K,
  order: IntakeOrder,
  orderId: string,
  state: OrderState,
) {
  // both results have this one shape; the cast keeps K (UC or UX) for the caller's narrowing
  const result = { kind, orderId, state, sourceRef: order.sourceRef } as Extract<
    IntakeOrderResult,
    { kind: K }
  >;
  return { kind, orderId, state, order, result };
}

/** States in which the order's study has been found, packaged or sent: its identity is used. */
const STUDY_BOUND: readonly OrderState[] = ['study-ready', 'uploading', 'processing', 'qc-hold'];

/**
 * Which study identifier a change would move once the study is bound to the order: the
 * accession number or the Study Instance UID (a change that leaves them out moves nothing).
 */
function movesStudy(
  asked: { accessionNumber?: string; studyInstanceUid?: string },
  bound: { accessionNumber?: string; studyInstanceUid?: string },
): 'accession-number' | 'study-instance-uid' | undefined {
  if (asked.accessionNumber !== undefined && asked.accessionNumber !== bound.accessionNumber)
    return 'accession-number';
  if (asked.studyInstanceUid !== undefined && asked.studyInstanceUid !== bound.studyInstanceUid)
    return 'study-instance-uid';
  return undefined;
}

/** A change of AI products (as sets); an empty list (a cancel, no procedure) asks for none. */
function changesProducts(asked: readonly string[] | undefined, placed: readonly string[]) {
  if (!asked || asked.length === 0) return false;
  const a = [...new Set(asked)].sort();
  const p = [...new Set(placed)].sort();
  return a.length !== p.length || a.some((x, i) => x !== p[i]);
}

/** What a new order's content says that the known order under its number does not. */
export type ContentField =
  'accession-number' | 'study-instance-uid' | 'procedure' | 'priority' | 'modality';

function otherContent(
  asked: OrderRequest,
  known: Pick<
    OrderRequest,
    'accessionNumber' | 'studyInstanceUid' | 'procedure' | 'priority' | 'modality'
  >,
): ContentField | undefined {
  // Only what the new order states: a resend that leaves a field out changes nothing.
  const differs = (a: string | undefined, b: string | undefined) => a !== undefined && a !== b;
  if (differs(asked.accessionNumber, known.accessionNumber)) return 'accession-number';
  if (differs(asked.studyInstanceUid, known.studyInstanceUid)) return 'study-instance-uid';
  if (
    differs(asked.procedure?.code, known.procedure?.code) ||
    differs(asked.procedure?.system, known.procedure?.system)
  )
    return 'procedure';
  if (differs(asked.priority, known.priority)) return 'priority';
  if (differs(asked.modality, known.modality)) return 'modality';
  return undefined;
}

/** A cancel or change that cannot mean this order (see the change-refused result). */
function refusedChange(
  order: IntakeOrder,
  orderId: string,
  action: 'cancel' | 'change' | 'create',
  reason: 'other-patient' | 'products-placed' | 'study-used' | 'other-content',
  about: {
    products?: { placed: string[]; asked: string[] };
    field?: 'accession-number' | 'study-instance-uid';
    content?: ContentField;
  } = {},
) {
  const result = {
    kind: 'change-refused' as const,
    action,
    reason,
    orderId,
    sourceRef: order.sourceRef,
    ...about,
  } satisfies IntakeOrderResult;
  return { kind: 'change-refused' as const, orderId, order, result };
}

/**
 * What one order group does, given the order it refers to (if any). Pure. `cancelledInThisMessage`:
 * an earlier group of the same message cancels that order, so it is decided as one whose cancel
 * was requested (as the next message would see it).
 */
export function decide(
  order: IntakeOrder,
  existing: OrderRow | undefined,
  createdInThisMessage: string | undefined,
  cancelledInThisMessage = false,
) {
  const req = order.request;
  const cancelRequested = Boolean(existing?.cancel_requested_at) || cancelledInThisMessage;
  const sourceRef = order.sourceRef;
  switch (req.action) {
    case 'create': {
      // An order cancelled, or whose cancel the orderer asked for (it ends once the cancel job
      // has ended it upstream), is not the one a new NW under its number means: the orderer
      // reorders (docs/hl7.md: cancel and order again). Before, a NW in that window was
      // answered "already known" and never ordered.
      const known =
        createdInThisMessage ??
        (existing && existing.state !== 'cancelled' && !cancelRequested ? existing.id : undefined);
      // A placer number is the sender's key for one order (v2.5.1 §4.5.1.2): a new order under
      // a number that already names another patient's order is not that order's resend (a RIS
      // whose numbering restarted, a test system's numbers reaching production, two EHR feeds
      // whose numbering overlaps). Answered "already known", the new patient's order was
      // dropped with an AA or a 200. A FHIR conditional create keeps its answer (R4
      // http.html#ccreate: the match), as its sender asked.
      if (
        existing &&
        existing.id === known &&
        !order.conditional &&
        namesAnotherPatient(
          req.patient,
          existing.request.patient,
          existing.retired_patient_identifiers,
        )
      ) {
        return refusedChange(order, existing.id, 'create', 'other-patient');
      }
      // The same order sent again as NW (a resend under a new MSH-10) is answered as known;
      // one whose content differs is a change sent the wrong way, refused so the sender learns
      // it was not applied (before: AA "already known", the change lost). FHIR compares the
      // whole resource at its front door (service-request-create.operation.ts).
      const differs =
        existing && existing.id === known && req.source === 'hl7v2'
          ? otherContent(req, existing.request)
          : undefined;
      if (existing && differs) {
        return refusedChange(order, existing.id, 'create', 'other-content', { content: differs });
      }
      if (known) {
        const state = existing?.id === known ? existing.state : 'received';
        return {
          kind: 'duplicate-create' as const,
          orderId: known,
          state,
          order,
          result: {
            kind: 'already-known' as const,
            orderId: known,
            sourceRef,
          } satisfies IntakeOrderResult,
        };
      }
      const orderId = uuidv7();
      return {
        kind: 'create' as const,
        orderId,
        order,
        result: { kind: 'created' as const, orderId, sourceRef } satisfies IntakeOrderResult,
      };
    }
    case 'cancel':
    case 'update': {
      const cancel = req.action === 'cancel';
      if (!existing) return unknownOrder(order, cancel ? 'cancel' : 'change');
      const state: OrderState = isOrderState(existing.state) ? existing.state : 'received';
      // An ended order's analysis is done (or never will be): a cancel or change cannot reach
      // it, and answering "done" would tell the orderer something that is not true.
      if (isTerminal(state)) {
        return cancel
          ? tooLate('cancel-too-late', order, existing.id, state)
          : tooLate('change-too-late', order, existing.id, state);
      }
      // A change of an order whose cancel was asked for (answered CR) cannot apply: the order
      // is ending. Before, it was answered XR and its metadata sent upstream to an order being
      // cancelled. A second cancel is answered CR again (only the first request counts).
      if (!cancel && cancelRequested) {
        return { ...tooLate('change-too-late', order, existing.id, state), cancelRequested: true };
      }
      const orderId = existing.id;
      if (
        namesAnotherPatient(
          req.patient,
          existing.request.patient,
          existing.retired_patient_identifiers,
        )
      ) {
        return refusedChange(order, orderId, cancel ? 'cancel' : 'change', 'other-patient');
      }
      // The upstream runs the products the order was placed with (PATCH /add-metadata changes
      // metadata only): answering "changed" would publish the old products' result under the
      // new procedure. Before a place job has read the order, it places the changed one; once
      // it has (place_attempted_at), the create may be under way, its answer not stored yet.
      if (
        !cancel &&
        (existing.upstream_order_id || existing.place_attempted_at) &&
        changesProducts(req.products, existing.request.products ?? [])
      ) {
        return refusedChange(order, orderId, 'change', 'products-placed', {
          products: { placed: existing.request.products ?? [], asked: req.products },
        });
      }
      // The study found for the order (and perhaps analysed) is the one the old accession or
      // Study Instance UID named: moving them now would publish its result under an identity
      // the images do not carry. Before the study is found, the acquirer reads the new one.
      const moved =
        cancel || !STUDY_BOUND.includes(state) ? undefined : movesStudy(req, existing.request);
      if (moved) return refusedChange(order, orderId, 'change', 'study-used', { field: moved });
      if (cancel) {
        const result = { kind: 'cancel-accepted' as const, orderId, sourceRef };
        return { kind: 'cancel' as const, orderId, state, order, result };
      }
      const result = { kind: 'updated' as const, orderId, sourceRef };
      return { kind: 'update' as const, orderId, existing, order, result };
    }
    case 'status':
      return {
        kind: 'status' as const,
        orderId: existing?.id ?? null,
        order,
        result: {
          kind: 'status-recorded' as const,
          orderId: existing?.id ?? null,
          sourceRef,
        } satisfies IntakeOrderResult,
      };
    default:
      return req.action satisfies never;
  }
}
