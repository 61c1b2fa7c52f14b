import type { EntityManager } from 'typeorm';
import {
  continuedAt,
  type CursorSigner,
  decodeCursor,
  encodeCursor,
  keysetPageSql,
  type LateCheckColumns,
  type Page,
  pageSize,
  type ScanEnd,
  scanEndSql,
  SearchWhere,
  TRANSACTION_HORIZON_SQL,
  toPage,
} from './audit-query.paging';
import {
  type DeadLetterLock,
  DOCUMENT_COLUMNS,
  EVENT_COLUMNS,
  type EventRow,
  MESSAGE_COLUMNS,
  type MessageRow,
  type MessageWithRaw,
  ORDER_COLUMNS,
  type OrderDetail,
  type OrderDocumentRow,
  type OrderRow,
  OUTBOX_COLUMNS,
  type OutboxRow,
  toDocumentRow,
  toEventRow,
  toMessageRow,
  toOrderRow,
  toOutboxRow,
} from './audit-query.rows';
import { RepositoryBase } from './repository-base';

export {
  DEFAULT_PAGE_SIZE,
  MAX_CURSOR_LENGTH,
  MAX_PAGE_SIZE,
  type Page,
} from './audit-query.paging';
export type {
  DeadLetterLock,
  EventRow,
  MessageRow,
  MessageWithRaw,
  OrderDetail,
  OrderDocumentRow,
  OrderRow,
  OutboxRow,
} from './audit-query.rows';

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
  /** MSH-10 (FHIR: the idempotency identifier), exact: inbound_messages_control_id_idx. */
  messageControlId?: string;
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

/** Which dead letters a bulk replay takes (every filter given must match). */
export interface DeadLetterFilter {
  destination?: string;
  /** Text in the reason it was given up for (`last_error`), case-insensitive. */
  error?: string;
  /** Given up at or after / before (updated_at). */
  from?: Date;
  to?: Date;
}

/** A dead letter a bulk replay would take. */
export interface DeadLetterCandidate {
  id: string;
  orderId: string | null;
  destination: string;
  kind: string;
  updatedAt: string;
  lastError: string | null;
}

/** Upstream statuses after which no result comes: errors in "errors only". */
export const UPSTREAM_FAILED_STATUSES = ['FAILED', 'PREPROCESSING_FAILED', 'EXPIRED'] as const;
const UPSTREAM_FAILED_SQL = UPSTREAM_FAILED_STATUSES.map((s) => `'${s}'`).join(', ');

/**
 * A timeline longer than this is cut in the middle: its first TIMELINE_HEAD events (intake,
 * mapping), its newest TIMELINE_LIMIT - TIMELINE_HEAD (where the order is now), and between
 * them every event that is not of a kind that repeats (TIMELINE_REPEATED_KINDS: a resent
 * order, a poll, a retry), so that a dead letter or a transition is never the part left out.
 * `timelineOmitted` says how many are not shown, and `timelineOlderCursor` pages them (GET
 * /api/audit/events?orderId=…, newest first, from below the newest shown). Real orders have tens
 * of events; a sender resending an order every minute, or 2,000 corrections and replays, leave
 * thousands: at 2,000 kept (and as many milestones between), one order's view was 1.3 MB.
 */
export const TIMELINE_LIMIT = 500;
/**
 * The most messages one page of the message browser reads for a `text` (no index serves it):
 * at most tens of milliseconds, where a word no message holds read every message ever stored
 * (200,000 messages: 0.3 s, 1.3 s for non-ASCII words, on a pooled connection ingest shares).
 */
export const TEXT_SCAN_ROWS = 10_000;
export const TIMELINE_HEAD = 100;
/** The events one inbound message's view holds (a message has a few: received, quirks, reprocessed). */
const MESSAGE_EVENTS_LIMIT = 2000;
/**
 * The outbound documents an order's view holds, newest first; the older ones are paged
 * (orderOutbound). Before, every one was read and answered: an order with 2,000 (corrections,
 * replays) made a 54 MB API answer (6.9 s) and a 90 MB page (10 s).
 */
export const OUTBOUND_ON_ORDER = 20;
const TIMELINE_REPEATED_KINDS = [
  'inbound.received',
  'inbound.duplicate',
  'inbound.quirks',
  'order.duplicate',
  'order.status-recorded',
  'upstream.call',
  'outbound.attempt',
  'study.received',
];

/** The expression orders_patient_identifiers_idx indexes (migration 20261127220000), as written there. */
const PATIENT_IDENTIFIER_VALUES = `jsonb_path_query_array(u.request, '$.patient.identifiers[*].value')`;

/** A LIKE pattern matching `text` anywhere, its `%`, `_` and `\` taken as text. */
function containing(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/** `text` (UTF-8) as PostgreSQL's encode(bytes, 'escape') writes it. */
function byteaEscaped(text: string): string {
  let out = '';
  for (const b of Buffer.from(text, 'utf8')) {
    if (b === 0x5c) out += '\\\\';
    else if (b === 0 || b > 0x7f) out += `\\${b.toString(8).padStart(3, '0')}`;
    else out += String.fromCharCode(b);
  }
  return out;
}

export class AuditQueryRepository extends RepositoryBase {
  /** The order list, newest first. Every filter given must match (AND); `orderId` is a UUID. */
  async searchOrders(search: OrderSearch): Promise<Page<OrderRow>> {
    const where = new SearchWhere();
    const p = (value: unknown) => where.param(value);
    if (search.orderId !== undefined) where.add(`o.id = ${p(search.orderId)}::uuid`);
    if (search.upstreamOrderId) where.add(`o.upstream_order_id = ${p(search.upstreamOrderId)}`);
    if (search.accession) where.add(`o.accession_number = ${p(search.accession)}`);
    if (search.patientId) {
      // Any identifier of the order's patient (every PID-3 repetition, every
      // Patient.identifier): orders_patient_identifiers_idx (GIN); patient_id, the one record
      // number the order is keyed by, through its btree as before. As a UNION of the two index
      // scans: written as one OR, the planner has no estimate for the jsonb containment (1 %
      // of the table) and for one key in fifty walked orders_created_idx backward through the
      // whole table to fill the page (80-170 ms, bench/audit-search).
      const id = p(search.patientId);
      where.add(`o.id IN (SELECT u.id FROM orders u WHERE u.patient_id = ${id}
                          UNION ALL
                          SELECT u.id FROM orders u WHERE ${PATIENT_IDENTIFIER_VALUES} @> jsonb_build_array(${id}::text))`);
    }
    if (search.placer) where.add(`o.placer_order_number = ${p(search.placer)}`);
    if (search.filler) where.add(`o.filler_order_number = ${p(search.filler)}`);
    if (search.studyInstanceUid) {
      // The order's own UID, or the study it got when it named none (found by its accession
      // number): study_acquisitions keeps that UID after the instances are released.
      const uid = p(search.studyInstanceUid);
      where.add(`o.id IN (SELECT u.id FROM orders u WHERE u.study_instance_uid = ${uid}
                          UNION ALL
                          SELECT a.order_id FROM study_acquisitions a WHERE a.study_instance_uid = ${uid})`);
    }
    if (search.state) where.add(`o.state = ${p(search.state)}`);
    if (search.source) where.add(`o.source = ${p(search.source)}`);
    if (search.sender) where.add(`o.sender = ${p(search.sender)}`);
    if (search.messageControlId) {
      // MSH-10 → inbound_messages (control id index) → their events (message index) → orders.
      // Covers the message that created the order and later ones (cancel, change, demographics).
      where.add(`o.id IN (
        SELECT e.order_id FROM audit_events e
         WHERE e.inbound_message_id IN (SELECT m.id FROM inbound_messages m WHERE m.message_control_id = ${p(search.messageControlId)})
           AND e.order_id IS NOT NULL)`);
    }
    if (search.destination) {
      where.add(
        `o.id IN (SELECT x.order_id FROM outbox x WHERE x.destination = ${p(search.destination)} AND x.order_id IS NOT NULL)`,
      );
    }
    if (search.errorsOnly) {
      // error events, or an upstream order that failed (no result is coming)
      where.add(
        `o.id IN (SELECT e.order_id FROM audit_events e WHERE e.severity = 'error' AND e.order_id IS NOT NULL
                  UNION ALL
                  SELECT f.id FROM orders f WHERE f.upstream_status IN (${UPSTREAM_FAILED_SQL}))`,
      );
    }
    if (search.from) where.add(`o.created_at >= ${p(search.from)}`);
    if (search.to) where.add(`o.created_at < ${p(search.to)}`);
    const signer = await this.cursorSigner('orders');
    const cursor = decodeCursor(search.cursor, 'uuid', signer);
    const limit = pageSize(search.limit);
    const horizonUs = await this.transactionHorizon();
    const sql = keysetPageSql(
      where,
      cursor,
      {
        columns: ORDER_COLUMNS,
        from: 'orders o',
        timeColumn: 'o.created_at',
        idColumn: 'o.id',
        idType: 'uuid',
        enteredColumn: 'o.created_at',
        xidColumn: 'o.created_xid',
      },
      limit,
    );
    const rows: Array<OrderRow & { cursorUs: string } & LateCheckColumns> = await this.db().query(
      sql,
      where.params,
    );
    return toPage(
      rows,
      limit,
      (r) => ({ us: r.cursorUs, id: r.id }),
      toOrderRow,
      signer,
      horizonUs,
    );
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
   * looks in our answer (ACK text, OperationOutcome) and the recorded problems. No index serves
   * `text`: a page reads at most TEXT_SCAN_ROWS messages of the other filters for it, and one
   * that stops there before it fills says how far it read (`searchedTo`) and goes on from there.
   */
  async browseMessages(search: MessageBrowse): Promise<Page<MessageRow>> {
    const indexed = (where: SearchWhere): SearchWhere => {
      const p = (value: unknown) => where.param(value);
      if (search.messageControlId) {
        where.add(`m.message_control_id = ${p(search.messageControlId)}`);
      }
      if (search.from) where.add(`m.received_at >= ${p(search.from)}`);
      if (search.to) where.add(`m.received_at < ${p(search.to)}`);
      if (search.sender) where.add(`m.sender = ${p(search.sender)}`);
      if (search.transport) where.add(`m.transport = ${p(search.transport)}`);
      if (search.answerCode) where.add(`m.response_code = ${p(search.answerCode)}`);
      if (search.outcome === 'refused') where.add(`m.outcome IN ('rejected', 'error')`);
      else if (search.outcome) where.add(`m.outcome = ${p(search.outcome)}`);
      return where;
    };
    const where = indexed(new SearchWhere());
    if (search.text) {
      // Each column is searched in its own spelling of the words: jsonb's text escapes `"` and
      // `\` as JSON does, and encode(…, 'escape') doubles `\` and writes bytes over 0x7F as
      // octal. Before, the words the page shows (`gender: "männlich"`) found nothing.
      const inJson = where.param(containing(JSON.stringify(search.text).slice(1, -1)));
      const inBytes = where.param(containing(byteaEscaped(search.text)));
      const like = where.param(containing(search.text));
      where.add(
        `(m.error::text ILIKE ${inJson} OR encode(m.response, 'escape') ILIKE ${inBytes} OR m.message_type ILIKE ${like})`,
      );
    }
    const signer = await this.cursorSigner('messages');
    const cursor = decodeCursor(search.cursor, 'uuid', signer);
    const limit = pageSize(search.limit);
    const list = {
      columns: `${MESSAGE_COLUMNS}, (extract(epoch FROM m.received_at) * 1000000)::bigint::text AS "cursorUs"`,
      from: 'inbound_messages m',
      timeColumn: 'm.received_at',
      idColumn: 'm.id',
      idType: 'uuid',
      enteredColumn: 'm.received_at',
      xidColumn: 'm.created_xid',
    };
    const horizonUs = await this.transactionHorizon();
    let end: ScanEnd | undefined;
    if (search.text) {
      const scan = indexed(new SearchWhere());
      const ends: ScanEnd[] = await this.db().query(
        scanEndSql(scan, cursor, list, TEXT_SCAN_ROWS),
        scan.params,
      );
      end = ends[0];
    }
    const sql = keysetPageSql(where, cursor, list, limit, end);
    const rows: Array<MessageRow & { cursorUs: string } & LateCheckColumns> = await this.db().query(
      sql,
      where.params,
    );
    const page = toPage(
      rows,
      limit,
      (r) => ({ us: r.cursorUs, id: r.id }),
      toMessageRow,
      signer,
      horizonUs,
    );
    return continuedAt(page, end, horizonUs, rows[0]?.snapshot, signer);
  }

  /**
   * Audit events, newest first: errors only (partial index), by destination, or by time range;
   * `orderId` is a UUID.
   */
  async searchEvents(search: EventSearch): Promise<Page<EventRow>> {
    const where = new SearchWhere();
    const p = (value: unknown) => where.param(value);
    if (search.orderId !== undefined) where.add(`e.order_id = ${p(search.orderId)}::uuid`);
    if (search.errorsOnly) where.add(`e.severity = 'error'`);
    if (search.destination) {
      where.add(`e.detail ? 'destination' AND e.detail->>'destination' = ${p(search.destination)}`);
    }
    if (search.from) where.add(`e.occurred_at >= ${p(search.from)}`);
    if (search.to) where.add(`e.occurred_at < ${p(search.to)}`);
    const signer = await this.cursorSigner('events');
    const cursor = decodeCursor(search.cursor, 'bigint', signer);
    const limit = pageSize(search.limit);
    const horizonUs = await this.transactionHorizon();
    const sql = keysetPageSql(
      where,
      cursor,
      {
        columns: EVENT_COLUMNS,
        from: 'audit_events e',
        idColumn: 'e.id',
        idType: 'bigint',
        enteredColumn: 'e.occurred_at',
        xidColumn: 'e.created_xid',
        lateThroughEntered: true,
        ownThroughEntered: await this.fewerEventsInRangeThanAfter(search.from, search.to),
      },
      limit,
    );
    const rows: Array<EventRow & LateCheckColumns> = await this.db().query(sql, where.params);
    return toPage(rows, limit, (r) => ({ us: '0', id: r.id }), toEventRow, signer, horizonUs);
  }

  /**
   * Whether fewer events occurred in [from, to) than after `to`, by the planner's estimates
   * from the occurred_at statistics (planning only, no rows read). Events sort by id alone;
   * the planner, which does not know that ids grow with occurred_at, walks the id index down
   * from the newest event for a time range, reading every event after it (3,000,000 events, a
   * day two months back: 0.35 s). When the range holds fewer, it is read through the
   * occurred_at BRIN and sorted instead (11 ms). Without `to` the newest match comes first.
   */
  private async fewerEventsInRangeThanAfter(from?: Date, to?: Date): Promise<boolean> {
    if (!to) return false;
    const estimate = async (condition: string, params: Date[]): Promise<number> => {
      const rows: Array<{ 'QUERY PLAN': Array<{ Plan: { 'Plan Rows': number } }> }> =
        await this.db().query(
          `EXPLAIN (FORMAT JSON) SELECT 1 FROM audit_events e WHERE ${condition}`,
          params,
        );
      return rows[0]!['QUERY PLAN'][0]!.Plan['Plan Rows'];
    };
    const [inRange, after] = await Promise.all([
      from
        ? estimate(`e.occurred_at >= $1 AND e.occurred_at < $2`, [from, to])
        : estimate(`e.occurred_at < $1`, [to]),
      estimate(`e.occurred_at >= $1`, [to]),
    ]);
    return inRange < after;
  }

  /** The order (by UUID) with its timeline, messages and outbound documents; undefined if none. */
  async orderDetail(orderId: string): Promise<OrderDetail | undefined> {
    // Three independent reads in parallel (one round trip of latency), then the messages.
    const [orders, timeline, outbound] = await Promise.all([
      this.db().query(`SELECT ${ORDER_COLUMNS}, o.request FROM orders o WHERE o.id = $1::uuid`, [
        orderId,
      ]) as Promise<Array<OrderRow & { request: Record<string, unknown> }>>,
      this.timeline(orderId, { limit: TIMELINE_LIMIT + 1 }),
      this.orderOutbound(orderId, { limit: OUTBOUND_ON_ORDER }),
    ]);
    const order = orders[0];
    if (!order) return undefined;
    let timelineOmitted = 0;
    let timelineOlderCursor: string | undefined;
    if (timeline.length > TIMELINE_LIMIT) {
      // Too long: keep the head, read the newest events, the milestones between and the total.
      const head = timeline.slice(0, TIMELINE_HEAD);
      const [tail, total] = await Promise.all([
        this.timeline(orderId, { newestFirst: true, limit: TIMELINE_LIMIT - TIMELINE_HEAD }),
        this.timelineCount(orderId),
      ]);
      tail.reverse();
      const middle = await this.timeline(orderId, {
        limit: TIMELINE_LIMIT,
        between: [head[head.length - 1]!.id, tail[0]!.id],
        milestonesOnly: true,
      });
      timeline.splice(0, timeline.length, ...head, ...middle, ...tail);
      timelineOmitted = total - timeline.length;
      // the events list's own cursor, below the oldest of the newest shown
      timelineOlderCursor = encodeCursor(
        { us: '0', id: tail[0]!.id },
        await this.cursorSigner('events'),
      );
    }
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
      timelineOmitted,
      ...(timelineOlderCursor ? { timelineOlderCursor } : {}),
      messages: messages.map(toMessageRow),
      outbound: outbound.items,
      outboundTotal: outbound.total,
      ...(outbound.nextCursor ? { outboundNextCursor: outbound.nextCursor } : {}),
    };
  }

  /**
   * One order's outbound documents, newest first (by id, through outbox_order_id_idx), a page
   * at a time; the cursor is signed for this order's list alone. `total`: how many it has.
   */
  async orderOutbound(
    orderId: string,
    search: { cursor?: string; limit?: number },
  ): Promise<Page<OutboxRow> & { total: number }> {
    const signer = await this.cursorSigner(`order-outbound:${orderId}`);
    const cursor = decodeCursor(search.cursor, 'bigint', signer);
    const limit = pageSize(search.limit);
    const where = new SearchWhere();
    where.add(`x.order_id = ${where.param(orderId)}::uuid`);
    const sql = keysetPageSql(
      where,
      cursor,
      {
        columns: OUTBOX_COLUMNS,
        from: 'outbox x',
        idColumn: 'x.id',
        idType: 'bigint',
        enteredColumn: 'x.created_at',
        xidColumn: 'NULL',
      },
      limit,
    );
    const [rows, counted] = await Promise.all([
      this.db().query(sql, where.params) as Promise<Array<OutboxRow & LateCheckColumns>>,
      this.db().query(`SELECT count(*)::int AS n FROM outbox WHERE order_id = $1::uuid`, [
        orderId,
      ]) as Promise<Array<{ n: number }>>,
    ]);
    return {
      ...toPage(rows, limit, (r) => ({ us: '0', id: r.id }), toOutboxRow, signer),
      total: counted[0]?.n ?? 0,
    };
  }

  /**
   * The order's own events and the message-level events (received, quirks, rejected) of every
   * inbound message that touched it, both through (…, id) indexes; oldest first unless
   * `newestFirst`, only those with ids strictly `between` two, only those of kinds that do not
   * repeat (`milestonesOnly`).
   */
  private async timeline(
    orderId: string,
    options: {
      limit: number;
      newestFirst?: boolean;
      between?: [string, string];
      milestonesOnly?: boolean;
    },
  ): Promise<EventRow[]> {
    const { sql, params } = this.timelineEvents(orderId, options);
    return this.db().query(
      `${sql} ORDER BY seq ${options.newestFirst ? 'DESC' : 'ASC'} LIMIT ${options.limit}`,
      params,
    );
  }

  private async timelineCount(orderId: string): Promise<number> {
    const { sql, params } = this.timelineEvents(orderId, {});
    const rows: Array<{ count: string }> = await this.db().query(
      `SELECT count(*)::text AS count FROM (${sql}) c`,
      params,
    );
    return Number(rows[0]?.count ?? 0);
  }

  private timelineEvents(
    orderId: string,
    options: { between?: [string, string]; milestonesOnly?: boolean },
  ): { sql: string; params: unknown[] } {
    const params: unknown[] = [orderId];
    const where: string[] = [];
    if (options.between) {
      params.push(options.between[0], options.between[1]);
      where.push(`seq > $2::bigint AND seq < $3::bigint`);
    }
    if (options.milestonesOnly) {
      params.push(TIMELINE_REPEATED_KINDS);
      where.push(`kind <> ALL($${params.length}::text[])`);
    }
    return {
      sql: `WITH msgs AS (
         SELECT DISTINCT e.inbound_message_id AS id FROM audit_events e
          WHERE e.order_id = $1::uuid AND e.inbound_message_id IS NOT NULL
         UNION SELECT inbound_message_id FROM orders WHERE id = $1::uuid AND inbound_message_id IS NOT NULL
       )
       SELECT * FROM (
         SELECT ${EVENT_COLUMNS}, e.id AS seq FROM audit_events e WHERE e.order_id = $1::uuid
         UNION ALL
         SELECT ${EVENT_COLUMNS}, e.id AS seq FROM audit_events e
          WHERE e.inbound_message_id IN (SELECT id FROM msgs) AND e.order_id IS NULL
       ) t ${where.length ? `WHERE ${where.join(' AND ')}` : ''}`,
      params,
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
    const rows: Array<
      MessageRow & { raw: Buffer; response: Buffer | null; if_none_exist: string | null }
    > = await this.db().query(
      `SELECT ${MESSAGE_COLUMNS}, m.raw, m.response, m.if_none_exist FROM inbound_messages m WHERE m.id = $1::uuid`,
      [id],
    );
    const row = rows[0];
    if (!row) return undefined;
    const events: EventRow[] = await this.db().query(
      `SELECT ${EVENT_COLUMNS} FROM audit_events e WHERE e.inbound_message_id = $1::uuid ORDER BY e.id LIMIT ${MESSAGE_EVENTS_LIMIT}`,
      [id],
    );
    return {
      message: {
        ...toMessageRow(row),
        raw: row.raw,
        response: row.response,
        ifNoneExist: row.if_none_exist,
      },
      events: events.map(toEventRow),
    };
  }

  /** The database's cursor key (audit_cursor_key), read once per process. */
  private cursorKey?: Promise<Buffer>;

  /** How `list` signs the cursors it hands out and checks the ones it takes. */
  private async cursorSigner(list: CursorSigner['list']): Promise<CursorSigner> {
    this.cursorKey ??= (
      this.db().query(`SELECT key FROM audit_cursor_key WHERE id = 1`) as Promise<
        Array<{ key: Buffer }>
      >
    ).then((rows) => {
      if (!rows[0]) throw new Error('audit_cursor_key holds no key (migration 20261128075000)');
      return rows[0].key;
    });
    try {
      return { list, key: await this.cursorKey };
    } catch (error) {
      this.cursorKey = undefined; // read again next time (a lost connection)
      throw error;
    }
  }

  /** TRANSACTION_HORIZON_SQL: read before a page of a list that re-checks late commits. */
  private async transactionHorizon(): Promise<string> {
    const rows: Array<{ us: string }> = await this.db().query(TRANSACTION_HORIZON_SQL);
    return rows[0]!.us;
  }

  /**
   * Dead letters, most recently given up first (outbox_dead_idx), with the late commits of
   * the transactions that gave rows up after the page before was read (dead_xid).
   */
  async deadLetters(search: { cursor?: string; limit?: number }): Promise<Page<OutboxRow>> {
    const where = new SearchWhere();
    where.add(`x.status = 'dead'`);
    const signer = await this.cursorSigner('dead-letters');
    const cursor = decodeCursor(search.cursor, 'bigint', signer);
    const limit = pageSize(search.limit);
    const horizonUs = await this.transactionHorizon();
    const sql = keysetPageSql(
      where,
      cursor,
      {
        columns: `${OUTBOX_COLUMNS}, o.accession_number AS "accessionNumber", o.placer_order_number AS "placerOrderNumber"`,
        from: 'outbox x LEFT JOIN orders o ON o.id = x.order_id',
        timeColumn: 'x.updated_at',
        idColumn: 'x.id',
        idType: 'bigint',
        enteredColumn: 'x.updated_at',
        xidColumn: 'x.dead_xid',
      },
      limit,
    );
    const rows: Array<OutboxRow & { cursorUs: string } & LateCheckColumns> = await this.db().query(
      sql,
      where.params,
    );
    return toPage(
      rows,
      limit,
      (r) => ({ us: r.cursorUs, id: r.id }),
      toOutboxRow,
      signer,
      horizonUs,
    );
  }

  async orderExists(orderId: string): Promise<boolean> {
    const rows: unknown[] = await this.db().query(`SELECT 1 FROM orders WHERE id = $1::uuid`, [
      orderId,
    ]);
    return rows.length > 0;
  }

  /** The upstream's reports stored for an order (results, failure, QC), without their bodies. */
  async orderDocuments(orderId: string): Promise<OrderDocumentRow[]> {
    const rows: OrderDocumentRow[] = await this.db().query(
      `SELECT ${DOCUMENT_COLUMNS}
         FROM order_documents d WHERE d.order_id = $1::uuid ORDER BY d.id`,
      [orderId],
    );
    return rows.map(toDocumentRow);
  }

  /** One stored report with its body, if it belongs to the order. */
  async orderDocument(
    orderId: string,
    id: string,
  ): Promise<(OrderDocumentRow & { body: Buffer }) | undefined> {
    const rows: Array<OrderDocumentRow & { body: Buffer }> = await this.db().query(
      `SELECT ${DOCUMENT_COLUMNS}, d.body
         FROM order_documents d WHERE d.order_id = $1::uuid AND d.id = $2::bigint`,
      [orderId, id],
    );
    const r = rows[0];
    return r ? toDocumentRow(r) : undefined;
  }

  /** An outbox row by its (numeric) id; undefined if none. */
  async outboxEntry(id: string): Promise<OutboxRow | undefined> {
    const rows: OutboxRow[] = await this.db().query(
      `SELECT ${OUTBOX_COLUMNS} FROM outbox x WHERE x.id = $1::bigint`,
      [id],
    );
    return rows[0] ? toOutboxRow(rows[0]) : undefined;
  }

  /**
   * The dead letters matching `filter`: how many, and the `limit` longest dead (given up
   * first), through outbox_dead_idx (partial on status = 'dead': only dead rows are read).
   */
  async deadLettersMatching(
    filter: DeadLetterFilter,
    limit: number,
  ): Promise<{ matched: number; letters: DeadLetterCandidate[] }> {
    const where = new SearchWhere();
    where.add(`x.status = 'dead'`);
    if (filter.destination) where.add(`x.destination = ${where.param(filter.destination)}`);
    if (filter.error) where.add(`x.last_error ILIKE ${where.param(containing(filter.error))}`);
    if (filter.from) where.add(`x.updated_at >= ${where.param(filter.from)}`);
    if (filter.to) where.add(`x.updated_at < ${where.param(filter.to)}`);
    const [counted, letters] = await Promise.all([
      this.db().query(
        `SELECT count(*)::int AS n FROM outbox x ${where.sql()}`,
        where.params,
      ) as Promise<Array<{ n: number }>>,
      this.db().query(
        `SELECT x.id::text AS id, x.order_id AS "orderId", x.destination, x.kind,
                x.updated_at AS "updatedAt", x.last_error AS "lastError"
           FROM outbox x ${where.sql()} ORDER BY x.updated_at, x.id LIMIT ${Math.max(1, Math.floor(limit))}`,
        where.params,
      ) as Promise<DeadLetterCandidate[]>,
    ]);
    return {
      matched: counted[0]?.n ?? 0,
      letters: letters.map((l) => ({
        ...l,
        updatedAt: new Date(l.updatedAt).toISOString(),
      })),
    };
  }

  /** Locks an outbox row for a replay (FOR UPDATE on the caller's transaction). */
  async lockForReplay(id: string, manager: EntityManager): Promise<DeadLetterLock | undefined> {
    const before: DeadLetterLock[] = await manager.query(
      `SELECT status, destination, attempts, last_error FROM outbox WHERE id = $1::bigint FOR UPDATE`,
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
