import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * outbox.claimed_by: the outbox worker (one id per process) holding a row's claim, cleared
 * when the attempt is recorded. A claim committed while its answer was lost (the database
 * restarted during the round trip) is known only by this: the worker that made it releases
 * its own claims it is not delivering once the database answers again, instead of leaving
 * the rows to their lease (2 minutes) (src/outbound/outbox.worker.ts).
 */
export class OutboxClaimOwner20261121200000 implements MigrationInterface {
  name = 'OutboxClaimOwner20261121200000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE outbox ADD COLUMN claimed_by text`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE outbox DROP COLUMN claimed_by`);
  }
}
