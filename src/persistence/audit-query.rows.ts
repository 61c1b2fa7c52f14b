/**
 * The rows the audit log's reading side returns (audit-query.repository.ts runs the SQL): their
 * shapes, the column lists that select them, and the mapping from the driver's values (dates to
 * ISO text, counts to numbers, absent JSON to empty values).
 */

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
  /** A FHIR create's If-None-Exist header, kept with its refusal. */
  ifNoneExist: string | null;
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
export interface OrderDetail {
  order: OrderRow & { request: Record<string, unknown> };
  timeline: EventRow[];
  /** Events left out of the middle of a timeline longer than TIMELINE_LIMIT (0: none). */
  timelineOmitted: number;
  /** With a cut timeline: the cursor of GET /api/audit/events?orderId= below the newest shown. */
  timelineOlderCursor?: string;
  messages: MessageRow[];
  /** The newest OUTBOUND_ON_ORDER outbound documents, newest first. */
  outbound: OutboxRow[];
  /** How many outbound documents the order has. */
  outboundTotal: number;
  /** The next (older) page of GET /api/audit/orders/{id}/outbound; absent when all are shown. */
  outboundNextCursor?: string;
}

/** An outbox row as it stood before a replay (read under FOR UPDATE). */
export interface DeadLetterLock {
  status: string;
  destination: string;
  attempts: number;
  last_error: string | null;
}

export const ORDER_COLUMNS = `o.id, o.created_at AS "createdAt", o.updated_at AS "updatedAt", o.source, o.sender, o.state,
  o.upstream_order_id AS "upstreamOrderId", o.upstream_status AS "upstreamStatus",
  o.accession_number AS "accessionNumber", o.patient_id AS "patientId",
  o.placer_order_number AS "placerOrderNumber", o.filler_order_number AS "fillerOrderNumber",
  o.study_instance_uid AS "studyInstanceUid", o.mapping_version AS "mappingVersion",
  o.last_error AS "lastError", o.inbound_message_id AS "inboundMessageId",
  o.placed_at AS "placedAt", o.study_deadline_at AS "studyDeadlineAt", o.upstream_status_at AS "upstreamStatusAt",
  (extract(epoch FROM o.created_at) * 1000000)::bigint::text AS "cursorUs"`;

export const EVENT_COLUMNS = `e.id::text AS id, e.occurred_at AS "occurredAt", e.order_id AS "orderId",
  e.inbound_message_id AS "inboundMessageId", e.kind, e.severity, e.actor, e.summary, e.detail`;

export const MESSAGE_COLUMNS = `m.id, m.received_at AS "receivedAt", m.transport, m.sender, m.remote_address AS "remoteAddress",
  m.message_type AS "messageType", m.message_control_id AS "messageControlId", m.content_type AS "contentType",
  m.outcome, m.response_code AS "responseCode", m.response_content_type AS "responseContentType",
  octet_length(m.raw) AS bytes, m.quirks, m.error,
  left(coalesce(m.error #>> '{problems,0,message}', m.error #>> '{problems,0,diagnostics}', m.error ->> 'message'), 300) AS "answerText"`;

export const OUTBOX_COLUMNS = `x.id::text AS id, x.created_at AS "createdAt", x.updated_at AS "updatedAt", x.order_id AS "orderId",
  x.destination, x.kind, x.status, x.attempts, x.next_attempt_at AS "nextAttemptAt", x.last_error AS "lastError",
  x.delivered_at AS "deliveredAt", x.payload, x.last_exchange AS "lastExchange",
  (extract(epoch FROM x.updated_at) * 1000000)::bigint::text AS "cursorUs"`;

/** An order document without its body (`d` is order_documents). */
export const DOCUMENT_COLUMNS = `d.id::text AS id, d.upstream_status AS "upstreamStatus", d.kind, d.report_type AS "reportType",
              d.content_type AS "contentType", octet_length(d.body) AS bytes, d.fetched_at AS "fetchedAt"`;

const iso = (v: unknown): string => (v instanceof Date ? v.toISOString() : String(v));
const isoOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : iso(v));

export function toOrderRow(r: OrderRow): OrderRow {
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

export function toEventRow(r: EventRow): EventRow {
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

export function toMessageRow(r: MessageRow): MessageRow {
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

export function toOutboxRow(r: OutboxRow): OutboxRow {
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

export function toDocumentRow<R extends OrderDocumentRow>(r: R): R {
  return { ...r, bytes: Number(r.bytes), fetchedAt: iso(r.fetchedAt) };
}
