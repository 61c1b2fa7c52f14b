import type { EntityManager } from 'typeorm';
import { type AuditEventInput, writeAuditEvents } from '../persistence/audit-event.repository';
import { canTransition, isOrderState, type OrderState } from '../domain/order-state';
import { OrderRepository, type OrderColumns, type OrderRow } from '../persistence/order.repository';
import type { OrderSnapshot } from './order-events';

export type { OrderRow } from '../persistence/order.repository';

export async function loadOrder(
  manager: EntityManager,
  orderId: string,
  lock = false,
): Promise<OrderRow | undefined> {
  return new OrderRepository(manager.connection).findById(orderId, lock, manager);
}

export function stateOf(order: OrderRow): OrderState {
  // A state written by a newer version is treated as the earliest one: nothing is skipped.
  return isOrderState(order.state) ? order.state : 'received';
}

export function snapshot(order: OrderRow, state: OrderState = stateOf(order)): OrderSnapshot {
  return {
    id: order.id,
    source: order.source,
    sender: order.sender,
    state,
    upstreamOrderId: order.upstream_order_id,
    upstreamBatchId: order.upstream_batch_id,
    placerGroupNumber: order.placer_group_number,
    cancelRequested: order.cancel_requested_at !== null,
    replacedBy: order.replaced_by ?? null,
  };
}

export type { OrderColumns } from '../persistence/order.repository';

export interface TransitionAudit {
  summary: string;
  actor?: string | null;
  severity?: AuditEventInput['severity'];
  detail?: Record<string, unknown>;
}

export type TransitionResult = { applied: true; from: OrderState } | { applied: false };

/**
 * The one way the lifecycle changes an order's state: asks the transition table, updates the
 * row (only if its state is still the one read), and audits. A move the table forbids is
 * refused and audited as `order.illegal-transition`, never thrown: a worker must not crash
 * on a late or out-of-order event. `from === to` is allowed (a new upstream status within
 * the same state) and audited as a transition.
 */
export async function transition(
  manager: EntityManager,
  order: OrderRow,
  to: OrderState,
  audit: TransitionAudit,
  columns: OrderColumns = {},
): Promise<TransitionResult> {
  const from = stateOf(order);
  if (from !== to && !canTransition(from, to)) {
    await writeAuditEvents(manager, [
      {
        kind: 'order.illegal-transition',
        orderId: order.id,
        severity: 'warning',
        actor: audit.actor ?? 'adapter',
        summary: `refused: ${from} → ${to} is not in the transition table (${audit.summary})`,
        detail: { from, to, ...audit.detail },
      },
    ]);
    return { applied: false };
  }
  const count = await new OrderRepository(manager.connection).updateStateIf(
    order.id,
    order.state,
    to,
    columns,
    manager,
  );
  if (count !== 1) {
    await writeAuditEvents(manager, [
      {
        kind: 'order.illegal-transition',
        orderId: order.id,
        severity: 'warning',
        actor: audit.actor ?? 'adapter',
        summary: `refused: the order left ${from} before ${from} → ${to} (${audit.summary})`,
        detail: { from, to, ...audit.detail },
      },
    ]);
    return { applied: false };
  }
  await writeAuditEvents(manager, [
    {
      kind: 'order.transition',
      orderId: order.id,
      severity: audit.severity ?? 'info',
      actor: audit.actor ?? 'adapter',
      summary: from === to ? `${to}: ${audit.summary}` : `${from} → ${to}: ${audit.summary}`,
      detail: { from, to, ...audit.detail },
    },
  ]);
  order.state = to;
  return { applied: true, from };
}
