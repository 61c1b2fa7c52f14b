import type { CodeableConcept } from '@medplum/fhirtypes';
import type { OrderState } from '../domain/order-state';
import { isUpstreamStatus, type UpstreamStatus } from '../imaging-spec/imaging-spec';
import { STATUS_TABLE, statusRowKey, type LocalEndKey } from './status-mapping.table';

/**
 * Task.businessStatus (R4 task.html: "the domain-specific state"; a CodeableConcept, example
 * binding only): always one coding of a code system of ours, so a receiving EHR can map it
 * by system and code, never by parsing text. Three systems:
 * - the upstream's status, when the order's status is the upstream's (its code as the
 *   upstream spells it, imaging-service-api.md "States and transitions");
 * - an end here without an upstream result (the ENDED_LOCALLY_* rows of the status table);
 * - our order state, while the order has no upstream status to show (not placed yet) or the
 *   upstream's value is not one of the spec's.
 */
export const BUSINESS_STATUS_SYSTEM = {
  upstreamStatus: 'urn:imaging-ai-adapter:upstream-status',
  localEnd: 'urn:imaging-ai-adapter:local-end',
  orderState: 'urn:imaging-ai-adapter:order-state',
} as const;

/** An end here: its row key as code, a display, and a short text a clinician reads. */
export const LOCAL_END_BUSINESS_STATUS = {
  ENDED_LOCALLY_FAILED: {
    display: 'Failed without a result (ended by the adapter)',
    text: 'failed, no result',
  },
  ENDED_LOCALLY_CANCELLED: {
    display: 'Cancelled without a result (ended by the adapter)',
    text: 'cancelled, no result',
  },
} as const satisfies Record<LocalEndKey, { display: string; text: string }>;

/**
 * Every order state without an upstream status to show: its code (the state's name, as the
 * audit log and docs/lifecycle.md spell it), a display and a short text. The two ends point
 * at their local-end row; a new state breaks the build until it is listed here.
 */
export const ORDER_STATE_BUSINESS_STATUS = {
  received: { display: 'Received by the adapter, not yet placed for analysis', text: 'received' },
  placed: { display: 'Placed with the analysis service, awaiting the study', text: 'placed' },
  'study-ready': {
    display: 'Study found and packaged, not yet sent for analysis',
    text: 'study ready',
  },
  uploading: { display: 'Study being sent to the analysis service', text: 'sending study' },
  processing: { display: 'With the analysis service', text: 'in analysis' },
  'qc-hold': {
    display: 'Image quality check failed; awaiting a decision',
    text: 'quality check failed, awaiting a decision',
  },
  delivered: { display: 'Analysis delivered', text: 'delivered' },
  failed: { localEnd: 'ENDED_LOCALLY_FAILED' },
  cancelled: { localEnd: 'ENDED_LOCALLY_CANCELLED' },
} as const satisfies Record<
  OrderState,
  { display: string; text: string } | { localEnd: LocalEndKey }
>;

/** The local end's coding (the status table's ENDED_LOCALLY_* row). */
export function localEndBusinessStatus(key: LocalEndKey): CodeableConcept {
  const { display, text } = LOCAL_END_BUSINESS_STATUS[key];
  return { coding: [{ system: BUSINESS_STATUS_SYSTEM.localEnd, code: key, display }], text };
}

/** An upstream status as the published Task has carried it since the status table landed. */
export function upstreamBusinessStatus(status: UpstreamStatus): CodeableConcept {
  return {
    coding: [{ system: BUSINESS_STATUS_SYSTEM.upstreamStatus, code: status }],
    text: status,
  };
}

/** The businessStatus of an order state with no upstream status to show. */
export function orderStateBusinessStatus(state: OrderState): CodeableConcept {
  const entry: { display: string; text: string } | { localEnd: LocalEndKey } =
    ORDER_STATE_BUSINESS_STATUS[state];
  if ('localEnd' in entry) return localEndBusinessStatus(entry.localEnd);
  return {
    coding: [{ system: BUSINESS_STATUS_SYSTEM.orderState, code: state, display: entry.display }],
    text: entry.text,
  };
}

/**
 * Whether an order in `state` got there by this upstream status: a failed or cancelled order
 * whose upstream status leads elsewhere (ANALYSIS_RUNNING, then the deadline here; PENDING,
 * then a cancel here) ended here, and says so as the published Task does (its local-end row).
 */
function upstreamLedTo(state: OrderState, status: UpstreamStatus): boolean {
  if (state !== 'failed' && state !== 'cancelled') return true;
  const keys =
    status === 'QC_FAILED'
      ? [statusRowKey(status, { qcBypassPossible: false })]
      : [statusRowKey(status)];
  return keys.some((k) => STATUS_TABLE[k].orderState === state);
}

/**
 * Task.businessStatus of an order (the served Task): the upstream status when the order's
 * state is its doing, else the local code of the state (an end here as its ENDED_LOCALLY_*
 * row, as the published Task has it).
 */
export function businessStatusOf(
  state: OrderState,
  upstreamStatus: string | null,
): CodeableConcept {
  if (isUpstreamStatus(upstreamStatus) && upstreamLedTo(state, upstreamStatus))
    return upstreamBusinessStatus(upstreamStatus);
  return orderStateBusinessStatus(state);
}
