import type { Logger } from 'pino';
import type { DataSource, EntityManager } from 'typeorm';
import { type AuditEventInput, writeAuditEvents } from '../persistence/audit-event.repository';
import type { AlertCoalescingRepository } from '../persistence/alert-coalescing.repository';
import type { DestinationHealthRepository } from '../persistence/destination-health.repository';
import type { OutboxRepository } from '../persistence/outbox.repository';
import { alertDeadLetter } from './dead-letter-alert';
import { failureReason } from './failure-reason';
import { outboundAttemptsTotal, outboundDeliverySeconds } from './outbound.metrics';
import { backoffMs, DESTINATIONS, type OutboundSettings } from './outbound.settings';
import type { ClaimedRow } from './outbox-attempt';
import type { DeliveryResult } from './publisher';

export interface RecordDeps {
  dataSource: DataSource;
  outbox: OutboxRepository;
  /** The destination's run of failures, last success and failure (/health, /metrics). */
  destinationHealth: DestinationHealthRepository;
  /** Dead-letter alerts grouped per destination and reason (ALERT_COALESCE_SECONDS). */
  alertCoalescing: AlertCoalescingRepository;
  settings: OutboundSettings;
  logger: Logger;
}

/** What an attempt leads to: the row's next status, why, and when it is tried again. */
export interface Decision {
  outcome: DeliveryResult['outcome'];
  reason: string;
  /** Milliseconds until the retry (0 unless `outcome` is retry). */
  delay: number;
}

/**
 * A retry past `maxAttempts` is a dead letter; a retry waits the backoff of its attempt, or
 * what the peer asked for (Retry-After) when longer, up to the backoff's ceiling.
 */
export function decideAttempt(
  settings: Pick<OutboundSettings, 'maxAttempts' | 'backoffBaseMs' | 'backoffMaxMs'>,
  row: Pick<ClaimedRow, 'attempts'>,
  result: DeliveryResult,
): Decision {
  let outcome = result.outcome;
  let reason = result.answer;
  if (outcome === 'retry' && row.attempts >= settings.maxAttempts) {
    outcome = 'dead';
    reason = `gave up after ${row.attempts} attempts; last answer: ${result.answer}`;
  }
  // the peer's Retry-After is a floor (never back sooner than asked), within the backoff's ceiling
  const delay =
    outcome === 'retry'
      ? Math.max(
          backoffMs(settings, row.attempts),
          Math.min(result.retryAfterMs ?? 0, settings.backoffMaxMs),
        )
      : 0;
  return { outcome, reason, delay };
}

/**
 * Records an attempt in one transaction: the row's new status, the exchange, the audit
 * events and (for a dead letter) the alert; then the metrics. Throws when the database could
 * not be written (the worker tries again while its lease lasts).
 */
export async function recordAttempt(
  deps: RecordDeps,
  row: ClaimedRow,
  result: DeliveryResult,
): Promise<void> {
  const decision = decideAttempt(deps.settings, row, result);
  const { outcome } = decision;
  const recorded = await deps.dataSource.transaction(async (manager) => {
    // Only while the claim is still ours (pending, attempt count as we claimed it): a record
    // tried again after the database came back, or after our lease lapsed and another
    // replica claimed the row, changes nothing and writes no second audit entry.
    if (!(await updateStatus(deps.outbox, row, decision, manager))) return false;
    if (result.sent || result.response) {
      await deps.outbox.recordExchange(
        row.id,
        {
          attempt: row.attempts,
          at: new Date().toISOString(),
          outcome,
          ...(result.sent ? { sent: result.sent } : {}),
          ...(result.response ? { answer: result.response } : {}),
        },
        manager,
      );
    }
    await writeAuditEvents(manager, attemptEvents(row, result, decision));
    // A person hears about a dead letter (ALERT_WEBHOOK_URL), on the same transaction; the
    // webhook's own dead letters are only on the audit page (no alert about an alert).
    if (
      outcome === 'dead' &&
      row.order_id &&
      row.destination !== DESTINATIONS.alert &&
      deps.settings.destinations.includes(DESTINATIONS.alert)
    ) {
      // One alert per death, a replayed row's too (keyed by the transaction that gave it up);
      // further ones of the destination and reason within the window grouped (dead-letter-alert.ts).
      await alertDeadLetter(
        {
          outbox: deps.outbox,
          coalescing: deps.alertCoalescing,
          coalesceMs: deps.settings.alertCoalesceMs,
        },
        {
          outboxId: row.id,
          orderId: row.order_id,
          destination: row.destination,
          documentKind: row.kind,
          reason: decision.reason,
          reasonClass: failureReason(result),
        },
        manager,
      );
    }
    // Last, to hold the destination's row the shortest. A row marked delivered because a later
    // one already was (superseded) went to no peer, and says nothing of it.
    if (result.detail?.supersededBy === undefined) {
      await deps.destinationHealth.recordOutcome(
        row.destination,
        outcome === 'delivered'
          ? { failed: false }
          : { failed: true, reason: failureReason(result) },
        manager,
      );
    }
    return true;
  });
  if (!recorded) return;
  outboundAttemptsTotal.inc({ destination: row.destination, kind: row.kind, outcome });
  if (outcome === 'delivered') {
    outboundDeliverySeconds.observe(
      { destination: row.destination },
      (Date.now() - new Date(row.created_at).getTime()) / 1000,
    );
  }
  if (outcome === 'dead') {
    deps.logger.error(
      { outboxId: row.id, destination: row.destination, kind: row.kind },
      'outbound document dead-lettered',
    );
  }
}

/** The row's new status, if the claim is still ours: whether it was. */
function updateStatus(
  outbox: OutboxRepository,
  row: ClaimedRow,
  { outcome, reason, delay }: Decision,
  manager: EntityManager,
): Promise<boolean> {
  if (outcome === 'delivered') return outbox.markDelivered(row.id, row.attempts, manager);
  if (outcome === 'retry') {
    return outbox.scheduleRetry(row.id, row.attempts, delay, reason, manager);
  }
  return outbox.markDead(row.id, row.attempts, reason, manager);
}

/** `outbound.attempt`, and `outbound.dead-letter` when the row gave up. */
function attemptEvents(
  row: ClaimedRow,
  result: DeliveryResult,
  { outcome, reason, delay }: Decision,
): AuditEventInput[] {
  const base = {
    outboxId: row.id,
    destination: row.destination,
    documentKind: row.kind,
    attempt: row.attempts,
    mappingRow: row.payload.rowKey,
    mappingVersion: row.payload.mappingVersion,
  };
  const events: AuditEventInput[] = [
    {
      kind: 'outbound.attempt',
      orderId: row.order_id,
      actor: 'adapter',
      severity: outcome === 'delivered' ? 'info' : outcome === 'retry' ? 'warning' : 'error',
      summary: `${row.kind} to ${row.destination}, attempt ${row.attempts}: ${result.answer}${outcome === 'retry' ? ` (retry in ${Math.round(delay / 1000)} s)` : ''}`,
      detail: { ...base, outcome, answer: result.answer, ...result.detail },
    },
  ];
  if (outcome === 'dead') {
    events.push({
      kind: 'outbound.dead-letter',
      orderId: row.order_id,
      actor: 'adapter',
      severity: 'error',
      summary: `${row.kind} to ${row.destination} dead-lettered: ${reason}`,
      detail: { ...base, reason },
    });
  }
  return events;
}
