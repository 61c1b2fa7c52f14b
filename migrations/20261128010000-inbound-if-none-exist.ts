import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The If-None-Exist header a refused FHIR create came with (R4 http.html#ccreate). It changes
 * what the body asks (a conditional create: the order already under that identifier is the
 * answer); an admin's reprocess runs the stored body again with it. NULL for every other
 * message.
 */
export class InboundIfNoneExist20261128010000 implements MigrationInterface {
  name = 'InboundIfNoneExist20261128010000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE inbound_messages ADD COLUMN if_none_exist text`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE inbound_messages DROP COLUMN if_none_exist`);
  }
}
