import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The accepted FHIR creates of a sender by the hash of their bytes: a plain POST that repeats
 * a conditional create sent without a placer number is found as its resend (the two are kept
 * under different idempotency keys: the If-None-Exist search, the hash of the bytes). Partial:
 * only accepted ServiceRequest creates are in it.
 */
export class Fhirrw2CreateResendByContent20261128112000 implements MigrationInterface {
  name = 'Fhirrw2CreateResendByContent20261128112000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(
      `CREATE INDEX inbound_messages_fhir_create_content_idx ON inbound_messages (sender, sha256(raw))
        WHERE message_type = 'ServiceRequest create' AND outcome = 'accepted'`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX inbound_messages_fhir_create_content_idx`);
  }
}
