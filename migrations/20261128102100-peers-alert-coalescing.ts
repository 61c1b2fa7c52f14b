import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Dead-letter alerts grouped per destination and reason (ALERT_COALESCE_SECONDS): one row per
 * group holds when its window ends and the follow-up alert (an outbox row of the alert webhook,
 * due at the window's end) that the group's further dead letters join.
 */
export class PeersAlertCoalescing20261128102100 implements MigrationInterface {
  name = 'PeersAlertCoalescing20261128102100';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE alert_coalescing (
        group_key text PRIMARY KEY,
        window_ends_at timestamptz,
        summary_outbox_id bigint,
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE alert_coalescing`);
  }
}
