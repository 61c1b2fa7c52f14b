import { isOrderState, isTerminal, type OrderState } from '../../domain/order-state';
import { namesAnotherPatient } from '../../domain/patient-identity';
import type { OrderRequest } from '../../domain/order-request';
import type { IntakeOrderRow } from '../../persistence/order.repository';
import { MAX_REPLACES_READ, type ReplacedRequest } from '../intake.model';

/**
 * What becomes of one request a new order replaces (R4 servicerequest.html#replaces: "the
 * request takes the place of the referenced completed or terminated requests"). The EHR often
 * sends only the new request and leaves the old one active: both ran, two analyses for one
 * clinical question. The old order is cancelled as a revoke of it would be, but only where
 * that cannot be wrong:
 * - `cancel`: the sender's own order, same patient, not ended, no cancel asked yet;
 * - `not-held`, `outside-base`, `not-a-service-request`: nothing of ours is named (a request
 *   the EHR never sent us, a URL outside the EHR's base, never followed): the new order is
 *   taken and the link recorded. Refusing it would drop a valid order over a back-reference;
 * - `other-sender`: another sender's order is never changed by this one (and this sender is
 *   not told it exists, as a read of it is 404); but an order whose request the EHR has
 *   notified us of (held under its URL there) is the EHR's to replace as it is its to revoke;
 * - `other-patient`: the link is wrong, not the new order: the other patient's order runs on,
 *   and both timelines carry a warning for the analyst;
 * - `ended`: delivered, failed or cancelled already (R4's normal case: replaces names
 *   completed requests); its result, if any, stands;
 * - `cancel-requested`: its cancel is already under way;
 * - `self`: the request names its own order;
 * - `not-read`: references past the first MAX_REPLACES_READ of one request, not looked at: one warning names
 *   them, so that the analyst checks them (they were dropped without a trace).
 */
export type ReplaceOutcome =
  | 'cancel'
  | 'not-held'
  | 'outside-base'
  | 'not-a-service-request'
  | 'not-read'
  | 'other-sender'
  | 'other-patient'
  | 'ended'
  | 'cancel-requested'
  | 'self';

export type ReplacedRow = IntakeOrderRow & { sender: string | null };

export interface ReplaceStep {
  outcome: ReplaceOutcome;
  /** The new order (the one whose request names the other). */
  orderId: string;
  sourceRef: string;
  target: ReplacedRequest;
  /** The replaced order, when one of ours is named (any sender: the analyst's timeline). */
  replacedId?: string;
  replacedState?: OrderState;
}

/** Decides one `replaces` reference of the new order `orderId`. Pure. */
export function decideReplace(
  orderId: string,
  sourceRef: string,
  request: OrderRequest,
  sender: string | null,
  target: ReplacedRequest,
  row: ReplacedRow | undefined,
  cancelledHere: boolean,
): ReplaceStep {
  const step = { orderId, sourceRef, target };
  if (target.unmatched) return { ...step, outcome: target.unmatched };
  if (!row) return { ...step, outcome: 'not-held' };
  const about = {
    ...step,
    replacedId: row.id,
    replacedState: isOrderState(row.state) ? row.state : 'received',
  };
  if (row.id === orderId) return { ...about, outcome: 'self' };
  // An order a REST sender first POSTed and the EHR then notified (matched by its placer
  // number) is the EHR channel's too: its revoke cancels it, and so does its `replaces`.
  if ((row.sender ?? null) !== (sender ?? null) && !target.notifiedBySender)
    return { ...about, outcome: 'other-sender' };
  if (namesAnotherPatient(request.patient, row.request.patient))
    return { ...about, outcome: 'other-patient' };
  if (isTerminal(about.replacedState)) return { ...about, outcome: 'ended' };
  if (row.cancel_requested_at || cancelledHere) return { ...about, outcome: 'cancel-requested' };
  return { ...about, outcome: 'cancel' };
}

/** The timeline sentence of each outcome, on the new order and on the replaced one. PHI-free. */
export const REPLACE_WORDING: Readonly<
  Record<ReplaceOutcome, { replaces: string; replaced?: string; severity: 'info' | 'warning' }>
> = {
  cancel: {
    replaces: 'replaces order {old}: its cancel was requested',
    replaced: 'replaced by order {new} of the same orderer: cancel requested',
    severity: 'info',
  },
  'not-held': {
    replaces:
      'names a request replaced that no order of this sender is held for: nothing cancelled',
    severity: 'warning',
  },
  'outside-base': {
    replaces:
      "names a request replaced outside the EHR's base (FHIR_SERVER_URL): not followed, nothing cancelled",
    severity: 'warning',
  },
  'not-a-service-request': {
    replaces: 'names as replaced something that is no ServiceRequest: nothing cancelled',
    severity: 'warning',
  },
  'not-read': {
    replaces: `names more requests replaced than are read (the first ${MAX_REPLACES_READ}): the others were not looked at and nothing of them was cancelled; check them and revoke any still open`,
    severity: 'warning',
  },
  'other-sender': {
    replaces:
      "names as replaced an order of another sender: not cancelled (a sender's request never ends another's order)",
    replaced: 'named as replaced by order {new} of another sender: not cancelled',
    severity: 'warning',
  },
  'other-patient': {
    replaces: 'names as replaced order {old}, of another patient: not cancelled, check the link',
    replaced: 'named as replaced by order {new}, of another patient: not cancelled, check the link',
    severity: 'warning',
  },
  ended: {
    replaces: 'replaces order {old}, already {state}: nothing to cancel, its outcome stands',
    replaced: 'replaced by order {new} after it had ended ({state}): its outcome stands',
    severity: 'info',
  },
  'cancel-requested': {
    replaces: 'replaces order {old}, whose cancel was already requested',
    replaced: 'replaced by order {new}; its cancel was already requested',
    severity: 'info',
  },
  self: {
    replaces: 'names its own order as replaced: ignored',
    severity: 'warning',
  },
};
