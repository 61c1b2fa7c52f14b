import { AppError, type AppErrorCode } from '../common/app-error';

/** The lifecycle's refusals of an operator's or clinician's action, as problem JSON. */
export type OrderLifecycleErrorCode =
  | 'order_not_found'
  | 'order_ended'
  | 'cancel_requested'
  | 'not_on_qc_hold'
  | 'no_bypass_pending'
  | 'reason_required'
  | 'upstream_refused'
  | 'upstream_unavailable';

const APP_CODE: Record<OrderLifecycleErrorCode, AppErrorCode> = {
  order_not_found: 'not_found',
  order_ended: 'conflict',
  cancel_requested: 'conflict',
  not_on_qc_hold: 'conflict',
  no_bypass_pending: 'conflict',
  reason_required: 'bad_request',
  upstream_refused: 'conflict',
  upstream_unavailable: 'unavailable',
};

export class OrderLifecycleError extends AppError {
  constructor(
    readonly lifecycleCode: OrderLifecycleErrorCode,
    message: string,
    details?: Record<string, unknown>,
  ) {
    super(APP_CODE[lifecycleCode], message, { code: lifecycleCode, ...details });
    this.name = 'OrderLifecycleError';
  }
}
