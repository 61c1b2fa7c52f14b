import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Late-commit paging (migration 20261128000000) for the events list and the dead-letter list.
 * An event's id is taken from its sequence inside the writing transaction and its occurred_at is
 * that transaction's start, so an event whose transaction commits late sorts above events the
 * analyst has already paged past; a dead letter's updated_at is the start of the transaction
 * that gave it up. Each keeps the id of the transaction that put it in its list:
 * `audit_events.created_xid` (the inserting one, as orders and messages) and `outbox.dead_xid`
 * (the one that last moved the row to dead: OutboxRepository.markDead sets it).
 *
 * No default first, then the default, so that adding the columns rewrites nothing; older rows
 * keep NULL and count as visible to every page. No index: the late rows are found through the
 * indexes the lists already read (the primary key and occurred_at, outbox_dead_idx).
 */
export class AuditcapLateCommitEventsDeadLetters20261128031000 implements MigrationInterface {
  name = 'AuditcapLateCommitEventsDeadLetters20261128031000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE audit_events ADD COLUMN created_xid xid8`);
    await q.query(
      `ALTER TABLE audit_events ALTER COLUMN created_xid SET DEFAULT pg_current_xact_id()`,
    );
    await q.query(`ALTER TABLE outbox ADD COLUMN dead_xid xid8`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE outbox DROP COLUMN dead_xid`);
    await q.query(`ALTER TABLE audit_events DROP COLUMN created_xid`);
  }
}
