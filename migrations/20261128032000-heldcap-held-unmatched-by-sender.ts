import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Held (unmatched) instances counted per sender: STUDY_MAX_HELD_UNMATCHED_PER_SENDER is checked
 * as pushed instances that match no order are recorded (countHeldUnmatched), one count per
 * STOW-RS request or C-STORE data set. The partial index holds the unmatched rows only, as
 * study_instances_unmatched_idx does, so the count reads one sender's held rows, not all of them.
 */
export class HeldcapHeldUnmatchedBySender20261128032000 implements MigrationInterface {
  name = 'HeldcapHeldUnmatchedBySender20261128032000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(
      `CREATE INDEX study_instances_held_sender_idx ON study_instances (sender, hold_until)
        WHERE order_id IS NULL`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX study_instances_held_sender_idx`);
  }
}
