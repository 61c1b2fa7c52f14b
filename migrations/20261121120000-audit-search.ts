import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Audit log search and the audit page's sign-in sessions (docs/audit.md).
 *
 * The order list pages by keyset on (created_at, id), so every filter that is not an exact
 * key (source, state, time range) needs an index that ends in (created_at, id): then a
 * filtered page is one index range scan, never a sort of all orders. `orders_created_idx`
 * replaces `orders_created_at_idx` (its prefix). Exact keys (accession, patient id,
 * placer/filler, Study Instance UID, upstream id) already have their own indexes, and MSH-10
 * goes through inbound_messages(message_control_id) then audit_events(inbound_message_id).
 *
 * On audit_events only one partial index is added, for outbound documents (those that carry
 * a `destination`): the ingest path's events have none, so its insert cost does not change.
 */
export class AuditSearch20261121120000 implements MigrationInterface {
  name = 'AuditSearch20261121120000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE INDEX orders_created_idx ON orders (created_at, id)`);
    await q.query(`DROP INDEX orders_created_at_idx`);
    await q.query(`CREATE INDEX orders_source_created_idx ON orders (source, created_at, id)`);
    await q.query(`CREATE INDEX orders_state_created_idx ON orders (state, created_at, id)`);
    await q.query(
      `CREATE INDEX audit_events_destination_idx ON audit_events ((detail->>'destination'), id) WHERE detail ? 'destination'`,
    );
    // Opaque random session ids (only their SHA-256 is stored), so a replica restart or a
    // second replica keeps the analyst signed in and sign-out revokes at once.
    await q.query(`
      CREATE TABLE audit_sessions (
        id_hash text PRIMARY KEY,
        role text NOT NULL,
        actor text NOT NULL,
        csrf_token text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL
      )`);
    await q.query(`CREATE INDEX audit_sessions_expires_idx ON audit_sessions (expires_at)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE audit_sessions`);
    await q.query(`DROP INDEX audit_events_destination_idx`);
    await q.query(`DROP INDEX orders_state_created_idx`);
    await q.query(`DROP INDEX orders_source_created_idx`);
    await q.query(`CREATE INDEX orders_created_at_idx ON orders (created_at)`);
    await q.query(`DROP INDEX orders_created_idx`);
  }
}
