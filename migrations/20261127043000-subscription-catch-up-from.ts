import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Where an unfinished catch-up goes on from. A catch-up after missed Subscription events
 * reads at most 20 pages of the EHR's search; when more ServiceRequests changed than that,
 * the gap stays open and `catch_up_from` keeps the last-updated time of the last one read,
 * so the next heartbeat's catch-up continues there instead of ending with the rest unread.
 * NULL when no catch-up is unfinished.
 */
export class SubscriptionCatchUpFrom20261127043000 implements MigrationInterface {
  name = 'SubscriptionCatchUpFrom20261127043000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE fhir_subscriptions ADD COLUMN catch_up_from timestamptz`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE fhir_subscriptions DROP COLUMN catch_up_from`);
  }
}
