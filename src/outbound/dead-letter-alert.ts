import type { EntityManager } from 'typeorm';
import type { AlertCoalescingRepository } from '../persistence/alert-coalescing.repository';
import type { OutboxRepository } from '../persistence/outbox.repository';
import { deadLetterPayload, deadLetterSummaryPayload } from './alert-webhook.publisher';
import { DESTINATIONS } from './outbound.settings';

/** Orders one follow-up alert names at most; the next dead letter of the group starts another. */
export const ALERT_SUMMARY_MAX_ORDERS = 100;

export interface DeadLetterAlertDeps {
  outbox: OutboxRepository;
  coalescing: AlertCoalescingRepository;
  /** ALERT_COALESCE_SECONDS in ms; 0: one alert per dead letter. */
  coalesceMs: number;
}

export interface DeadLetter {
  outboxId: string;
  orderId: string;
  destination: string;
  documentKind: string;
  /** The whole reason, for the first alert (as the audit log has it). */
  reason: string;
  /** The reason in fixed words (failure-reason.ts): with the destination, what groups alerts. */
  reasonClass: string;
}

/**
 * Tells a person of a dead letter through the alert webhook's outbox rows, on the transaction
 * that gave the row up. Before, each dead letter was one POST: an EHR refusing 2,000 results
 * sent 2,000 POSTs at 30 a second. Now, per destination and reason: the first dead letter is
 * alerted at once and opens a window of ALERT_COALESCE_SECONDS; the further ones within it join
 * one follow-up alert (kind dead-letter-summary, due at the window's end) with their count and
 * orders. None is lost: each is in exactly one alert, a full follow-up (ALERT_SUMMARY_MAX_ORDERS)
 * or one already taken by a worker is followed by another, and every alert is an outbox row
 * with the outbox's retries. After the window the next dead letter is alerted at once again.
 */
export async function alertDeadLetter(
  deps: DeadLetterAlertDeps,
  dead: DeadLetter,
  manager: EntityManager,
): Promise<void> {
  const alertAtOnce = () =>
    deps.outbox.insertDeadLetterAlert(
      dead.outboxId,
      DESTINATIONS.alert,
      deadLetterPayload({
        orderId: dead.orderId,
        outboxId: dead.outboxId,
        destination: dead.destination,
        documentKind: dead.documentKind,
        reason: dead.reason,
      }),
      manager,
    );
  if (deps.coalesceMs <= 0) return alertAtOnce();
  const groupKey = `${dead.destination}|${dead.reasonClass}`;
  const group = await deps.coalescing.lockGroup(groupKey, manager);
  if (!group.open || group.window_ends_at === null) {
    await alertAtOnce();
    await deps.coalescing.openWindow(groupKey, deps.coalesceMs, manager);
    return;
  }
  if (
    group.summary_outbox_id !== null &&
    (await deps.coalescing.joinSummary(
      group.summary_outbox_id,
      dead.orderId,
      ALERT_SUMMARY_MAX_ORDERS,
      manager,
    ))
  )
    return;
  await deps.coalescing.insertSummary(
    groupKey,
    DESTINATIONS.alert,
    dead.outboxId,
    deadLetterSummaryPayload({
      destination: dead.destination,
      reason: dead.reasonClass,
      orderId: dead.orderId,
      windowEndsAt: group.window_ends_at,
    }),
    manager,
  );
}
