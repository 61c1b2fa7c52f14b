import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The order that replaced this one (FHIR `ServiceRequest.replaces`), set with the cancel it
 * requested: what the clinic reads of the replaced order (Task.statusReason, the report's
 * conclusion, ORC-16) says it was replaced, not only "cancelled".
 */
export class FhirsrcOrdersReplacedBy20261128073000 implements MigrationInterface {
  name = 'FhirsrcOrdersReplacedBy20261128073000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE orders ADD COLUMN replaced_by uuid`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE orders DROP COLUMN replaced_by`);
  }
}
