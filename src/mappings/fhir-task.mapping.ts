import type { OrderState } from '../domain/order-state';

/**
 * INTERIM: the Task.status we show an EHR that pulls progress, derived from our order state.
 * The results issue owns the final status table (DESIGN.md section 4, per upstream status,
 * configurable per site) and replaces this function; until then the order state decides and
 * the upstream status, when known, is shown as Task.businessStatus (R4 task.html: "the
 * domain-specific state", free to carry the fulfiller's own status).
 */
export type TaskStatus =
  'received' | 'accepted' | 'in-progress' | 'on-hold' | 'completed' | 'failed' | 'cancelled';

export interface DerivedTaskStatus {
  status: TaskStatus;
  businessStatus: string;
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

/** The Task status of an order, the upstream status (when known) as its businessStatus. */
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
    return { ...TASK_STATUS_OF.failed, businessStatus: upstreamStatus };
  }
  const { status, statusReason } = TASK_STATUS_OF[state];
  return {
    status,
    businessStatus: upstreamStatus ?? state,
    ...(statusReason === undefined ? {} : { statusReason }),
  };
}
