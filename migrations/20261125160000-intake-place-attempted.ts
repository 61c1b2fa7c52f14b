import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * intake_lock_and_find also answers place_attempted_at: once a place job has read an order's
 * products to create the upstream order, a change of products must be refused as for a placed
 * order (the upstream may run the products it was sent), though the upstream order id is not
 * stored until the create has answered. The place job reads the products in the statement
 * that sets place_attempted_at, under the row lock this function also takes, so either the
 * change comes first and is placed, or it comes after and is refused.
 */
const BODY = `
      BEGIN
        PERFORM pg_advisory_xact_lock(hashtextextended(coalesce(p_sender, '') || '|' || p, 7470301))
          FROM (SELECT DISTINCT unnest(p_placers) AS p ORDER BY 1) ordered;
        RETURN QUERY
          SELECT o.id, o.state, o.upstream_order_id, o.place_attempted_at, o.request, o.placer_order_number
            FROM orders o
           WHERE o.sender IS NOT DISTINCT FROM p_sender AND o.placer_order_number = ANY (p_placers)
           ORDER BY o.created_at DESC
             FOR UPDATE;
      END`;

export class IntakePlaceAttempted20261125160000 implements MigrationInterface {
  name = 'IntakePlaceAttempted20261125160000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`DROP FUNCTION intake_lock_and_find(text, text[])`);
    await q.query(`
      CREATE FUNCTION intake_lock_and_find(p_sender text, p_placers text[])
      RETURNS TABLE (id uuid, state text, upstream_order_id text, place_attempted_at timestamptz,
                     request jsonb, placer_order_number text)
      LANGUAGE plpgsql VOLATILE
      SET enable_seqscan = off
      SET jit = off
      AS $$${BODY} $$`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP FUNCTION intake_lock_and_find(text, text[])`);
    await q.query(`
      CREATE FUNCTION intake_lock_and_find(p_sender text, p_placers text[])
      RETURNS TABLE (id uuid, state text, upstream_order_id text, request jsonb, placer_order_number text)
      LANGUAGE plpgsql VOLATILE
      SET enable_seqscan = off
      SET jit = off
      AS $$${BODY.replace('o.place_attempted_at, ', '')} $$`);
  }
}
