import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Order intake: cancel requests recorded on the order, and the lookup an inbound cancel or
 * change uses (the sender's placer order number).
 */
export class OrderIntake20261121093000 implements MigrationInterface {
  name = 'OrderIntake20261121093000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(
      `ALTER TABLE orders ADD COLUMN cancel_requested_at timestamptz, ADD COLUMN cancel_reason text`,
    );
    await q.query(`CREATE INDEX orders_sender_placer_idx ON orders (sender, placer_order_number)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX orders_sender_placer_idx`);
    await q.query(`ALTER TABLE orders DROP COLUMN cancel_requested_at, DROP COLUMN cancel_reason`);
  }
}
