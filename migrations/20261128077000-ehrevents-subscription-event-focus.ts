import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * What each Subscription event named (its focus: the resource reference and version, or a
 * hash of the full resource; an `empty` event its timestamp), as a SHA-256 hex key. An EHR
 * whose event numbering goes back without a handshake (restored from a backup, its
 * subscription store reset, the Subscription re-created under the same id) reuses numbers we
 * processed: a reused number naming another focus is a new event, not a resend. By number
 * alone each was answered "events already processed" and its order never made.
 * `fhir_subscriptions.events_restarted_at`: when such a going back was last seen; event
 * numbers count from it (as from a handshake) in the notifications' idempotency keys.
 * Nullable, no default: adding them rewrites nothing; rows from before are judged by number.
 */
export class EhreventsSubscriptionEventFocus20261128077000 implements MigrationInterface {
  name = 'EhreventsSubscriptionEventFocus20261128077000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE fhir_subscription_events ADD COLUMN focus_key text`);
    await q.query(`ALTER TABLE fhir_subscriptions ADD COLUMN events_restarted_at timestamptz`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE fhir_subscriptions DROP COLUMN events_restarted_at`);
    await q.query(`ALTER TABLE fhir_subscription_events DROP COLUMN focus_key`);
  }
}
