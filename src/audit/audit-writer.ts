import type { EntityManager } from 'typeorm';
import type { AuditSeverity } from '../persistence/entities/audit-event.entity';
import type { AuditEventKind } from './audit-event.kinds';

export interface AuditEventInput {
  kind: AuditEventKind;
  summary: string;
  orderId?: string | null;
  inboundMessageId?: string | null;
  severity?: AuditSeverity;
  actor?: string | null;
  detail?: Record<string, unknown>;
}

/**
 * Writes audit events on the caller's transaction (one multi-row INSERT), so an event exists
 * exactly when the step it describes was committed.
 */
export async function writeAuditEvents(
  manager: EntityManager,
  events: readonly AuditEventInput[],
): Promise<void> {
  if (events.length === 0) return;
  const values: unknown[] = [];
  const rows: string[] = [];
  for (const e of events) {
    const i = values.length;
    rows.push(
      `($${i + 1}::uuid, $${i + 2}::uuid, $${i + 3}, $${i + 4}, $${i + 5}, $${i + 6}, $${i + 7}::jsonb)`,
    );
    values.push(
      e.orderId ?? null,
      e.inboundMessageId ?? null,
      e.kind,
      e.severity ?? 'info',
      e.actor ?? null,
      e.summary,
      JSON.stringify(e.detail ?? {}),
    );
  }
  await manager.query(
    `INSERT INTO audit_events (order_id, inbound_message_id, kind, severity, actor, summary, detail) VALUES ${rows.join(', ')}`,
    values,
  );
}
