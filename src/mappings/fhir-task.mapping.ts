import type { CodeableConcept } from '@medplum/fhirtypes';
import type { OrderState } from '../domain/order-state';
import { businessStatusOf } from './task-business-status.table';

/**
 * INTERIM: the Task.status we show an EHR that pulls progress, derived from our order state.
 * The results issue owns the final status table (DESIGN.md section 4, per upstream status,
 * configurable per site) and replaces this function; until then the order state decides and
 * the upstream status, when known, is shown as Task.businessStatus (R4 task.html: "the
 * domain-specific state", free to carry the fulfiller's own status), else the order state's
 * code, each a coding of ours (task-business-status.table.ts).
 */
export type TaskStatus =
  'received' | 'accepted' | 'in-progress' | 'on-hold' | 'completed' | 'failed' | 'cancelled';

export interface DerivedTaskStatus {
  status: TaskStatus;
  businessStatus: CodeableConcept;
  /** Shown as Task.statusReason.text where the status alone could mislead a clinician. */
  statusReason?: string;
}

/** R4 task-status codes (valueset-task-status) for our order states. */
const TASK_STATUS_OF: Readonly<Record<OrderState, Omit<DerivedTaskStatus, 'businessStatus'>>> = {
  received: { status: 'received' },
  placed: { status: 'accepted' },
  'study-ready': { status: 'in-progress' },
  uploading: { status: 'in-progress' },
  processing: { status: 'in-progress' },
  // Never a result: QC failed and a human decides whether to bypass it.
  'qc-hold': { status: 'on-hold', statusReason: 'image quality check failed; awaiting a decision' },
  delivered: { status: 'completed' },
  failed: { status: 'failed', statusReason: 'no AI result will be produced for this order' },
  cancelled: { status: 'cancelled' },
};

/**
 * The Task status of an order; its businessStatus the upstream status when the state is its
 * doing, else our code for the state (an end here as its ENDED_LOCALLY_* row, as the published
 * Task has it). It was the bare text of the upstream status or the state: `failed` beside
 * ANALYSIS_RUNNING for an order the sweep ended here, with no code a receiver could map.
 */
export function deriveTaskStatus(
  state: OrderState,
  upstreamStatus: string | null,
): DerivedTaskStatus {
  // only a corrupt row holds a state outside the model: say which, not a TypeError
  if (!Object.hasOwn(TASK_STATUS_OF, state))
    throw new Error(`no Task status for order state "${String(state)}"`);
  // DELIVERED whose results expired upstream before they were fetched: the order keeps its end
  // state, but no result is coming (the EXPIRED row was published to the EHR and the RIS).
  if (state === 'delivered' && upstreamStatus === 'EXPIRED') {
    return { ...TASK_STATUS_OF.failed, businessStatus: businessStatusOf(state, upstreamStatus) };
  }
  const { status, statusReason } = TASK_STATUS_OF[state];
  return {
    status,
    businessStatus: businessStatusOf(state, upstreamStatus),
    ...(statusReason === undefined ? {} : { statusReason }),
  };
}
