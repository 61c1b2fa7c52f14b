import type {
  EventRow,
  MessageRow,
  MessageWithRaw,
  OrderDetail,
  OrderRow,
  OutboxRow,
} from './audit-query.service';
import { maskEventDetail, maskIdentifier, maskJson } from './phi-masking';
import { maskedText, rawView, sideView, type RawView } from './audit-presenter.raw';
import { upstreamStatusText, waitingOf, type Waiting } from './audit-presenter.status';
import {
  boundedOutbound,
  LIST_BODY_CHARACTERS,
  WHOLE_BODY_CHARACTERS,
} from './audit-presenter.bounded';

export {
  HL7_FIELD_NAMES,
  prettyJson,
  rawView,
  type Hl7FieldView,
  type RawView,
} from './audit-presenter.raw';
export { upstreamStatusText, waitingOf, type Waiting } from './audit-presenter.status';

/**
 * Turns audit rows into what the API and the page show, masked unless `reveal` (an admin
 * who gave a reason, already audited). Masking is applied here, once, for both.
 */

export function presentOrder(order: OrderRow, reveal: boolean): OrderRow {
  if (reveal) return order;
  return { ...order, patientId: order.patientId ? maskIdentifier(order.patientId) : null };
}

export function presentEvent(event: EventRow, reveal: boolean): EventRow {
  if (reveal) return event;
  return { ...event, detail: maskEventDetail(event.kind, event.detail) };
}

export function presentOutbox(row: OutboxRow, reveal: boolean): OutboxRow {
  if (reveal) return row;
  return {
    ...row,
    payload: maskJson(row.payload) as Record<string, unknown>,
    lastExchange: maskExchange(row.lastExchange),
  };
}

/** One side of an exchange (`{contentType, text, status?}`), its text masked by its format. */
function maskExchangeSide(side: unknown): unknown {
  if (side === null || typeof side !== 'object') return side;
  const s = side as { contentType?: string; text?: string };
  if (typeof s.text !== 'string') return side;
  return { ...s, text: maskedText(s.text, s.contentType ?? '') };
}

/** outbox.last_exchange with what was sent and what came back masked (API and page). */
export function maskExchange(
  exchange: Record<string, unknown> | null,
): Record<string, unknown> | null {
  if (!exchange) return exchange;
  return {
    ...exchange,
    ...('sent' in exchange ? { sent: maskExchangeSide(exchange.sent) } : {}),
    ...('answer' in exchange ? { answer: maskExchangeSide(exchange.answer) } : {}),
  };
}

export interface OrderDetailView {
  order: OrderRow & { request: Record<string, unknown> };
  timeline: EventRow[];
  /** Events not shown between the first TIMELINE_HEAD and the newest (a very long timeline). */
  timelineOmitted: number;
  /** The cursor of GET /api/audit/events?orderId=… for the events older than the newest shown. */
  timelineOlderCursor?: string;
  messages: MessageRow[];
  /** The newest outbound documents (OUTBOUND_ON_ORDER), each body cut (LIST_BODY_CHARACTERS). */
  outbound: Array<OutboundItem & { answers: EventRow[] }>;
  outboundTotal: number;
  outboundNextCursor?: string;
  /** The latest `mapping.applied` lineage, for the side-by-side view. */
  lineage: Array<{
    target: string;
    source: string;
    value: string;
    ruleId: string;
    rule?: string;
  }>;
  mappingVersion: string | null;
  masked: boolean;
  /**
   * The upstream status as the analyst should read it: the last polled value, unless the order
   * ended here and the upstream order was cancelled afterwards (then CANCELLED, and why).
   */
  upstreamStatusText: string | null;
  waiting: Waiting | null;
}

export function presentOrderDetail(
  detail: OrderDetail,
  reveal: boolean,
  upstreamStuckHours = 72,
): OrderDetailView {
  const timeline = detail.timeline.map((e) => presentEvent(e, reveal));
  const mapping = [...timeline].reverse().find((e) => e.kind === 'mapping.applied');
  const lineage = Array.isArray(mapping?.detail.lineage)
    ? (mapping.detail.lineage as OrderDetailView['lineage'])
    : [];
  return {
    order: {
      ...presentOrder(detail.order, reveal),
      request: reveal
        ? detail.order.request
        : (maskJson(detail.order.request) as Record<string, unknown>),
    },
    timeline,
    timelineOmitted: detail.timelineOmitted,
    ...(detail.timelineOlderCursor ? { timelineOlderCursor: detail.timelineOlderCursor } : {}),
    messages: detail.messages,
    outbound: detail.outbound.map((row) => ({
      ...presentOutboundItem(row, reveal),
      answers: timeline.filter(
        (e) => e.kind.startsWith('outbound.') && String(e.detail.outboxId ?? '') === row.id,
      ),
    })),
    outboundTotal: detail.outboundTotal,
    ...(detail.outboundNextCursor ? { outboundNextCursor: detail.outboundNextCursor } : {}),
    lineage,
    mappingVersion:
      (typeof mapping?.detail.mappingVersion === 'string' ? mapping.detail.mappingVersion : null) ??
      detail.order.mappingVersion,
    masked: !reveal,
    upstreamStatusText: upstreamStatusText(detail.order, detail.timeline),
    waiting: waitingOf(detail.order, upstreamStuckHours),
  };
}

/** An outbound document in a list, with its document and peer answer views. */
export type OutboundItem = OutboxRow & {
  document?: RawView;
  peerAnswer?: PeerAnswerView;
  bodiesCut?: true;
  fullPath?: string;
};

/**
 * An outbound document as a list shows it (order view, an order's outbound pages, dead
 * letters): masked, its bodies cut to LIST_BODY_CHARACTERS, `fullPath` to the whole.
 */
export function presentOutboundItem(row: OutboxRow, reveal: boolean): OutboundItem {
  return boundedOutbound(
    { ...presentOutbox(row, reveal), ...documentOf(row, reveal) },
    LIST_BODY_CHARACTERS,
    `/api/audit/outbound/${row.id}`,
  );
}

/**
 * An outbound document in the dead-letter list: masked, payload and exchange cut to
 * LIST_BODY_CHARACTERS, without the document and answer views (its order page draws them).
 */
export function presentDeadLetter(row: OutboxRow): OutboundItem {
  return boundedOutbound(
    presentOutbox(row, false),
    LIST_BODY_CHARACTERS,
    `/api/audit/outbound/${row.id}`,
  );
}

/** One outbound document alone: every body up to WHOLE_BODY_CHARACTERS (the raw views' bound). */
export function presentOutboundWhole(row: OutboxRow, reveal: boolean): OutboundItem {
  return boundedOutbound(
    { ...presentOutbox(row, reveal), ...documentOf(row, reveal) },
    WHOLE_BODY_CHARACTERS,
  );
}

export interface MessageView extends MessageRow {
  raw: RawView;
  response: RawView | null;
  events: EventRow[];
  masked: boolean;
}

export function presentMessage(
  message: MessageWithRaw,
  events: EventRow[],
  reveal: boolean,
): MessageView {
  // the If-None-Exist header names identifier values: not shown (kept for a reprocess)
  const { raw, response, ifNoneExist: _ifNoneExist, ...rest } = message;
  return {
    ...rest,
    raw: rawView(raw, message.contentType, reveal),
    response: response ? rawView(response, message.responseContentType, reveal) : null,
    events: events.map((e) => presentEvent(e, reveal)),
    masked: !reveal,
  };
}

/**
 * The outbound document as it went out, for display: the HL7 message (ORU, ORM status) segment
 * by segment with field names, FHIR resources as JSON; masked unless `reveal`.
 */
export function documentOf(
  row: OutboxRow,
  reveal: boolean,
): { document?: RawView; peerAnswer?: PeerAnswerView } {
  const exchange = row.lastExchange as {
    sent?: { contentType?: string; text?: string };
    answer?: { contentType?: string; text?: string; status?: number | string };
    attempt?: number;
    at?: string;
  } | null;
  if (exchange?.sent?.text !== undefined || exchange?.answer) {
    return {
      ...(exchange.sent?.text !== undefined
        ? { document: sideView(exchange.sent.text, exchange.sent.contentType ?? '', reveal) }
        : {}),
      ...(exchange.answer
        ? {
            peerAnswer: {
              status: exchange.answer.status ?? null,
              attempt: exchange.attempt ?? null,
              at: exchange.at ?? null,
              view:
                exchange.answer.text !== undefined
                  ? sideView(exchange.answer.text, exchange.answer.contentType ?? '', reveal)
                  : undefined,
            },
          }
        : {}),
    };
  }
  const p = row.payload as Record<string, unknown>;
  if (typeof p.hl7 === 'string') return { document: rawView(Buffer.from(p.hl7), null, reveal) };
  if (typeof p.resourceType === 'string') {
    return { document: rawView(Buffer.from(JSON.stringify(p)), 'application/fhir+json', reveal) };
  }
  return {};
}

/** The peer's raw answer to the last attempt: the RIS's ACK, the EHR's status and body. */
export interface PeerAnswerView {
  status: number | string | null;
  attempt: number | null;
  at: string | null;
  view?: RawView;
}
