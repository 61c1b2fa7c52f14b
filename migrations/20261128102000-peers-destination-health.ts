import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * What /health and /metrics say of each destination we deliver to, read without scanning the
 * outbox: the oldest pending row and the pending count of a destination from a partial index
 * on (destination, created_at); its dead letters from one on (destination). The outcome of
 * the attempts (consecutive failures, last success and failure, a short reason) is kept per
 * destination in `outbox_destination_state`, written on the transaction that records each
 * attempt.
 */
export class PeersDestinationHealth20261128102000 implements MigrationInterface {
  name = 'PeersDestinationHealth20261128102000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(
      `CREATE INDEX outbox_pending_created_idx ON outbox (destination, created_at) WHERE status = 'pending'`,
    );
    await q.query(
      `CREATE INDEX outbox_dead_destination_idx ON outbox (destination) WHERE status = 'dead'`,
    );
    await q.query(`
      CREATE TABLE outbox_destination_state (
        destination text PRIMARY KEY,
        consecutive_failures integer NOT NULL DEFAULT 0,
        last_success_at timestamptz,
        last_failure_at timestamptz,
        last_failure_reason text,
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE outbox_destination_state`);
    await q.query(`DROP INDEX outbox_dead_destination_idx`);
    await q.query(`DROP INDEX outbox_pending_created_idx`);
  }
}
