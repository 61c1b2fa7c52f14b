import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * outbox.last_exchange: what the last attempt sent and what the peer answered, as the audit
 * page shows them (issue #18): `{attempt, at, sent: {contentType, text}, answer: {status,
 * contentType, text}}` — the ORU/ORM as HL7 text and the RIS's ACK bytes, the Task or
 * DiagnosticReport JSON and the EHR's HTTP status with its body (OperationOutcome), the
 * SR/PDF as a tag dump and the PACS's STOW answer. Written in the transaction that records
 * the attempt; PHI in it is masked by the page and the API like every other payload.
 */
export class OutboxExchange20261125032000 implements MigrationInterface {
  name = 'OutboxExchange20261125032000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE outbox ADD COLUMN last_exchange jsonb`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE outbox DROP COLUMN last_exchange`);
  }
}
