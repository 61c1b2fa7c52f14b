import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The ingest fast path: a message that only creates new orders is stored by one function
 * call, one round trip and one commit (an autocommit statement is its own transaction).
 *
 * intake_accept_new takes the same advisory locks as intake_lock_and_find (same key, same
 * order, so the two paths exclude each other) and then, with a fresh snapshot, checks that
 * none of the placer numbers is known for this sender. If one is, it writes nothing and
 * answers 'known-placer': the caller takes the general path, which decides per order
 * (duplicate, re-create after cancel). Otherwise it writes the message (with its answer),
 * the orders, their audit events and jobs, and answers 'accepted', or 'duplicate' when the
 * idempotency key was already accepted (nothing written).
 *
 * Write-path indexes of orders, trimmed (every new order paid for each):
 * - orders_state_idx (state, updated_at): no query filters on state and sorts by
 *   updated_at; the state-prefixed queries use orders_state_created_idx.
 * - orders_placer_idx (placer) + orders_sender_placer_idx (sender, placer): one index
 *   (placer, sender) serves the search by placer number and the intake lookup, and skips
 *   orders without a placer number.
 * - orders_filler_idx, orders_study_uid_idx: only orders that have the value are indexed
 *   (equality lookups imply NOT NULL, so the planner still uses them).
 */
export class IngestFastPath20261121160000 implements MigrationInterface {
  name = 'IngestFastPath20261121160000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX orders_state_idx`);
    await q.query(`DROP INDEX orders_placer_idx`);
    await q.query(`DROP INDEX orders_sender_placer_idx`);
    await q.query(
      `CREATE INDEX orders_placer_sender_idx ON orders (placer_order_number, sender) WHERE placer_order_number IS NOT NULL`,
    );
    await q.query(`DROP INDEX orders_filler_idx`);
    await q.query(
      `CREATE INDEX orders_filler_idx ON orders (filler_order_number) WHERE filler_order_number IS NOT NULL`,
    );
    await q.query(`DROP INDEX orders_study_uid_idx`);
    await q.query(
      `CREATE INDEX orders_study_uid_idx ON orders (study_instance_uid) WHERE study_instance_uid IS NOT NULL`,
    );
    await q.query(`
      CREATE FUNCTION intake_accept_new(
        p_sender text, p_placers text[], p_message_id uuid, p_transport text, p_remote_address text,
        p_message_type text, p_control_id text, p_idempotency_key text, p_content_type text,
        p_raw bytea, p_quirks jsonb, p_response bytea, p_response_code text,
        p_response_content_type text, p_orders jsonb, p_mapping_version text, p_audit jsonb,
        p_jobs jsonb)
      RETURNS text
      LANGUAGE plpgsql VOLATILE AS $$
      BEGIN
        IF cardinality(p_placers) > 0 THEN
          PERFORM pg_advisory_xact_lock(hashtextextended(coalesce(p_sender, '') || '|' || p, 7470301))
            FROM (SELECT DISTINCT unnest(p_placers) AS p ORDER BY 1) ordered;
          IF EXISTS (SELECT 1 FROM orders o
                      WHERE o.placer_order_number = ANY (p_placers)
                        AND o.sender IS NOT DISTINCT FROM p_sender) THEN
            RETURN 'known-placer';
          END IF;
        END IF;
        INSERT INTO inbound_messages
          (id, transport, sender, remote_address, message_type, message_control_id, idempotency_key,
           content_type, raw, outcome, quirks, response, response_code, response_content_type)
        VALUES (p_message_id, p_transport, p_sender, p_remote_address, p_message_type, p_control_id,
                p_idempotency_key, p_content_type, p_raw, 'accepted', p_quirks, p_response,
                p_response_code, p_response_content_type)
        ON CONFLICT (idempotency_key) WHERE outcome = 'accepted' DO NOTHING;
        IF NOT FOUND THEN
          RETURN 'duplicate';
        END IF;
        INSERT INTO orders
          (id, source, sender, inbound_message_id, state, accession_number, patient_id, placer_order_number,
           filler_order_number, placer_group_number, study_instance_uid, request, mapping_version)
        SELECT (r->>'id')::uuid, r->>'source', p_sender, p_message_id, 'received', r->>'accession_number',
               r->>'patient_id', r->>'placer_order_number', r->>'filler_order_number',
               r->>'placer_group_number', r->>'study_instance_uid', r->'request', p_mapping_version
          FROM jsonb_array_elements(p_orders) r;
        INSERT INTO audit_events (order_id, inbound_message_id, kind, severity, actor, summary, detail)
        SELECT (e->>'orderId')::uuid, p_message_id, e->>'kind', coalesce(e->>'severity', 'info'),
               e->>'actor', e->>'summary', coalesce(e->'detail', '{}'::jsonb)
          FROM jsonb_array_elements(p_audit) e;
        INSERT INTO job_outbox (task, payload, job_key)
        SELECT x->>'task', x->'payload', x->>'job_key' FROM jsonb_array_elements(p_jobs) x;
        RETURN 'accepted';
      END $$`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(
      `DROP FUNCTION intake_accept_new(text, text[], uuid, text, text, text, text, text, text, bytea, jsonb, bytea, text, text, jsonb, text, jsonb, jsonb)`,
    );
    await q.query(`DROP INDEX orders_study_uid_idx`);
    await q.query(`CREATE INDEX orders_study_uid_idx ON orders (study_instance_uid)`);
    await q.query(`DROP INDEX orders_filler_idx`);
    await q.query(`CREATE INDEX orders_filler_idx ON orders (filler_order_number)`);
    await q.query(`DROP INDEX orders_placer_sender_idx`);
    await q.query(`CREATE INDEX orders_sender_placer_idx ON orders (sender, placer_order_number)`);
    await q.query(`CREATE INDEX orders_placer_idx ON orders (placer_order_number)`);
    await q.query(`CREATE INDEX orders_state_idx ON orders (state, updated_at)`);
  }
}
