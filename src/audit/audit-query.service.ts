import type { DataSource } from 'typeorm';
import { AppError } from '../common/app-error';
import { storableKey } from '../common/hash';
import { pgText } from '../common/pg-safe';
import { ORDER_STATES, TERMINAL_ORDER_STATES } from '../domain/order-state';
import { composedIdentifier } from '../domain/identifier-form';
import { writeAuditEvents } from '../persistence/audit-event.repository';
import {
  AuditDashboardRepository,
  type DashboardData,
} from '../persistence/audit-dashboard.repository';
import {
  AuditQueryRepository,
  type DeadLetterCandidate,
  type DeadLetterFilter,
  type EventRow,
  type EventSearch,
  type MessageBrowse,
  type MessageRow,
  type MessageWithRaw,
  type OrderDetail,
  type OrderDocumentRow,
  type OrderRow,
  type OrderSearch,
  type OutboxRow,
  type Page,
} from '../persistence/audit-query.repository';

export type { DashboardCount, DashboardData } from '../persistence/audit-dashboard.repository';
// The repository's row and search types are this service's vocabulary: callers read them here.
export type * from '../persistence/audit-query.repository';
export {
  DEFAULT_PAGE_SIZE,
  MAX_CURSOR_LENGTH,
  MAX_PAGE_SIZE,
  OUTBOUND_ON_ORDER,
  TIMELINE_HEAD,
  TEXT_SCAN_ROWS,
  TIMELINE_LIMIT,
  UPSTREAM_FAILED_STATUSES,
} from '../persistence/audit-query.repository';

/**
 * The reading side of the audit log, plus the two writes an analyst or admin may cause
 * (dead-letter replay, PHI reveal). The SQL (index scans, keyset cursors) lives in
 * persistence/audit-query.repository.ts; this decides what is not found, refused or recorded.
 * Returns rows unmasked: masking is the presenter's job (audit-presenter.ts), decided per
 * request by role and reveal.
 */

export const ORDER_SOURCES = ['hl7v2', 'fhir', 'api'] as const;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: string): boolean {
  return UUID.test(value);
}

/** The filters that match a value the front doors stored from the input. */
const STORED_VALUE_FILTERS = [
  'upstreamOrderId',
  'accession',
  'patientId',
  'placer',
  'filler',
  'messageControlId',
  'studyInstanceUid',
  'sender',
  'destination',
] as const;

/** The filters naming an order's identifiers, held composed (NFC). */
const ORDER_IDENTIFIER_FILTERS = ['accession', 'patientId', 'placer', 'filler'] as const;

/**
 * Identifiers searched for as the front doors store them (stored-envelope.ts), so that they
 * match: each control character as U+FFFD (pgText; a BEL in MSH-10 or an ESC in an accession
 * was found by nothing, typed or pasted as the sender sent it), and an MSH-10 over 512
 * characters as its start and a SHA-256 of the whole (storableKey, to fit its index).
 */
function withStoredValues<T extends Partial<Record<(typeof STORED_VALUE_FILTERS)[number], string>>>(
  search: T,
): T {
  const out: T = { ...search };
  for (const key of STORED_VALUE_FILTERS) {
    const value = out[key];
    if (value !== undefined) (out as Record<string, string>)[key] = pgText(value);
  }
  // the order identifiers composed (NFC), as the intake holds them (domain/identifier-form.ts):
  // a value pasted from a tool that decomposes (`E` + U+0301) found nothing
  for (const key of ORDER_IDENTIFIER_FILTERS) {
    const value = out[key];
    if (value !== undefined) (out as Record<string, string>)[key] = composedIdentifier(value);
  }
  if (out.messageControlId !== undefined) out.messageControlId = storableKey(out.messageControlId);
  return out;
}

/**
 * Our order id as an analyst may paste it: the id of the ServiceRequest and the Task we serve
 * for the order, so also as the EHR shows them, a reference (`ServiceRequest/<id>`,
 * `Task/<id>`) or a URL with or without `/_history/<version>`. Anything else as it is.
 */
export function orderIdOf(value: string): string {
  const ref = /(?:^|\/)(?:ServiceRequest|Task)\/([0-9a-fA-F-]{36})(?:\/_history\/[^/]+)?\/?$/.exec(
    value,
  );
  return ref ? ref[1]! : value;
}

export class AuditQueryService {
  private readonly audit: AuditQueryRepository;
  private readonly dashboardReads: AuditDashboardRepository;

  /**
   * `deliverable`: the destinations this configuration delivers to, and what configures each
   * (a replay to another would wait for ever); without it, every replay is taken.
   */
  constructor(
    private readonly dataSource: DataSource,
    private readonly deliverable?: {
      destinations: readonly string[];
      settings: Readonly<Record<string, string>>;
    },
  ) {
    this.audit = new AuditQueryRepository(dataSource);
    this.dashboardReads = new AuditDashboardRepository(dataSource);
  }

  /**
   * The dashboard's figures for the last hour and day (orders per state, source and
   * destination, messages in and results out per minute, errors, dead letters, upstream
   * calls) and the oldest order waiting in each open state.
   */
  async dashboard(): Promise<DashboardData> {
    return this.dashboardReads.read(ORDER_STATES.filter((s) => !TERMINAL_ORDER_STATES.includes(s)));
  }

  /** The order list, newest first. Every filter given must match (AND). */
  async searchOrders(input: OrderSearch): Promise<Page<OrderRow>> {
    const search = withStoredValues(
      input.orderId === undefined ? input : { ...input, orderId: orderIdOf(input.orderId) },
    );
    if (search.orderId !== undefined && !isUuid(search.orderId)) return { items: [] };
    return this.audit.searchOrders(search);
  }

  /** Inbound messages by MSH-10 (FHIR: the idempotency identifier), including rejected ones. */
  async searchMessages(search: {
    messageControlId: string;
    limit?: number;
  }): Promise<Page<MessageRow>> {
    return this.audit.searchMessages(withStoredValues(search));
  }

  /** Every inbound message and request, accepted or refused, newest first (the browser). */
  async browseMessages(search: MessageBrowse): Promise<Page<MessageRow>> {
    if (search.from && search.to && search.from >= search.to) return { items: [] };
    return this.audit.browseMessages(withStoredValues(search));
  }

  /** Audit events, newest first: errors only (partial index), by destination, or by time range. */
  async searchEvents(input: EventSearch): Promise<Page<EventRow>> {
    const search =
      input.orderId === undefined ? input : { ...input, orderId: orderIdOf(input.orderId) };
    if (search.orderId !== undefined && !isUuid(search.orderId)) return { items: [] };
    return this.audit.searchEvents(search);
  }

  async orderDetail(orderId: string): Promise<OrderDetail> {
    if (!isUuid(orderId)) throw new AppError('not_found', 'no such order');
    const detail = await this.audit.orderDetail(orderId);
    if (!detail) throw new AppError('not_found', 'no such order');
    return detail;
  }

  /** One order's outbound documents, newest first, a page at a time (the order view shows the first). */
  async orderOutbound(
    orderId: string,
    search: { cursor?: string; limit?: number },
  ): Promise<Page<OutboxRow> & { total: number }> {
    if (!isUuid(orderId)) throw new AppError('not_found', 'no such order');
    const page = await this.audit.orderOutbound(orderId, search);
    if (page.total === 0 && !(await this.audit.orderExists(orderId))) {
      throw new AppError('not_found', 'no such order');
    }
    return page;
  }

  /** The upstream's reports stored for the order (results, failure, QC report). */
  async orderDocuments(orderId: string): Promise<OrderDocumentRow[]> {
    if (!isUuid(orderId)) throw new AppError('not_found', 'no such order');
    return this.audit.orderDocuments(orderId);
  }

  async orderDocument(orderId: string, id: string): Promise<OrderDocumentRow & { body: Buffer }> {
    if (!isUuid(orderId) || !/^\d{1,18}$/.test(id)) {
      throw new AppError('not_found', 'no such document');
    }
    const doc = await this.audit.orderDocument(orderId, id);
    if (!doc) throw new AppError('not_found', 'no such document');
    return doc;
  }

  async message(id: string): Promise<{ message: MessageWithRaw; events: EventRow[] }> {
    if (!isUuid(id)) throw new AppError('not_found', 'no such message');
    const found = await this.audit.message(id);
    if (!found) throw new AppError('not_found', 'no such message');
    return found;
  }

  /** The accepted message stored under an idempotency key, if any (a reprocess's result). */
  async acceptedByIdempotencyKey(key: string): Promise<MessageRow | undefined> {
    return this.audit.acceptedByIdempotencyKey(key);
  }

  /** Records an admin's reprocess of an inbound message (who, why, what came of it). */
  async recordReprocess(input: {
    actor: string;
    reason: string;
    originalId: string;
    reprocessedId: string | null;
    answerCode: string;
    duplicate: boolean;
    orderIds: string[];
  }): Promise<void> {
    const detail = {
      reason: input.reason,
      originalMessageId: input.originalId,
      reprocessedMessageId: input.reprocessedId,
      answerCode: input.answerCode,
      duplicate: input.duplicate,
      orderIds: input.orderIds,
    };
    const summary = `inbound message ${input.originalId} reprocessed${input.duplicate ? ' again (the first result answered, nothing created)' : ''}: ${input.answerCode}: ${input.reason}`;
    await this.dataSource.transaction(async (manager) => {
      await writeAuditEvents(manager, [
        {
          kind: 'message.reprocessed',
          inboundMessageId: input.originalId,
          actor: input.actor,
          summary,
          detail,
        },
        ...(input.reprocessedId && input.reprocessedId !== input.originalId && !input.duplicate
          ? [
              {
                kind: 'message.reprocessed' as const,
                inboundMessageId: input.reprocessedId,
                orderId: input.orderIds[0] ?? null,
                actor: input.actor,
                summary: `reprocess of inbound message ${input.originalId}: ${input.reason}`,
                detail,
              },
            ]
          : []),
      ]);
    });
  }

  /** Dead letters, most recently given up first (outbox_dead_idx). */
  async deadLetters(search: { cursor?: string; limit?: number }): Promise<Page<OutboxRow>> {
    return this.audit.deadLetters(search);
  }

  async outboxEntry(id: string): Promise<OutboxRow> {
    if (!/^\d{1,18}$/.test(id)) throw new AppError('not_found', 'no such outbound document');
    const row = await this.audit.outboxEntry(id);
    if (!row) throw new AppError('not_found', 'no such outbound document');
    return row;
  }

  /**
   * Puts a dead letter back in the queue (attempts reset, due now) and records who and why,
   * in one transaction. The outbox workers pick it up like any pending row.
   */
  async replayDeadLetter(
    id: string,
    actor: string,
    reason: string,
    /** A bulk replay's filter, recorded with each letter it replayed. */
    bulk?: Record<string, unknown>,
  ): Promise<{ outbox: OutboxRow; auditEventKind: 'outbound.replay' }> {
    if (!/^\d{1,18}$/.test(id)) throw new AppError('not_found', 'no such outbound document');
    const text = reason.trim();
    if (text.length < 3) throw new AppError('bad_request', 'a reason is required to replay');
    return this.dataSource.transaction(async (manager) => {
      const before = await this.audit.lockForReplay(id, manager);
      if (!before) throw new AppError('not_found', 'no such outbound document');
      if (before.status !== 'dead') {
        throw new AppError('conflict', `the outbound document is ${before.status}, not dead`);
      }
      this.refuseUndeliverable(before.destination);
      const outbox = await this.audit.requeue(id, manager);
      await writeAuditEvents(manager, [
        {
          kind: 'outbound.replay',
          orderId: outbox.orderId,
          actor,
          summary: `dead letter ${outbox.kind} to ${outbox.destination} replayed: ${text}`,
          detail: {
            outboxId: outbox.id,
            destination: outbox.destination,
            documentKind: outbox.kind,
            reason: text,
            previousAttempts: before.attempts,
            lastError: before.last_error,
            ...(bulk ? { bulk } : {}),
          },
        },
      ]);
      return { outbox, auditEventKind: 'outbound.replay' as const };
    });
  }

  /**
   * 409 for a destination this configuration does not deliver to (its settings removed since
   * the row died): it has no worker, and the row would be pending for ever while the replay
   * said it was on its way.
   */
  refuseUndeliverable(destination: string): void {
    if (this.deliverable && !this.deliverable.destinations.includes(destination)) {
      const needs = Object.hasOwn(this.deliverable.settings, destination)
        ? this.deliverable.settings[destination]
        : undefined;
      throw new AppError(
        'conflict',
        `the outbound document's destination ${destination} is not configured` +
          `${needs ? ` (${needs})` : ''}: nothing would deliver it; configure it, then replay`,
      );
    }
  }

  /**
   * The dead letters a bulk replay takes: how many match, and the first `limit` of them,
   * longest dead first (outbox_dead_idx).
   */
  async deadLettersMatching(
    filter: DeadLetterFilter,
    limit: number,
  ): Promise<{ matched: number; letters: DeadLetterCandidate[] }> {
    return this.audit.deadLettersMatching(filter, limit);
  }

  /** Records that an admin saw unmasked PHI, before it is shown (no record, no reveal). */
  async recordReveal(input: {
    actor: string;
    reason: string;
    orderId?: string | null;
    inboundMessageId?: string | null;
    what: string;
  }): Promise<void> {
    const text = input.reason.trim();
    if (text.length < 3) {
      throw new AppError('bad_request', 'a reason is required to reveal unmasked PHI');
    }
    await this.dataSource.transaction((manager) =>
      writeAuditEvents(manager, [
        {
          kind: 'phi.reveal',
          severity: 'warning',
          orderId: input.orderId ?? null,
          inboundMessageId: input.inboundMessageId ?? null,
          actor: input.actor,
          summary: `unmasked PHI shown (${input.what}): ${text}`,
          detail: { what: input.what, reason: text },
        },
      ]),
    );
  }
}
