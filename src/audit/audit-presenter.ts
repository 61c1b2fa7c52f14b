import { parseHl7 } from '../hl7';
import type {
  EventRow,
  MessageRow,
  MessageWithRaw,
  OrderDetail,
  OrderRow,
  OutboxRow,
} from './audit-query.service';
import {
  hl7Delimiters,
  hl7Fields,
  hl7Segments,
  maskHl7Text,
  maskIdentifier,
  maskDicomValue,
  maskJson,
} from './phi-masking';

/**
 * Turns audit rows into what the API and the page show, masked unless `reveal` (an admin
 * who gave a reason, already audited). Masking is applied here, once, for both.
 */

export interface Hl7FieldView {
  /** e.g. `PID-5` */
  position: string;
  /** Field name from HL7 v2.5.1, when known. */
  name?: string;
  value: string;
}

export type RawView =
  | {
      format: 'hl7';
      separator: string;
      segments: Array<{ id: string; fields: Hl7FieldView[] }>;
      text: string;
    }
  | { format: 'json'; text: string }
  | { format: 'text'; text: string };

/** What an open order waits for, since when, and until when (its deadline), if it waits. */
export interface Waiting {
  for: string;
  since: string | null;
  /** The deadline after which the adapter ends the order (study) or alerts (upstream). */
  until: string | null;
}

/**
 * Whether the order waits, and for what: placed orders for their study (until the study
 * deadline), processing orders for the upstream and qc-hold orders for a QC decision (until
 * the stuck-order sweep's limit after the last upstream status change).
 */
export function waitingOf(
  o: Pick<
    OrderRow,
    'state' | 'createdAt' | 'placedAt' | 'studyDeadlineAt' | 'upstreamStatusAt' | 'upstreamStatus'
  >,
  upstreamStuckHours: number,
): Waiting | null {
  const plus = (iso: string | null) =>
    iso ? new Date(Date.parse(iso) + upstreamStuckHours * 3_600_000).toISOString() : null;
  switch (o.state) {
    case 'received':
      return { for: 'to be placed upstream', since: o.createdAt, until: null };
    case 'placed':
      return {
        for: 'the study',
        since: o.placedAt ?? o.createdAt,
        until: o.studyDeadlineAt,
      };
    case 'processing':
      return {
        for: `the upstream (${o.upstreamStatus ?? 'no status yet'})`,
        since: o.upstreamStatusAt ?? o.placedAt,
        until: plus(o.upstreamStatusAt ?? o.placedAt),
      };
    case 'qc-hold':
      return {
        for: 'a QC decision (bypass, or accept the rejection)',
        since: o.upstreamStatusAt,
        until: plus(o.upstreamStatusAt),
      };
    default:
      return null;
  }
}

export function presentOrder(order: OrderRow, reveal: boolean): OrderRow {
  if (reveal) return order;
  return { ...order, patientId: order.patientId ? maskIdentifier(order.patientId) : null };
}

export function presentEvent(event: EventRow, reveal: boolean): EventRow {
  if (reveal) return event;
  return { ...event, detail: maskJson(event.detail) as Record<string, unknown> };
}

export function presentOutbox(row: OutboxRow, reveal: boolean): OutboxRow {
  if (reveal) return row;
  return {
    ...row,
    payload: maskJson(row.payload) as Record<string, unknown>,
    lastExchange: maskExchange(row.lastExchange),
  };
}

/** The tag dump of a DICOM document we sent (outbound/dicom-tag-dump.ts). */
const DICOM_TAG_DUMP = 'application/x-dicom-tag-dump+json';

/** One side of an exchange (`{contentType, text, status?}`), its text masked by its format. */
function maskExchangeSide(side: unknown): unknown {
  if (side === null || typeof side !== 'object') return side;
  const s = side as { contentType?: string; text?: string };
  if (typeof s.text !== 'string') return side;
  return { ...s, text: maskedText(s.text, s.contentType ?? '') };
}

function maskedText(text: string, contentType: string): string {
  const type = contentType.toLowerCase();
  if (type === DICOM_TAG_DUMP) {
    try {
      const lines = JSON.parse(text) as Array<{ keyword: string; value: string }>;
      return JSON.stringify(
        lines.map((l) => ({ ...l, value: maskDicomValue(l.keyword, l.value) })),
      );
    } catch {
      return '***';
    }
  }
  if (type.includes('json')) {
    try {
      return JSON.stringify(maskJson(JSON.parse(text)), null, 2);
    } catch {
      return '***';
    }
  }
  if (/^\uFEFF?MSH/.test(text.trimStart())) return maskHl7Text(text);
  return '***';
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
  messages: MessageRow[];
  outbound: Array<
    OutboxRow & { answers: EventRow[]; document?: RawView; peerAnswer?: PeerAnswerView }
  >;
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

/** Upstream statuses after which nothing more happens upstream (imaging-service-api.md). */
const UPSTREAM_FINAL = new Set([
  'DELIVERED',
  'FAILED',
  'PREPROCESSING_FAILED',
  'CANCELLED',
  'EXPIRED',
]);

/**
 * An order that ended here (deadline, refusal, cancel) keeps the last status it polled
 * (often PENDING), while the adapter cancels the upstream order: the `upstream.call` of that
 * cancel says what the upstream order became.
 */
export function upstreamStatusText(
  order: Pick<OrderRow, 'state' | 'upstreamStatus' | 'upstreamOrderId'>,
  timeline: readonly EventRow[],
): string | null {
  const status = order.upstreamStatus;
  if (!order.upstreamOrderId) return status;
  const ended = order.state === 'failed' || order.state === 'cancelled';
  if (!ended || (status && UPSTREAM_FINAL.has(status))) return status;
  const cancel = [...timeline]
    .reverse()
    .find((e) => e.kind === 'upstream.call' && e.detail.operation === 'cancel-order');
  if (cancel?.detail.outcome === 'success') {
    return `CANCELLED (cancelled by the adapter when the order ended here; last polled ${status ?? '–'})`;
  }
  if (cancel) {
    return `${status ?? '–'} (last polled; cancelling the upstream order failed: ${String(cancel.detail.status ?? cancel.detail.outcome)})`;
  }
  return `${status ?? '–'} (last polled before the order ended here)`;
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
    messages: detail.messages,
    outbound: detail.outbound.map((row) => ({
      ...presentOutbox(row, reveal),
      ...documentOf(row, reveal),
      answers: timeline.filter(
        (e) => e.kind.startsWith('outbound.') && String(e.detail.outboxId ?? '') === row.id,
      ),
    })),
    lineage,
    mappingVersion:
      (typeof mapping?.detail.mappingVersion === 'string' ? mapping.detail.mappingVersion : null) ??
      detail.order.mappingVersion,
    masked: !reveal,
    upstreamStatusText: upstreamStatusText(detail.order, detail.timeline),
    waiting: waitingOf(detail.order, upstreamStuckHours),
  };
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
  const { raw, response, ...rest } = message;
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

/** One side of an exchange for display: HL7 segment by segment, JSON, or a DICOM tag dump. */
function sideView(text: string, contentType: string, reveal: boolean): RawView {
  if (contentType.toLowerCase() === DICOM_TAG_DUMP) {
    const shown = reveal ? text : maskedText(text, contentType);
    try {
      const lines = JSON.parse(shown) as Array<{
        tag: string;
        keyword: string;
        vr: string;
        depth: number;
        value: string;
      }>;
      return {
        format: 'text',
        text: lines
          .map((l) => `${'  '.repeat(l.depth)}${l.tag} ${l.vr} ${l.keyword}: ${l.value}`)
          .join('\n'),
      };
    } catch {
      return { format: 'text', text: '(tag dump not readable)' };
    }
  }
  if (contentType.toLowerCase().includes('json')) {
    return rawView(Buffer.from(text, 'utf8'), contentType, reveal);
  }
  return hl7TextView(text, reveal);
}

/** Decodes raw bytes for display: HL7 by its own charset rules (MSH-18), JSON pretty-printed. */
export function rawView(bytes: Buffer, contentType: string | null, reveal: boolean): RawView {
  const type = (contentType ?? '').toLowerCase();
  if (type.includes('json')) {
    const text = bytes.toString('utf8');
    try {
      const parsed: unknown = JSON.parse(text);
      return { format: 'json', text: JSON.stringify(reveal ? parsed : maskJson(parsed), null, 2) };
    } catch {
      return { format: 'text', text: reveal ? text : '(not valid JSON; hidden while masked)' };
    }
  }
  let text: string;
  try {
    text = parseHl7(bytes).text;
  } catch {
    text = bytes.toString('latin1');
  }
  return hl7TextView(text, reveal);
}

/** HL7 text (already decoded) segment by segment with field positions and names, masked. */
function hl7TextView(text: string, reveal: boolean): RawView {
  if (!/^\uFEFF?MSH/.test(text.trimStart())) {
    return { format: 'text', text: reveal ? text : '(not an HL7 message; hidden while masked)' };
  }
  const shown = reveal ? text : maskHl7Text(text);
  const d = hl7Delimiters(shown);
  const segments = hl7Segments(shown).map((segment) => {
    const id = segment.slice(0, 3);
    return {
      id,
      fields: hl7Fields(segment, d.field).map(({ position, value }) => ({
        position: `${id}-${position}`,
        ...(HL7_FIELD_NAMES[`${id}-${position}`]
          ? { name: HL7_FIELD_NAMES[`${id}-${position}`] }
          : {}),
        value,
      })),
    };
  });
  return { format: 'hl7', separator: d.field, segments, text: hl7Segments(shown).join('\n') };
}

/** Names of the fields analysts look at most (HL7 v2.5.1 chapters 2, 3, 4; IHE RAD TF-2 for ZDS). */
export const HL7_FIELD_NAMES: Readonly<Record<string, string>> = {
  'MSH-1': 'Field Separator',
  'MSH-2': 'Encoding Characters',
  'MSH-3': 'Sending Application',
  'MSH-4': 'Sending Facility',
  'MSH-5': 'Receiving Application',
  'MSH-6': 'Receiving Facility',
  'MSH-7': 'Date/Time of Message',
  'MSH-9': 'Message Type',
  'MSH-10': 'Message Control ID',
  'MSH-11': 'Processing ID',
  'MSH-12': 'Version ID',
  'MSH-18': 'Character Set',
  'EVN-1': 'Event Type Code',
  'PID-2': 'Patient ID',
  'PID-3': 'Patient Identifier List',
  'PID-5': 'Patient Name',
  'PID-6': "Mother's Maiden Name",
  'PID-7': 'Date/Time of Birth',
  'PID-8': 'Administrative Sex',
  'PID-11': 'Patient Address',
  'PID-13': 'Phone Number - Home',
  'PID-14': 'Phone Number - Business',
  'PID-18': 'Patient Account Number',
  'PID-19': 'SSN Number - Patient',
  'PV1-2': 'Patient Class',
  'PV1-3': 'Assigned Patient Location',
  'PV1-8': 'Referring Doctor',
  'PV1-19': 'Visit Number',
  'MRG-1': 'Prior Patient Identifier List',
  'ORC-1': 'Order Control',
  'ORC-2': 'Placer Order Number',
  'ORC-3': 'Filler Order Number',
  'ORC-4': 'Placer Group Number',
  'ORC-5': 'Order Status',
  'ORC-7': 'Quantity/Timing',
  'ORC-9': 'Date/Time of Transaction',
  'ORC-10': 'Entered By',
  'ORC-12': 'Ordering Provider',
  'OBR-1': 'Set ID - OBR',
  'OBR-2': 'Placer Order Number',
  'OBR-3': 'Filler Order Number',
  'OBR-4': 'Universal Service Identifier',
  'OBR-6': 'Requested Date/Time',
  'OBR-13': 'Relevant Clinical Information',
  'OBR-16': 'Ordering Provider',
  'OBR-18': 'Placer Field 1 (accession, IHE RAD ORM)',
  'OBR-19': 'Placer Field 2 (requested procedure ID)',
  'OBR-20': 'Filler Field 1 (scheduled procedure step ID)',
  'OBR-24': 'Diagnostic Serv Sect ID (modality)',
  'OBR-25': 'Result Status',
  'OBR-27': 'Quantity/Timing',
  'OBR-31': 'Reason for Study',
  'OBR-44': 'Procedure Code',
  'TQ1-7': 'Start Date/Time',
  'TQ1-9': 'Priority',
  'IPC-1': 'Accession Identifier',
  'IPC-2': 'Requested Procedure ID',
  'IPC-3': 'Study Instance UID',
  'IPC-4': 'Scheduled Procedure Step ID',
  'IPC-5': 'Modality',
  'ZDS-1': 'Study Instance UID (IHE RAD ZDS)',
  'NTE-3': 'Comment',
  'MSA-1': 'Acknowledgment Code',
  'MSA-2': 'Message Control ID',
  'ERR-1': 'Error Code and Location',
  'ERR-2': 'Error Location',
  'ERR-3': 'HL7 Error Code',
  'ERR-4': 'Severity',
  'OBX-2': 'Value Type',
  'OBX-3': 'Observation Identifier',
  'OBX-5': 'Observation Value',
  'OBX-11': 'Observation Result Status',
};
