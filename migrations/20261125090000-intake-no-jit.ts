import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The intake functions run with JIT off. They run with enable_seqscan off (migration
 * 20261121160000), which adds the planner's "disabled" cost to any plan that still holds a
 * sequential scan; that cost is far above jit_above_cost, so PostgreSQL would then compile
 * the statement to machine code on every call: about 200 ms for a statement that runs in
 * 0.1 ms (seen on PostgreSQL 15, whose default is jit = on, while trying a set-based batch
 * insert). Per-message statements never gain from JIT, so it is off for them whatever plan
 * the planner picks.
 */
export class IntakeNoJit20261125090000 implements MigrationInterface {
  name = 'IntakeNoJit20261125090000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER FUNCTION intake_accept_batch(jsonb) SET jit = off`);
    await q.query(`ALTER FUNCTION intake_lock_and_find(text, text[]) SET jit = off`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER FUNCTION intake_lock_and_find(text, text[]) RESET jit`);
    await q.query(`ALTER FUNCTION intake_accept_batch(jsonb) RESET jit`);
  }
}
