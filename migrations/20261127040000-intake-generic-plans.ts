import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The intake functions plan their statements once per connection (plan_cache_mode =
 * force_generic_plan). Under the default (auto) PL/pgSQL kept choosing custom plans for the
 * statements that read the message's jsonb: every call planned each of them again, folding
 * the whole batch document into constants on the way (a perf profile of a backend running
 * intake_accept_batch: GetCachedPlan 9 % of its CPU, the planner 7.5 %, gone with generic
 * plans). Every statement in them has one right plan whatever the values: an index probe
 * (enable_seqscan off, migration 20261121160000) or an insert from jsonb_array_elements.
 */
export class IntakeGenericPlans20261127040000 implements MigrationInterface {
  name = 'IntakeGenericPlans20261127040000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(
      `ALTER FUNCTION intake_accept_batch(jsonb) SET plan_cache_mode = force_generic_plan`,
    );
    await q.query(
      `ALTER FUNCTION intake_lock_and_find(text, text[]) SET plan_cache_mode = force_generic_plan`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER FUNCTION intake_lock_and_find(text, text[]) RESET plan_cache_mode`);
    await q.query(`ALTER FUNCTION intake_accept_batch(jsonb) RESET plan_cache_mode`);
  }
}
