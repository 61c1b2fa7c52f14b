import type { EntityManager } from 'typeorm';
import { pgJson, pgText } from '../common/pg-safe';
import type { AuditEventKind, AuditSeverity } from '../domain/audit-event.kinds';
import { TERMINAL_ORDER_STATES } from '../domain/order-state';
import type { Queryable } from './queryable';
import { RepositoryBase } from './repository-base';

/**
 * The writing side of the audit log (table audit_events): a sink that every layer may call,
 * so it sits low, beside the other repositories, and imports nothing above it.
 */

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
  manager: Queryable,
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

/**
 * Audit events outside a caller's transaction: upstream calls' events, and retention (the
 * nightly prune; ids grow with time, identity).
 */
export class AuditEventRepository extends RepositoryBase {
  /** Writes events on the given transaction, or on their own when none is given. */
  async write(events: readonly AuditEventInput[], manager?: EntityManager): Promise<void> {
    await writeAuditEvents(this.db(manager), events);
  }

  /**
   * Our order for an upstream order id (an upstream call's event belongs to our order, so
   * that it shows in the order's timeline), if we know it.
   */
  /**
   * Whether no event of this kind with this detail value exists yet for the order, under a
   * transaction-scoped advisory lock on (kind, order), so that two replicas meeting here
   * write it once. Call inside the transaction that then writes the event.
   */
  async firstOfItsKind(
    event: { orderId: string; kind: string; detailKey: string; detailValue: string },
    manager: EntityManager,
  ): Promise<boolean> {
    await manager.query(`SELECT pg_advisory_xact_lock(hashtext($1 || ':' || $2))`, [
      event.kind,
      event.orderId,
    ]);
    const seen: unknown[] = await manager.query(
      `SELECT 1 FROM audit_events WHERE order_id = $1 AND kind = $2 AND detail->>$3 = $4 LIMIT 1`,
      [event.orderId, event.kind, event.detailKey, event.detailValue],
    );
    return seen.length === 0;
  }

  async orderIdOfUpstreamOrder(upstreamOrderId: string): Promise<string | null> {
    const rows: Array<{ id: string }> = await this.db().query(
      `SELECT id FROM orders WHERE upstream_order_id = $1`,
      [upstreamOrderId],
    );
    return rows[0]?.id ?? null;
  }

  /** The newest id of an event that occurred before the cutoff (occurred_at index), if any. */
  async newestIdBefore(cutoff: Date): Promise<string | null> {
    const top: Array<{ id: string | null }> = await this.db().query(
      `SELECT max(id)::text AS id FROM audit_events WHERE occurred_at < $1`,
      [cutoff],
    );
    return top[0]?.id ?? null;
  }

  /**
   * Looks at the next `batchSize` events after `afterId` and at or below `maxId` that occurred
   * before the cutoff, in primary-key order (one short transaction), and deletes those no open
   * order needs: an event of an order not yet ended (delivered, failed, cancelled) stays, and
   * so does a message-level event (received, quirks) of a message that touched one, since its
   * timeline, lineage and MSH-10 search are read from them. Returns how many it looked at and
   * deleted and the last id looked at (the next batch starts after it).
   */
  async deleteBatch(
    afterId: string,
    maxId: string,
    cutoff: Date,
    batchSize: number,
  ): Promise<{ scanned: number; deleted: number; lastId: string | null }> {
    const rows: Array<{ scanned: number; deleted: number; last_id: string | null }> =
      await this.db().query(
        `WITH batch AS (
             SELECT e.id, e.order_id, e.inbound_message_id FROM audit_events e
              WHERE e.id > $1::bigint AND e.id <= $2::bigint AND e.occurred_at < $3
              ORDER BY e.id LIMIT ${batchSize}),
           gone AS (
             DELETE FROM audit_events d USING batch b
              WHERE d.id = b.id
                AND NOT EXISTS (SELECT 1 FROM orders o
                                 WHERE o.id = b.order_id AND o.state <> ALL($4::text[]))
                AND NOT (b.order_id IS NULL AND b.inbound_message_id IS NOT NULL AND EXISTS (
                      SELECT 1 FROM audit_events x JOIN orders o ON o.id = x.order_id
                       WHERE x.inbound_message_id = b.inbound_message_id
                         AND o.state <> ALL($4::text[])))
             RETURNING 1)
         SELECT (SELECT count(*) FROM batch)::int AS scanned, (SELECT count(*) FROM gone)::int AS deleted,
                (SELECT max(id) FROM batch)::text AS last_id`,
        [afterId, maxId, cutoff, TERMINAL_ORDER_STATES],
      );
    const r = rows[0];
    return { scanned: r?.scanned ?? 0, deleted: r?.deleted ?? 0, lastId: r?.last_id ?? null };
  }
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
