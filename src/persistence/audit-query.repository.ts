import type { EntityManager } from 'typeorm';
import { AppError } from '../common/app-error';
import { RepositoryBase } from './repository-base';

/**
 * SQL of the audit log's reading side (audit/audit-query.service.ts validates, decides and
 * writes the audit events). Every search is an index scan: exact keys use their own index,
 * filters and time ranges use the (…, created_at, id) indexes of the audit-search migration,
 * and pages are keyset cursors, never OFFSET. Returns rows unmasked: masking is the
 * presenter's job (audit-presenter.ts), decided per request by role and reveal.
 */

export interface OrderSearch {
  orderId?: string;
  upstreamOrderId?: string;
  accession?: string;
  patientId?: string;
  placer?: string;
  filler?: string;
  messageControlId?: string;
  studyInstanceUid?: string;
  state?: string;
  source?: string;
  sender?: string;
  destination?: string;
  from?: Date;
  to?: Date;
  errorsOnly?: boolean;
  cursor?: string;
  limit?: number;
}

export interface EventSearch {
  orderId?: string;
  errorsOnly?: boolean;
  destination?: string;
  from?: Date;
  to?: Date;
  cursor?: string;
  limit?: number;
}

export interface MessageBrowse {
  from?: Date;
  to?: Date;
  sender?: string;
  transport?: string;
  /** Our answer's code: AA/AE/AR (HL7), the HTTP status (FHIR). */
  answerCode?: string;
  /** accepted, duplicate, rejected, error, or `refused` (rejected or error). */
  outcome?: string;
  text?: string;
  cursor?: string;
  limit?: number;
}

export interface OrderRow {
  id: string;
  createdAt: string;
  updatedAt: string;
  source: string;
  sender: string | null;
  state: string;
  upstreamOrderId: string | null;
  upstreamStatus: string | null;
  accessionNumber: string | null;
  patientId: string | null;
  placerOrderNumber: string | null;
  fillerOrderNumber: string | null;
  studyInstanceUid: string | null;
  mappingVersion: string | null;
  lastError: string | null;
  inboundMessageId: string | null;
  /** When the upstream order was created, the study deadline, the last upstream status change. */
  placedAt: string | null;
  studyDeadlineAt: string | null;
  upstreamStatusAt: string | null;
}

/** Upstream statuses after which no result comes: errors in "errors only". */
export const UPSTREAM_FAILED_STATUSES = ['FAILED', 'PREPROCESSING_FAILED', 'EXPIRED'] as const;
const UPSTREAM_FAILED_SQL = UPSTREAM_FAILED_STATUSES.map((s) => `'${s}'`).join(', ');

export interface EventRow {
  id: string;
  occurredAt: string;
  orderId: string | null;
  inboundMessageId: string | null;
  kind: string;
  severity: 'info' | 'warning' | 'error';
  actor: string | null;
  summary: string;
  detail: Record<string, unknown>;
}

export interface MessageRow {
  id: string;
  receivedAt: string;
  transport: string;
  sender: string | null;
  remoteAddress: string | null;
  messageType: string | null;
  messageControlId: string | null;
  contentType: string | null;
  outcome: string;
  responseCode: string | null;
  responseContentType: string | null;
  bytes: number;
  quirks: Array<{ code: string; detail: string }>;
  error: Record<string, unknown> | null;
  /** Why it was refused, in one line (the first problem of our answer); null if accepted. */
  answerText: string | null;
}

export interface MessageWithRaw extends MessageRow {
  raw: Buffer;
  response: Buffer | null;
}

export interface OutboxRow {
  id: string;
  createdAt: string;
  updatedAt: string;
  orderId: string | null;
  destination: string;
  kind: string;
  status: 'pending' | 'delivered' | 'dead';
  attempts: number;
  nextAttemptAt: string;
  lastError: string | null;
  deliveredAt: string | null;
  payload: Record<string, unknown>;
  /** The last attempt: `{attempt, at, outcome, sent: {contentType, text}, answer: {status, contentType, text}}`. */
  lastExchange: Record<string, unknown> | null;
  /** The order's accession and placer number (the dead-letter list names orders by them). */
  accessionNumber?: string | null;
  placerOrderNumber?: string | null;
}

/** A report the upstream produced for an order (order_documents). */
export interface OrderDocumentRow {
  id: string;
  upstreamStatus: string;
  kind: 'results' | 'failure' | 'qc';
  reportType: string;
  contentType: string;
  bytes: number;
  fetchedAt: string;
}

export interface Page<T> {
  items: T[];
  /** Opaque; pass back as `cursor` for the next (older) page. Absent on the last page. */
  nextCursor?: string;
}

export interface OrderDetail {
  order: OrderRow & { request: Record<string, unknown> };
  timeline: EventRow[];
  messages: MessageRow[];
  outbound: OutboxRow[];
}

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 200;
/** A timeline longer than this is cut (the API says so); real orders have tens of events. */
export const TIMELINE_LIMIT = 2000;

/** An outbox row as it stood before a replay (read under FOR UPDATE). */
export interface DeadLetterLock {
  status: string;
  attempts: number;
  last_error: string | null;
}

const ORDER_COLUMNS = `o.id, o.created_at AS "createdAt", o.updated_at AS "updatedAt", o.source, o.sender, o.state,
  o.upstream_order_id AS "upstreamOrderId", o.upstream_status AS "upstreamStatus",
  o.accession_number AS "accessionNumber", o.patient_id AS "patientId",
  o.placer_order_number AS "placerOrderNumber", o.filler_order_number AS "fillerOrderNumber",
  o.study_instance_uid AS "studyInstanceUid", o.mapping_version AS "mappingVersion",
  o.last_error AS "lastError", o.inbound_message_id AS "inboundMessageId",
  o.placed_at AS "placedAt", o.study_deadline_at AS "studyDeadlineAt", o.upstream_status_at AS "upstreamStatusAt",
  (extract(epoch FROM o.created_at) * 1000000)::bigint::text AS "cursorUs"`;

const EVENT_COLUMNS = `e.id::text AS id, e.occurred_at AS "occurredAt", e.order_id AS "orderId",
  e.inbound_message_id AS "inboundMessageId", e.kind, e.severity, e.actor, e.summary, e.detail`;

const MESSAGE_COLUMNS = `m.id, m.received_at AS "receivedAt", m.transport, m.sender, m.remote_address AS "remoteAddress",
  m.message_type AS "messageType", m.message_control_id AS "messageControlId", m.content_type AS "contentType",
  m.outcome, m.response_code AS "responseCode", m.response_content_type AS "responseContentType",
  octet_length(m.raw) AS bytes, m.quirks, m.error,
  left(coalesce(m.error #>> '{problems,0,message}', m.error #>> '{problems,0,diagnostics}', m.error ->> 'message'), 300) AS "answerText"`;

const OUTBOX_COLUMNS = `x.id::text AS id, x.created_at AS "createdAt", x.updated_at AS "updatedAt", x.order_id AS "orderId",
  x.destination, x.kind, x.status, x.attempts, x.next_attempt_at AS "nextAttemptAt", x.last_error AS "lastError",
  x.delivered_at AS "deliveredAt", x.payload, x.last_exchange AS "lastExchange",
  (extract(epoch FROM x.updated_at) * 1000000)::bigint::text AS "cursorUs"`;

export class AuditQueryRepository extends RepositoryBase {
  /** The order list, newest first. Every filter given must match (AND); `orderId` is a UUID. */
  async searchOrders(search: OrderSearch): Promise<Page<OrderRow>> {
    const where: string[] = [];
    const params: unknown[] = [];
    const p = (value: unknown) => {
      params.push(value);
      return `$${params.length}`;
    };
    if (search.orderId !== undefined) where.push(`o.id = ${p(search.orderId)}::uuid`);
    if (search.upstreamOrderId) where.push(`o.upstream_order_id = ${p(search.upstreamOrderId)}`);
    if (search.accession) where.push(`o.accession_number = ${p(search.accession)}`);
    if (search.patientId) where.push(`o.patient_id = ${p(search.patientId)}`);
    if (search.placer) where.push(`o.placer_order_number = ${p(search.placer)}`);
    if (search.filler) where.push(`o.filler_order_number = ${p(search.filler)}`);
    if (search.studyInstanceUid) where.push(`o.study_instance_uid = ${p(search.studyInstanceUid)}`);
    if (search.state) where.push(`o.state = ${p(search.state)}`);
    if (search.source) where.push(`o.source = ${p(search.source)}`);
    if (search.sender) where.push(`o.sender = ${p(search.sender)}`);
    if (search.messageControlId) {
      // MSH-10 → inbound_messages (control id index) → their events (message index) → orders.
      // Covers the message that created the order and later ones (cancel, change, demographics).
      where.push(`o.id IN (
        SELECT e.order_id FROM audit_events e
         WHERE e.inbound_message_id IN (SELECT m.id FROM inbound_messages m WHERE m.message_control_id = ${p(search.messageControlId)})
           AND e.order_id IS NOT NULL)`);
    }
    if (search.destination) {
      where.push(
        `o.id IN (SELECT x.order_id FROM outbox x WHERE x.destination = ${p(search.destination)} AND x.order_id IS NOT NULL)`,
      );
    }
    if (search.errorsOnly) {
      // error events, or an upstream order that failed (no result is coming)
      where.push(
        `o.id IN (SELECT e.order_id FROM audit_events e WHERE e.severity = 'error' AND e.order_id IS NOT NULL
                  UNION ALL
                  SELECT f.id FROM orders f WHERE f.upstream_status IN (${UPSTREAM_FAILED_SQL}))`,
      );
    }
    if (search.from) where.push(`o.created_at >= ${p(search.from)}`);
    if (search.to) where.push(`o.created_at < ${p(search.to)}`);
    const cursor = decodeCursor(search.cursor);
    if (cursor) {
      where.push(
        `(o.created_at, o.id) < (timestamptz 'epoch' + ${p(cursor.us)}::bigint * interval '1 microsecond', ${p(cursor.id)}::uuid)`,
      );
    }
    const limit = pageSize(search.limit);
    const rows: Array<OrderRow & { cursorUs: string }> = await this.db().query(
      `SELECT ${ORDER_COLUMNS} FROM orders o
        ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
        ORDER BY o.created_at DESC, o.id DESC LIMIT ${limit + 1}`,
      params,
    );
    return toPage(rows, limit, (r) => ({ us: r.cursorUs, id: r.id }), toOrderRow);
  }

  /** Inbound messages by MSH-10 (FHIR: the idempotency identifier), including rejected ones. */
  async searchMessages(search: {
    messageControlId: string;
    limit?: number;
  }): Promise<Page<MessageRow>> {
    const limit = pageSize(search.limit);
    const rows: MessageRow[] = await this.db().query(
      `SELECT ${MESSAGE_COLUMNS} FROM inbound_messages m WHERE m.message_control_id = $1
        ORDER BY m.received_at DESC LIMIT ${limit}`,
      [search.messageControlId],
    );
    return { items: rows.map(toMessageRow) };
  }

  /**
   * Every inbound message and request, accepted or refused, newest first (keyset on
   * received_at, id through inbound_messages_received_at_idx). Filters AND together; `text`
   * looks in our answer (ACK text, OperationOutcome) and the recorded problems.
   */
  async browseMessages(search: MessageBrowse): Promise<Page<MessageRow>> {
    const where: string[] = [];
    const params: unknown[] = [];
    const p = (value: unknown) => {
      params.push(value);
      return `$${params.length}`;
    };
    if (search.from) where.push(`m.received_at >= ${p(search.from)}`);
    if (search.to) where.push(`m.received_at < ${p(search.to)}`);
    if (search.sender) where.push(`m.sender = ${p(search.sender)}`);
    if (search.transport) where.push(`m.transport = ${p(search.transport)}`);
    if (search.answerCode) where.push(`m.response_code = ${p(search.answerCode)}`);
    if (search.outcome === 'refused') where.push(`m.outcome IN ('rejected', 'error')`);
    else if (search.outcome) where.push(`m.outcome = ${p(search.outcome)}`);
    if (search.text) {
      const like = p(`%${search.text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`);
      where.push(
        `(m.error::text ILIKE ${like} OR encode(m.response, 'escape') ILIKE ${like} OR m.message_type ILIKE ${like})`,
      );
    }
    const cursor = decodeCursor(search.cursor);
    if (cursor) {
      where.push(
        `(m.received_at, m.id) < (timestamptz 'epoch' + ${p(cursor.us)}::bigint * interval '1 microsecond', ${p(cursor.id)}::uuid)`,
      );
    }
    const limit = pageSize(search.limit);
    const rows: Array<MessageRow & { cursorUs: string }> = await this.db().query(
      `SELECT ${MESSAGE_COLUMNS}, (extract(epoch FROM m.received_at) * 1000000)::bigint::text AS "cursorUs"
         FROM inbound_messages m
        ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
        ORDER BY m.received_at DESC, m.id DESC LIMIT ${limit + 1}`,
      params,
    );
    return toPage(rows, limit, (r) => ({ us: r.cursorUs, id: r.id }), toMessageRow);
  }

  /**
   * Audit events, newest first: errors only (partial index), by destination, or by time range;
   * `orderId` is a UUID.
   */
  async searchEvents(search: EventSearch): Promise<Page<EventRow>> {
    const where: string[] = [];
    const params: unknown[] = [];
    const p = (value: unknown) => {
      params.push(value);
      return `$${params.length}`;
    };
    if (search.orderId !== undefined) where.push(`e.order_id = ${p(search.orderId)}::uuid`);
    if (search.errorsOnly) where.push(`e.severity = 'error'`);
    if (search.destination) {
      where.push(
        `e.detail ? 'destination' AND e.detail->>'destination' = ${p(search.destination)}`,
      );
    }
    if (search.from) where.push(`e.occurred_at >= ${p(search.from)}`);
    if (search.to) where.push(`e.occurred_at < ${p(search.to)}`);
    const cursor = decodeCursor(search.cursor);
    if (cursor) where.push(`e.id < ${p(cursor.id)}::bigint`);
    const limit = pageSize(search.limit);
    const rows: EventRow[] = await this.db().query(
      `SELECT ${EVENT_COLUMNS} FROM audit_events e
        ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
        ORDER BY e.id DESC LIMIT ${limit + 1}`,
      params,
    );
    return toPage(rows, limit, (r) => ({ us: '0', id: r.id }), toEventRow);
  }

  /** The order (by UUID) with its timeline, messages and outbound documents; undefined if none. */
  async orderDetail(orderId: string): Promise<OrderDetail | undefined> {
    // Three independent reads in parallel (one round trip of latency), then the messages.
    const [orders, timeline, outbound] = await Promise.all([
      this.db().query(`SELECT ${ORDER_COLUMNS}, o.request FROM orders o WHERE o.id = $1::uuid`, [
        orderId,
      ]) as Promise<Array<OrderRow & { request: Record<string, unknown> }>>,
      // The order's own events, and the message-level events (received, quirks, rejected)
      // of every inbound message that touched it: both through (…, id) indexes.
      this.db().query(
        `WITH msgs AS (
         SELECT DISTINCT e.inbound_message_id AS id FROM audit_events e
          WHERE e.order_id = $1::uuid AND e.inbound_message_id IS NOT NULL
         UNION SELECT inbound_message_id FROM orders WHERE id = $1::uuid AND inbound_message_id IS NOT NULL
       )
       SELECT * FROM (
         SELECT ${EVENT_COLUMNS}, e.id AS seq FROM audit_events e WHERE e.order_id = $1::uuid
         UNION ALL
         SELECT ${EVENT_COLUMNS}, e.id AS seq FROM audit_events e
          WHERE e.inbound_message_id IN (SELECT id FROM msgs) AND e.order_id IS NULL
       ) t ORDER BY seq LIMIT ${TIMELINE_LIMIT}`,
        [orderId],
      ) as Promise<EventRow[]>,
      this.db().query(
        `SELECT ${OUTBOX_COLUMNS} FROM outbox x WHERE x.order_id = $1::uuid ORDER BY x.id`,
        [orderId],
      ) as Promise<OutboxRow[]>,
    ]);
    const order = orders[0];
    if (!order) return undefined;
    const messageIds = [
      ...new Set(
        [order.inboundMessageId, ...timeline.map((e) => e.inboundMessageId)].filter(
          (id): id is string => Boolean(id),
        ),
      ),
    ];
    const messages: MessageRow[] = messageIds.length
      ? await this.db().query(
          `SELECT ${MESSAGE_COLUMNS} FROM inbound_messages m WHERE m.id = ANY($1::uuid[]) ORDER BY m.received_at`,
          [messageIds],
        )
      : [];
    return {
      order: { ...toOrderRow(order), request: order.request },
      timeline: timeline.map(toEventRow),
      messages: messages.map(toMessageRow),
      outbound: outbound.map(toOutboxRow),
    };
  }

  /** An inbound message (by UUID), raw bytes included, with its events; undefined if none. */
  /** The accepted inbound message stored under an idempotency key (inbound_messages_idempotency_uq). */
  async acceptedByIdempotencyKey(key: string): Promise<MessageRow | undefined> {
    const rows: MessageRow[] = await this.db().query(
      `SELECT ${MESSAGE_COLUMNS} FROM inbound_messages m WHERE m.idempotency_key = $1 AND m.outcome = 'accepted'`,
      [key],
    );
    return rows[0];
  }

  async message(id: string): Promise<{ message: MessageWithRaw; events: EventRow[] } | undefined> {
    const rows: Array<MessageRow & { raw: Buffer; response: Buffer | null }> =
      await this.db().query(
        `SELECT ${MESSAGE_COLUMNS}, m.raw, m.response FROM inbound_messages m WHERE m.id = $1::uuid`,
        [id],
      );
    const row = rows[0];
    if (!row) return undefined;
    const events: EventRow[] = await this.db().query(
      `SELECT ${EVENT_COLUMNS} FROM audit_events e WHERE e.inbound_message_id = $1::uuid ORDER BY e.id LIMIT ${TIMELINE_LIMIT}`,
      [id],
    );
    return {
      message: { ...toMessageRow(row), raw: row.raw, response: row.response },
      events: events.map(toEventRow),
    };
  }

  /** Dead letters, most recently given up first (outbox_dead_idx). */
  async deadLetters(search: { cursor?: string; limit?: number }): Promise<Page<OutboxRow>> {
    const params: unknown[] = [];
    let where = `x.status = 'dead'`;
    const cursor = decodeCursor(search.cursor);
    if (cursor) {
      params.push(cursor.us, cursor.id);
      where += ` AND (x.updated_at, x.id) < (timestamptz 'epoch' + $1::bigint * interval '1 microsecond', $2::bigint)`;
    }
    const limit = pageSize(search.limit);
    const rows: Array<OutboxRow & { cursorUs: string }> = await this.db().query(
      `SELECT ${OUTBOX_COLUMNS}, o.accession_number AS "accessionNumber", o.placer_order_number AS "placerOrderNumber"
         FROM outbox x LEFT JOIN orders o ON o.id = x.order_id
        WHERE ${where} ORDER BY x.updated_at DESC, x.id DESC LIMIT ${limit + 1}`,
      params,
    );
    return toPage(rows, limit, (r) => ({ us: r.cursorUs, id: r.id }), toOutboxRow);
  }

  /** The upstream's reports stored for an order (results, failure, QC), without their bodies. */
  async orderDocuments(orderId: string): Promise<OrderDocumentRow[]> {
    const rows: OrderDocumentRow[] = await this.db().query(
      `SELECT d.id::text AS id, d.upstream_status AS "upstreamStatus", d.kind, d.report_type AS "reportType",
              d.content_type AS "contentType", octet_length(d.body) AS bytes, d.fetched_at AS "fetchedAt"
         FROM order_documents d WHERE d.order_id = $1::uuid ORDER BY d.id`,
      [orderId],
    );
    return rows.map((r) => ({ ...r, bytes: Number(r.bytes), fetchedAt: iso(r.fetchedAt) }));
  }

  /** One stored report with its body, if it belongs to the order. */
  async orderDocument(
    orderId: string,
    id: string,
  ): Promise<(OrderDocumentRow & { body: Buffer }) | undefined> {
    const rows: Array<OrderDocumentRow & { body: Buffer }> = await this.db().query(
      `SELECT d.id::text AS id, d.upstream_status AS "upstreamStatus", d.kind, d.report_type AS "reportType",
              d.content_type AS "contentType", octet_length(d.body) AS bytes, d.fetched_at AS "fetchedAt", d.body
         FROM order_documents d WHERE d.order_id = $1::uuid AND d.id = $2::bigint`,
      [orderId, id],
    );
    const r = rows[0];
    return r ? { ...r, bytes: Number(r.bytes), fetchedAt: iso(r.fetchedAt) } : undefined;
  }

  /** An outbox row by its (numeric) id; undefined if none. */
  async outboxEntry(id: string): Promise<OutboxRow | undefined> {
    const rows: OutboxRow[] = await this.db().query(
      `SELECT ${OUTBOX_COLUMNS} FROM outbox x WHERE x.id = $1::bigint`,
      [id],
    );
    return rows[0] ? toOutboxRow(rows[0]) : undefined;
  }

  /** Locks an outbox row for a replay (FOR UPDATE on the caller's transaction). */
  async lockForReplay(id: string, manager: EntityManager): Promise<DeadLetterLock | undefined> {
    const before: DeadLetterLock[] = await manager.query(
      `SELECT status, attempts, last_error FROM outbox WHERE id = $1::bigint FOR UPDATE`,
      [id],
    );
    return before[0];
  }

  /** Sets a row pending again (attempts reset, due now) on the caller's transaction. */
  async requeue(id: string, manager: EntityManager): Promise<OutboxRow> {
    // As a CTE, so that the driver returns the rows (a bare UPDATE yields [rows, count]).
    const rows: OutboxRow[] = await manager.query(
      `WITH x AS (
           UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = now(), updated_at = now()
            WHERE id = $1::bigint RETURNING *)
         SELECT ${OUTBOX_COLUMNS} FROM x`,
      [id],
    );
    return toOutboxRow(rows[0]!);
  }
}

function pageSize(limit: number | undefined): number {
  if (limit === undefined || !Number.isFinite(limit)) return DEFAULT_PAGE_SIZE;
  return Math.min(MAX_PAGE_SIZE, Math.max(1, Math.floor(limit)));
}

interface Cursor {
  us: string;
  id: string;
}

function encodeCursor(c: Cursor): string {
  return Buffer.from(`${c.us}/${c.id}`, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string | undefined): Cursor | undefined {
  if (!cursor) return undefined;
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const match = /^(\d{1,20})\/([0-9a-f-]{1,36})$/i.exec(text);
  if (!match) throw new AppError('bad_request', 'cursor is not valid');
  return { us: match[1]!, id: match[2]! };
}

function toPage<R, T>(
  rows: R[],
  limit: number,
  cursorOf: (row: R) => Cursor,
  map: (row: R) => T,
): Page<T> {
  const more = rows.length > limit;
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return {
    items: items.map(map),
    ...(more && last ? { nextCursor: encodeCursor(cursorOf(last)) } : {}),
  };
}

const iso = (v: unknown): string => (v instanceof Date ? v.toISOString() : String(v));
const isoOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : iso(v));

function toOrderRow(r: OrderRow): OrderRow {
  return {
    id: r.id,
    createdAt: iso(r.createdAt),
    updatedAt: iso(r.updatedAt),
    source: r.source,
    sender: r.sender,
    state: r.state,
    upstreamOrderId: r.upstreamOrderId,
    upstreamStatus: r.upstreamStatus,
    accessionNumber: r.accessionNumber,
    patientId: r.patientId,
    placerOrderNumber: r.placerOrderNumber,
    fillerOrderNumber: r.fillerOrderNumber,
    studyInstanceUid: r.studyInstanceUid,
    mappingVersion: r.mappingVersion,
    lastError: r.lastError,
    inboundMessageId: r.inboundMessageId,
    placedAt: isoOrNull(r.placedAt),
    studyDeadlineAt: isoOrNull(r.studyDeadlineAt),
    upstreamStatusAt: isoOrNull(r.upstreamStatusAt),
  };
}

function toEventRow(r: EventRow): EventRow {
  return {
    id: String(r.id),
    occurredAt: iso(r.occurredAt),
    orderId: r.orderId,
    inboundMessageId: r.inboundMessageId,
    kind: r.kind,
    severity: r.severity,
    actor: r.actor,
    summary: r.summary,
    detail: r.detail ?? {},
  };
}

function toMessageRow(r: MessageRow): MessageRow {
  return {
    id: r.id,
    receivedAt: iso(r.receivedAt),
    transport: r.transport,
    sender: r.sender,
    remoteAddress: r.remoteAddress,
    messageType: r.messageType,
    messageControlId: r.messageControlId,
    contentType: r.contentType,
    outcome: r.outcome,
    responseCode: r.responseCode,
    responseContentType: r.responseContentType,
    bytes: Number(r.bytes),
    quirks: r.quirks ?? [],
    error: r.error,
    answerText: r.answerText ?? null,
  };
}

function toOutboxRow(r: OutboxRow): OutboxRow {
  return {
    id: String(r.id),
    createdAt: iso(r.createdAt),
    updatedAt: iso(r.updatedAt),
    orderId: r.orderId,
    destination: r.destination,
    kind: r.kind,
    status: r.status,
    attempts: Number(r.attempts),
    nextAttemptAt: iso(r.nextAttemptAt),
    lastError: r.lastError,
    deliveredAt: isoOrNull(r.deliveredAt),
    payload: r.payload,
    lastExchange: r.lastExchange ?? null,
    ...(r.accessionNumber !== undefined ? { accessionNumber: r.accessionNumber } : {}),
    ...(r.placerOrderNumber !== undefined ? { placerOrderNumber: r.placerOrderNumber } : {}),
  };
}
