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
export function deriveTaskStatus(
  state: OrderState,
  upstreamStatus: string | null,
): DerivedTaskStatus {
  const businessStatus = upstreamStatus ?? state;
  switch (state) {
    case 'received':
      return { status: 'received', businessStatus };
    case 'placed':
      return { status: 'accepted', businessStatus };
    case 'study-ready':
    case 'uploading':
    case 'processing':
      return { status: 'in-progress', businessStatus };
    case 'qc-hold':
      // Never a result: QC failed and a human decides whether to bypass it.
      return {
        status: 'on-hold',
        businessStatus,
        statusReason: 'image quality check failed; awaiting a decision',
      };
    case 'delivered':
      return { status: 'completed', businessStatus };
    case 'failed':
      return {
        status: 'failed',
        businessStatus,
        statusReason: 'no AI result will be produced for this order',
      };
    case 'cancelled':
      return { status: 'cancelled', businessStatus };
    default:
      return state satisfies never;
  }
}
