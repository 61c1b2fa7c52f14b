import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The audit lists page newest first by (created_at, id) and (received_at, id); both times are
 * the writing transaction's start (now()), so a row whose transaction commits late sorts
 * above rows the analyst has already paged past, and "next page" never showed it. Each row
 * now keeps the id of the transaction that inserted it (`created_xid`), so a later page can
 * tell a row that was not yet visible when the page above it was read (a late commit, shown
 * then) from one that was (already shown), whatever updates it has had since (an update
 * changes `xmin`, not this).
 *
 * Without a default first, so that adding the column rewrites nothing: older rows keep NULL
 * and count as visible to every page. pg_current_xact_id() is the xid the INSERT already has.
 */
export class LateCommitPaging20261128000000 implements MigrationInterface {
  name = 'LateCommitPaging20261128000000';

  async up(q: QueryRunner): Promise<void> {
    for (const table of ['orders', 'inbound_messages']) {
      await q.query(`ALTER TABLE ${table} ADD COLUMN created_xid xid8`);
      await q.query(
        `ALTER TABLE ${table} ALTER COLUMN created_xid SET DEFAULT pg_current_xact_id()`,
      );
    }
  }

  async down(q: QueryRunner): Promise<void> {
    for (const table of ['orders', 'inbound_messages']) {
      await q.query(`ALTER TABLE ${table} DROP COLUMN created_xid`);
    }
  }
}
