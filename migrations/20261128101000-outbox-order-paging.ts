import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * An order's outbound documents are paged newest first (the order view holds the newest 20,
 * GET /api/audit/orders/{id}/outbound the rest): an index range on (order_id, id), where
 * outbox_order_idx (order_id, destination, id) made each page read and sort every row of the
 * order (2,000 for an order of many corrections and replays).
 */
export class OutboxOrderPaging20261128101000 implements MigrationInterface {
  name = 'OutboxOrderPaging20261128101000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE INDEX outbox_order_id_idx ON outbox (order_id, id)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX outbox_order_id_idx`);
  }
}
