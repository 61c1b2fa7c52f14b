import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Outbound publishing (src/outbound): the outbox workers' claim reads, per destination, the
 * due pending rows, and checks that no earlier pending row of the same order is waiting
 * (order kept per order). Both are partial indexes over pending rows only, so delivered rows
 * cost the claim nothing however many accumulate.
 */
export class Outbound20261121150000 implements MigrationInterface {
  name = 'Outbound20261121150000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(
      `CREATE INDEX outbox_pending_due_idx ON outbox (destination, next_attempt_at, id) WHERE status = 'pending'`,
    );
    await q.query(
      `CREATE INDEX outbox_pending_order_idx ON outbox (destination, order_id, id) WHERE status = 'pending'`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX outbox_pending_order_idx`);
    await q.query(`DROP INDEX outbox_pending_due_idx`);
  }
}
