import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * A received instance is keyed by study, series and SOP Instance UID, not by the SOP UID alone.
 * A study may hold one SOP Instance UID in two series (a modality deriving UIDs from a clock, a
 * copy-and-edit tool): a PACS keeps both and a pull brings both (moved files are named
 * `<series>_<sop>.dcm`), but pushed (STOW-RS, C-STORE), the second replaced the first's row and
 * the study was packaged one short. A resend into the same series still replaces its row; the
 * same SOP Instance under another Study Instance UID (a corrected study UID) replaces the
 * earlier row in the repository (upsertInstance), as before.
 *
 * down: keeps, of each SOP Instance UID, the row received last (as the old key did), then
 * restores the old constraint.
 */
export class StudyInstancesBySeries20261128020000 implements MigrationInterface {
  name = 'StudyInstancesBySeries20261128020000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE study_instances DROP CONSTRAINT study_instances_sop_uq`);
    await q.query(
      `ALTER TABLE study_instances ADD CONSTRAINT study_instances_study_series_sop_uq
         UNIQUE (study_instance_uid, series_instance_uid, sop_instance_uid)`,
    );
    // Lookups by SOP UID alone (files of instances, the advisory lock's subjects).
    await q.query(`CREATE INDEX study_instances_sop_idx ON study_instances (sop_instance_uid)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX study_instances_sop_idx`);
    await q.query(
      `ALTER TABLE study_instances DROP CONSTRAINT study_instances_study_series_sop_uq`,
    );
    await q.query(
      `DELETE FROM study_instances s USING study_instances t
        WHERE s.sop_instance_uid = t.sop_instance_uid
          AND (s.received_at, s.id) < (t.received_at, t.id)`,
    );
    await q.query(
      `ALTER TABLE study_instances ADD CONSTRAINT study_instances_sop_uq UNIQUE (sop_instance_uid)`,
    );
  }
}
