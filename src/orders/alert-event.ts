import type { AuditEventInput } from '../persistence/audit-event.repository';

/**
 * The `order.alert` audit event of an alert raised on an order, as every raiser writes it: the
 * adapter's, at severity error, its summary `<alert>: <reason>`, its detail the alert beside
 * what the raiser adds (upstream status, mapping row, previous state, …).
 */
export function alertEvent(
  orderId: string,
  alert: string,
  reason: string,
  detail: Record<string, unknown> = {},
): AuditEventInput {
  return {
    kind: 'order.alert',
    orderId,
    severity: 'error',
    actor: 'adapter',
    summary: `${alert}: ${reason}`,
    detail: { alert, ...detail },
  };
}
