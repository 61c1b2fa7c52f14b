import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The identifiers of an order's patient that an ADT^A40 merge retired (MRG-1). The merge moves
 * the order to the surviving record, but what was sent before it still names the retired one:
 * the upstream's report, written from the create's metadata, names the record number the order
 * was placed under, and was refused as another patient's.
 */
export class IdentityOrdersRetiredPatientIdentifiers20261128081000 implements MigrationInterface {
  name = 'IdentityOrdersRetiredPatientIdentifiers20261128081000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(
      `ALTER TABLE orders ADD COLUMN retired_patient_identifiers jsonb NOT NULL DEFAULT '[]'::jsonb`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE orders DROP COLUMN retired_patient_identifiers`);
  }
}
