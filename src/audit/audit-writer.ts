import type { EntityManager } from 'typeorm';
import { pgJson, pgText } from '../common/pg-safe';
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
      pgText(e.summary),
      pgJson(scrubSecrets(e.detail ?? {})),
    );
  }
  await manager.query(
    `INSERT INTO audit_events (order_id, inbound_message_id, kind, severity, actor, summary, detail) VALUES ${rows.join(', ')}`,
    values,
  );
}

/** Keys whose values are credentials wherever they appear in an event's detail. */
const SECRET_KEY =
  /^(token|password|passwd|secret|authorization|cookie|set-cookie)$|client[-_]?secret|api[-_]?key|access[-_]?token|refresh[-_]?token|id[-_]?token|signature|private[-_]?key/i;

/** Query parameters that make a URL a bearer credential (S3/GCS/Azure presigned URLs, tokens in URLs). */
const PRESIGNED_PARAM =
  /[?&](x-amz-[^=]*|x-goog-[^=]*|signature|sig|se|sp|sv|token|access_token|key)=/i;

/**
 * Defence in depth for "never a presigned URL or secret in the audit log": credential-named
 * keys are redacted, and URLs that carry a signature or token lose their query string.
 */
export function scrubSecrets(value: unknown): Record<string, unknown> {
  return scrub(value) as Record<string, unknown>;
}

function scrub(value: unknown, key?: string): unknown {
  if (key !== undefined && SECRET_KEY.test(key) && value !== null && value !== undefined) {
    return '[redacted]';
  }
  if (typeof value === 'string') {
    return /^https?:\/\//i.test(value) && PRESIGNED_PARAM.test(value)
      ? `${value.slice(0, value.indexOf('?'))}?[redacted]`
      : value;
  }
  if (Array.isArray(value)) return value.map((v) => scrub(v));
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = scrub(v, k);
  return out;
}
