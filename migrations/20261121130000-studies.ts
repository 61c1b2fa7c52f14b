import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Study acquisition: DICOM instances pushed to us (STOW-RS, C-STORE), matched to orders or
 * held for a while, and per order the acquisition's progress (the quiet period survives a
 * restart or a move to another replica) and its package.
 */
export class Studies20261121130000 implements MigrationInterface {
  name = 'Studies20261121130000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE study_instances (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        study_instance_uid text NOT NULL,
        series_instance_uid text NOT NULL,
        sop_instance_uid text NOT NULL,
        sop_class_uid text NOT NULL,
        transfer_syntax_uid text NOT NULL,
        accession_number text,
        source text NOT NULL,
        sender text,
        order_id uuid REFERENCES orders (id) ON DELETE SET NULL,
        file_path text NOT NULL,
        size_bytes bigint NOT NULL,
        header jsonb NOT NULL,
        received_at timestamptz NOT NULL,
        matched_at timestamptz,
        hold_until timestamptz,
        CONSTRAINT study_instances_source_chk CHECK (source IN ('stow', 'c-store')),
        CONSTRAINT study_instances_sop_uq UNIQUE (sop_instance_uid)
      )`);
    await q.query(`CREATE INDEX study_instances_study_idx ON study_instances (study_instance_uid)`);
    await q.query(
      `CREATE INDEX study_instances_accession_idx ON study_instances (accession_number)`,
    );
    await q.query(`CREATE INDEX study_instances_order_idx ON study_instances (order_id)`);
    await q.query(
      `CREATE INDEX study_instances_unmatched_idx ON study_instances (hold_until) WHERE order_id IS NULL`,
    );

    await q.query(`
      CREATE TABLE study_acquisitions (
        order_id uuid PRIMARY KEY REFERENCES orders (id) ON DELETE CASCADE,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        state text NOT NULL,
        source text,
        study_instance_uid text,
        observed_count integer,
        stable_since timestamptz,
        checked_at timestamptz,
        lease_until timestamptz,
        package_path text,
        package_size bigint,
        packaged_at timestamptz,
        sidecar_sha256 text,
        study jsonb,
        failure_reason text,
        CONSTRAINT study_acquisitions_state_chk CHECK (state IN ('waiting', 'packaged', 'failed', 'released'))
      )`);
    await q.query(
      `CREATE INDEX study_acquisitions_study_idx ON study_acquisitions (study_instance_uid, packaged_at)`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE study_acquisitions`);
    await q.query(`DROP TABLE study_instances`);
  }
}
