import { uuidv7 } from '../../common/uuid-v7';
import { isOrderState, isTerminal, type OrderState } from '../../domain/order-state';
import type { IntakeOrderRow } from '../../persistence/order.repository';
import type { IntakeOrder, IntakeOrderResult, IntakeOutcome } from '../intake.model';

type OrderRow = IntakeOrderRow;

export type PlannedStep = ReturnType<typeof decide>;
export type CreateStep = Extract<PlannedStep, { kind: 'create' }>;

export interface IntakePlan {
  steps: PlannedStep[];
  outcome: IntakeOutcome;
  patientOrders: OrderRow[];
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

/** What one order group does, given the order it refers to (if any). Pure. */
export function decide(
  order: IntakeOrder,
  existing: OrderRow | undefined,
  createdInThisMessage: string | undefined,
) {
  const req = order.request;
  const sourceRef = order.sourceRef;
  switch (req.action) {
    case 'create': {
      const known =
        createdInThisMessage ??
        (existing && existing.state !== 'cancelled' ? existing.id : undefined);
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
      const orderId = existing.id;
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
