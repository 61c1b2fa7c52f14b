import type { EntityManager } from 'typeorm';
import { RepositoryBase } from './repository-base';

export interface SubscriptionState {
  subscriptionRef: string;
  topic: string | null;
  status: string | null;
  lastEventNumber: number;
  lastEventAt: Date | null;
  lastNotificationAt: Date | null;
  handshakeAt: Date | null;
  lastHeartbeatAt: Date | null;
  /** Where an unfinished catch-up goes on from (null: none unfinished). */
  catchUpFrom: Date | null;
}

/** What a notification changes in the subscription state, written in the intake transaction. */
export interface NotificationChange {
  subscriptionRef: string;
  topic: string | null;
  status: string | null;
  kind: 'handshake' | 'heartbeat' | 'event' | 'catch-up' | 'other';
  eventNumbers: number[];
  /**
   * The highest event number known to be handled (events or a completed catch-up). On a
   * handshake, its events-since-subscription-start: the numbering starts again there (a
   * Subscription re-activated or re-created on the EHR counts from 0 again).
   */
  handledUpTo?: number;
  eventAt?: string;
  /**
   * A catch-up's cursor: an instant (ISO) to go on from when it read less than changed, null
   * when it finished; undefined leaves it as it is.
   */
  catchUpFrom?: string | null;
  inboundMessageId: string;
}

/**
 * Per Subscription on the EHR, what the FHIR front door processed: its state
 * (fhir_subscriptions) and the event numbers handled (fhir_subscription_events).
 */
export class SubscriptionRepository extends RepositoryBase {
  async findState(ref: string): Promise<SubscriptionState | undefined> {
    const rows: Array<{
      subscription_ref: string;
      topic: string | null;
      status: string | null;
      last_event_number: string;
      last_event_at: Date | null;
      last_notification_at: Date | null;
      handshake_at: Date | null;
      last_heartbeat_at: Date | null;
      catch_up_from: Date | null;
    }> = await this.db().query(`SELECT * FROM fhir_subscriptions WHERE subscription_ref = $1`, [
      ref,
    ]);
    const r = rows[0];
    if (!r) return undefined;
    return {
      subscriptionRef: r.subscription_ref,
      topic: r.topic,
      status: r.status,
      lastEventNumber: Number(r.last_event_number),
      lastEventAt: r.last_event_at,
      lastNotificationAt: r.last_notification_at,
      handshakeAt: r.handshake_at,
      lastHeartbeatAt: r.last_heartbeat_at,
      catchUpFrom: r.catch_up_from,
    };
  }

  /** Event numbers of this subscription already processed, among `numbers`. */
  async seenEvents(ref: string, numbers: number[]): Promise<Set<number>> {
    if (numbers.length === 0) return new Set();
    const rows: Array<{ event_number: string }> = await this.db().query(
      `SELECT event_number FROM fhir_subscription_events WHERE subscription_ref = $1 AND event_number = ANY($2::bigint[])`,
      [ref, numbers],
    );
    return new Set(rows.map((r) => Number(r.event_number)));
  }

  /** Records a notification's effect on the subscription state (and its events), in the intake transaction. */
  async recordNotification(manager: EntityManager, change: NotificationChange): Promise<void> {
    await manager.query(
      `INSERT INTO fhir_subscriptions (subscription_ref, topic, status, last_event_number, handshake_at, last_heartbeat_at,
                                       last_notification_at, last_event_at, catch_up_from, updated_at)
       VALUES ($1, $2, $3, coalesce($4, 0), CASE WHEN $5 = 'handshake' THEN now() END,
               CASE WHEN $5 = 'heartbeat' THEN now() END, now(), $6,
               CASE WHEN $7 THEN $8::timestamptz END, now())
       ON CONFLICT (subscription_ref) DO UPDATE SET
         topic = coalesce(EXCLUDED.topic, fhir_subscriptions.topic),
         status = coalesce(EXCLUDED.status, fhir_subscriptions.status),
         last_event_number = CASE WHEN $5 = 'handshake' AND $4 IS NOT NULL THEN $4
                                  ELSE greatest(fhir_subscriptions.last_event_number, coalesce($4, 0)) END,
         handshake_at = coalesce(EXCLUDED.handshake_at, fhir_subscriptions.handshake_at),
         last_heartbeat_at = coalesce(EXCLUDED.last_heartbeat_at, fhir_subscriptions.last_heartbeat_at),
         last_notification_at = now(),
         last_event_at = greatest(fhir_subscriptions.last_event_at, EXCLUDED.last_event_at),
         catch_up_from = CASE WHEN $7 THEN $8::timestamptz ELSE fhir_subscriptions.catch_up_from END,
         updated_at = now()`,
      [
        change.subscriptionRef,
        change.topic,
        change.status,
        change.handledUpTo ?? null,
        change.kind,
        change.eventAt ?? null,
        change.catchUpFrom !== undefined,
        change.catchUpFrom ?? null,
      ],
    );
    if (change.kind === 'handshake' && change.handledUpTo !== undefined) {
      // A handshake starts the Subscription's numbering again (Backport IG: events since
      // subscription start): numbers above it are the new start's, not ours to skip.
      await manager.query(
        `DELETE FROM fhir_subscription_events WHERE subscription_ref = $1 AND event_number > $2`,
        [change.subscriptionRef, change.handledUpTo],
      );
    }
    if (change.eventNumbers.length > 0) {
      await manager.query(
        `INSERT INTO fhir_subscription_events (subscription_ref, event_number, inbound_message_id)
         SELECT $1, n, $3 FROM unnest($2::bigint[]) n ON CONFLICT DO NOTHING`,
        [change.subscriptionRef, change.eventNumbers, change.inboundMessageId],
      );
    }
  }
}
