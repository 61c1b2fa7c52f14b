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
  /** When the EHR's event numbering last went back without a handshake (null: never). */
  eventsRestartedAt: Date | null;
}

/** What a notification changes in the subscription state, written in the intake transaction. */
export interface NotificationChange {
  subscriptionRef: string;
  topic: string | null;
  status: string | null;
  kind: 'handshake' | 'heartbeat' | 'event' | 'catch-up' | 'other';
  eventNumbers: number[];
  /**
   * Per event number (same order), what the event named (see SubscriptionEventFocus): a
   * number already recorded is taken over by a new focus (the EHR's numbering went back).
   */
  focusKeys?: Array<string | null>;
  /**
   * The EHR's numbering went back without a handshake (a reused number naming another focus,
   * or a heartbeat counting fewer events than we processed): `at` is kept as
   * events_restarted_at (event numbers count from it in idempotency keys, as from a
   * handshake). With `lastEventNumber`, last_event_number is set to it, not kept at the old
   * maximum, so gaps in the new numbering are caught up, and recorded numbers above it that
   * name no focus (from before focus keys were kept) are forgotten.
   */
  restart?: { lastEventNumber?: number; at: string };
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
      events_restarted_at: Date | null;
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
      eventsRestartedAt: r.events_restarted_at,
    };
  }

  /**
   * Event numbers of this subscription already processed, among `numbers`, with the focus key
   * each was processed for (null: not known, recorded before focus keys were kept).
   */
  async seenEvents(ref: string, numbers: number[]): Promise<Map<number, string | null>> {
    if (numbers.length === 0) return new Map();
    const rows: Array<{ event_number: string; focus_key: string | null }> = await this.db().query(
      `SELECT event_number, focus_key FROM fhir_subscription_events WHERE subscription_ref = $1 AND event_number = ANY($2::bigint[])`,
      [ref, numbers],
    );
    return new Map(rows.map((r) => [Number(r.event_number), r.focus_key]));
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
                                  WHEN $9::bigint IS NOT NULL THEN $9::bigint
                                  ELSE greatest(fhir_subscriptions.last_event_number, coalesce($4, 0)) END,
         handshake_at = coalesce(EXCLUDED.handshake_at, fhir_subscriptions.handshake_at),
         last_heartbeat_at = coalesce(EXCLUDED.last_heartbeat_at, fhir_subscriptions.last_heartbeat_at),
         last_notification_at = now(),
         last_event_at = greatest(fhir_subscriptions.last_event_at, EXCLUDED.last_event_at),
         catch_up_from = CASE WHEN $7 THEN $8::timestamptz ELSE fhir_subscriptions.catch_up_from END,
         events_restarted_at = coalesce($10::timestamptz, fhir_subscriptions.events_restarted_at),
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
        change.restart?.lastEventNumber ?? null,
        change.restart?.at ?? null,
      ],
    );
    if (change.restart?.lastEventNumber !== undefined) {
      // Numbers above the restart recorded without a focus cannot be told from the new
      // numbering's: forgotten, as a handshake forgets them. Those with a focus are kept, so a
      // resend of an old event is still known by what it names.
      await manager.query(
        `DELETE FROM fhir_subscription_events WHERE subscription_ref = $1 AND event_number > $2 AND focus_key IS NULL`,
        [change.subscriptionRef, change.restart.lastEventNumber],
      );
    }
    if (change.kind === 'handshake' && change.handledUpTo !== undefined) {
      // A handshake starts the Subscription's numbering again (Backport IG: events since
      // subscription start): numbers above it are the new start's, not ours to skip.
      await manager.query(
        `DELETE FROM fhir_subscription_events WHERE subscription_ref = $1 AND event_number > $2`,
        [change.subscriptionRef, change.handledUpTo],
      );
    }
    if (change.eventNumbers.length > 0) {
      // A number recorded for another focus is the new numbering's now (the EHR's numbering
      // went back): it is taken over, so its resend is known by its new focus.
      await manager.query(
        `INSERT INTO fhir_subscription_events (subscription_ref, event_number, inbound_message_id, focus_key)
         SELECT DISTINCT ON (e.n) $1, e.n, $3::uuid, e.k FROM unnest($2::bigint[], $4::text[]) AS e(n, k)
         ON CONFLICT (subscription_ref, event_number) DO UPDATE SET
           focus_key = EXCLUDED.focus_key, inbound_message_id = EXCLUDED.inbound_message_id, processed_at = now()
         WHERE EXCLUDED.focus_key IS NOT NULL
           AND fhir_subscription_events.focus_key IS DISTINCT FROM EXCLUDED.focus_key`,
        [
          change.subscriptionRef,
          change.eventNumbers,
          change.inboundMessageId,
          change.eventNumbers.map((_, i) => change.focusKeys?.[i] ?? null),
        ],
      );
    }
  }
}
