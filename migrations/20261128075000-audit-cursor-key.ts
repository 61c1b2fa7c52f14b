import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The key the audit log's page cursors are signed with (HMAC-SHA-256), one per database, so
 * that every replica accepts the cursors the others hand out. A cursor carries the page's
 * boundary, its transaction horizon and snapshot (late commits, docs/audit.md): edited by
 * hand, an old boundary and horizon made one page read every row of its list (0.8 s for
 * 3,000,000 events). 244 random bits from gen_random_uuid (pg_strong_random).
 */
export class AuditCursorKey20261128075000 implements MigrationInterface {
  name = 'AuditCursorKey20261128075000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE audit_cursor_key (
        id smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
        key bytea NOT NULL
      )`);
    await q.query(
      `INSERT INTO audit_cursor_key (key) SELECT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE audit_cursor_key`);
  }
}
