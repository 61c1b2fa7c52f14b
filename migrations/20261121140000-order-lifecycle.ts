import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Order lifecycle: what the use cases and the poller keep per order (deadlines, the last
 * upstream status seen, the upload lease, the QC bypass decision), upstream batches, the
 * documents fetched per terminal status, and the once-per-cluster poll schedule.
 */
export class OrderLifecycle20261121140000 implements MigrationInterface {
  name = 'OrderLifecycle20261121140000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      ALTER TABLE orders
        ADD COLUMN place_attempted_at timestamptz,
        ADD COLUMN placed_at timestamptz,
        ADD COLUMN study_deadline_at timestamptz,
        ADD COLUMN package_path text,
        ADD COLUMN upload_started_at timestamptz,
        ADD COLUMN upload_completed_at timestamptz,
        ADD COLUMN lease_owner text,
        ADD COLUMN lease_until timestamptz,
        ADD COLUMN upstream_status_at timestamptz,
        ADD COLUMN qc_bypass jsonb,
        ADD COLUMN documents_fetched_for text,
        ADD COLUMN alert text`);
    // The poller reads only the followed orders; the deadline sweep only the waiting ones.
    await q.query(
      `CREATE INDEX orders_followed_idx ON orders (upstream_order_id) WHERE state IN ('processing', 'qc-hold')`,
    );
    await q.query(
      `CREATE INDEX orders_waiting_idx ON orders (study_deadline_at) WHERE state IN ('placed', 'study-ready')`,
    );
    await q.query(
      `CREATE INDEX orders_uploading_idx ON orders (lease_until) WHERE state = 'uploading'`,
    );
    await q.query(`
      CREATE TABLE upstream_batches (
        sender text NOT NULL DEFAULT '',
        placer_group_number text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        batch_id text,
        products jsonb NOT NULL,
        report_fetched_at timestamptz,
        report_content_type text,
        report bytea,
        PRIMARY KEY (sender, placer_group_number)
      )`);
    await q.query(`
      CREATE TABLE order_documents (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        order_id uuid NOT NULL REFERENCES orders (id),
        upstream_status text NOT NULL,
        kind text NOT NULL,
        report_type text NOT NULL,
        content_type text NOT NULL,
        body bytea NOT NULL,
        fetched_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT order_documents_kind_chk CHECK (kind IN ('results', 'failure', 'qc'))
      )`);
    await q.query(
      `CREATE UNIQUE INDEX order_documents_uq ON order_documents (order_id, upstream_status, kind, report_type)`,
    );
    await q.query(`
      CREATE TABLE poll_schedule (
        name text PRIMARY KEY,
        next_due_at timestamptz NOT NULL DEFAULT now(),
        running_until timestamptz,
        last_started_at timestamptz,
        last_finished_at timestamptz,
        last_stats jsonb
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE poll_schedule`);
    await q.query(`DROP TABLE order_documents`);
    await q.query(`DROP TABLE upstream_batches`);
    await q.query(`DROP INDEX orders_uploading_idx`);
    await q.query(`DROP INDEX orders_waiting_idx`);
    await q.query(`DROP INDEX orders_followed_idx`);
    await q.query(`
      ALTER TABLE orders
        DROP COLUMN place_attempted_at, DROP COLUMN placed_at, DROP COLUMN study_deadline_at,
        DROP COLUMN package_path, DROP COLUMN upload_started_at, DROP COLUMN upload_completed_at,
        DROP COLUMN lease_owner, DROP COLUMN lease_until, DROP COLUMN upstream_status_at,
        DROP COLUMN qc_bypass, DROP COLUMN documents_fetched_for, DROP COLUMN alert`);
  }
}
