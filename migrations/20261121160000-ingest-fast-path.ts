import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The ingest fast path: messages that only create new orders are stored by one function
 * call, one round trip and one commit (an autocommit statement is its own transaction), a
 * batch of them at a time when they arrive together (src/orders/intake-batcher.ts).
 *
 * intake_accept_batch takes the same advisory locks as intake_lock_and_find (same key, same
 * order, so the two paths exclude each other) and then, per message and with a fresh
 * snapshot, checks that none of its placer numbers is known for its sender. If one is, it
 * writes nothing for that message and answers 'known-placer': the caller takes the general
 * path, which decides per order (duplicate, re-create after cancel). Otherwise it writes the
 * message (with its answer), the orders, their audit events and jobs, and answers
 * 'accepted', or 'duplicate' when the idempotency key was already accepted (nothing
 * written). The answers come back in the batch's order.
 *
 * Both intake functions run with enable_seqscan off: PL/pgSQL caches a generic plan of each
 * statement, and one made while orders was nearly empty scanned the whole table for every
 * message once it was not (bench/mllp-ingest: 6,214 sequential scans reading 19 million
 * rows for 6,200 messages). Every statement in them has an index to use.
 *
 * Write-path indexes of orders, trimmed (every new order paid for each):
 * - orders_state_idx (state, updated_at): no query filters on state and sorts by
 *   updated_at; the state-prefixed queries use orders_state_created_idx.
 * - orders_placer_idx (placer) + orders_sender_placer_idx (sender, placer): one index
 *   (placer, sender) serves the search by placer number and the intake lookup.
 * - orders_filler_idx, orders_study_uid_idx: only orders that have the value are indexed
 *   (equality lookups imply NOT NULL, so the planner still uses them).
 */
export class IngestFastPath20261121160000 implements MigrationInterface {
  name = 'IngestFastPath20261121160000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX orders_state_idx`);
    await q.query(`DROP INDEX orders_placer_idx`);
    await q.query(`DROP INDEX orders_sender_placer_idx`);
    // not partial: `placer = ANY($1)` with an array parameter does not prove IS NOT NULL, so
    // the generic plans of the intake functions could not use a partial index (seq scans)
    await q.query(`CREATE INDEX orders_placer_sender_idx ON orders (placer_order_number, sender)`);
    await q.query(`DROP INDEX orders_filler_idx`);
    await q.query(
      `CREATE INDEX orders_filler_idx ON orders (filler_order_number) WHERE filler_order_number IS NOT NULL`,
    );
    await q.query(`DROP INDEX orders_study_uid_idx`);
    await q.query(
      `CREATE INDEX orders_study_uid_idx ON orders (study_instance_uid) WHERE study_instance_uid IS NOT NULL`,
    );
    // audit events are appended in time order: a BRIN index serves the time-range filters of
    // the search and retention for a fraction of a B-tree's cost on every insert
    await q.query(`DROP INDEX audit_events_occurred_idx`);
    await q.query(
      `CREATE INDEX audit_events_occurred_brin ON audit_events USING brin (occurred_at) WITH (pages_per_range = 32)`,
    );
    // lz4 compresses the larger values (mapping lineage, order requests, raw messages) several
    // times faster than the default pglz; only where the server was built with it
    await q.query(`
      DO $$ BEGIN
        IF EXISTS (SELECT 1 FROM pg_settings
                    WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
          ALTER TABLE audit_events ALTER COLUMN detail SET COMPRESSION lz4;
          ALTER TABLE orders ALTER COLUMN request SET COMPRESSION lz4;
          ALTER TABLE inbound_messages ALTER COLUMN raw SET COMPRESSION lz4;
        END IF;
      END $$`);
    await q.query(`
      CREATE FUNCTION intake_accept_batch(p_batch jsonb)
      RETURNS text[]
      LANGUAGE plpgsql VOLATILE
      SET enable_seqscan = off
      AS $$
      DECLARE
        m jsonb;
        v_id uuid;
        v_placers text[];
        answers text[] := '{}';
      BEGIN
        -- every lock of the batch first, in one order (sender, then placer as
        -- intake_lock_and_find sorts them): no deadlock with another batch or the general path
        PERFORM pg_advisory_xact_lock(hashtextextended(s || '|' || p, 7470301))
          FROM (SELECT DISTINCT coalesce(b->>'sender', '') AS s, p
                  FROM jsonb_array_elements(p_batch) b, jsonb_array_elements_text(b->'placers') p
                 ORDER BY 1, 2) ordered;
        FOR m IN SELECT value FROM jsonb_array_elements(p_batch) LOOP
          v_placers := ARRAY(SELECT jsonb_array_elements_text(m->'placers'));
          IF cardinality(v_placers) > 0 AND EXISTS (
               SELECT 1 FROM orders o
                WHERE o.placer_order_number = ANY (v_placers)
                  AND o.sender IS NOT DISTINCT FROM (m->>'sender')) THEN
            answers := answers || 'known-placer'::text;
            CONTINUE;
          END IF;
          v_id := (m->>'id')::uuid;
          INSERT INTO inbound_messages
            (id, transport, sender, remote_address, message_type, message_control_id, idempotency_key,
             content_type, raw, outcome, quirks, response, response_code, response_content_type)
          VALUES (v_id, m->>'transport', m->>'sender', m->>'remote_address', m->>'message_type',
                  m->>'control_id', m->>'idempotency_key', m->>'content_type',
                  decode(m->>'raw', 'base64'), 'accepted', m->'quirks', decode(m->>'response', 'base64'),
                  m->>'response_code', m->>'response_content_type')
          ON CONFLICT (idempotency_key) WHERE outcome = 'accepted' DO NOTHING;
          IF NOT FOUND THEN
            answers := answers || 'duplicate'::text;
            CONTINUE;
          END IF;
          INSERT INTO orders
            (id, source, sender, inbound_message_id, state, accession_number, patient_id, placer_order_number,
             filler_order_number, placer_group_number, study_instance_uid, request, mapping_version)
          SELECT (r->>'id')::uuid, r->>'source', m->>'sender', v_id, 'received', r->>'accession_number',
                 r->>'patient_id', r->>'placer_order_number', r->>'filler_order_number',
                 r->>'placer_group_number', r->>'study_instance_uid', r->'request', m->>'mapping_version'
            FROM jsonb_array_elements(m->'orders') r;
          INSERT INTO audit_events (order_id, inbound_message_id, kind, severity, actor, summary, detail)
          SELECT (e->>'orderId')::uuid, v_id, e->>'kind', coalesce(e->>'severity', 'info'),
                 e->>'actor', e->>'summary', coalesce(e->'detail', '{}'::jsonb)
            FROM jsonb_array_elements(m->'audit') e;
          INSERT INTO job_outbox (task, payload, job_key)
          SELECT x->>'task', x->'payload', x->>'job_key' FROM jsonb_array_elements(m->'jobs') x;
          answers := answers || 'accepted'::text;
        END LOOP;
        RETURN answers;
      END $$`);
    await q.query(`ALTER FUNCTION intake_lock_and_find(text, text[]) SET enable_seqscan = off`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER FUNCTION intake_lock_and_find(text, text[]) RESET enable_seqscan`);
    await q.query(`DROP FUNCTION intake_accept_batch(jsonb)`);
    await q.query(`ALTER TABLE audit_events ALTER COLUMN detail SET COMPRESSION default`);
    await q.query(`ALTER TABLE orders ALTER COLUMN request SET COMPRESSION default`);
    await q.query(`ALTER TABLE inbound_messages ALTER COLUMN raw SET COMPRESSION default`);
    await q.query(`DROP INDEX audit_events_occurred_brin`);
    await q.query(`CREATE INDEX audit_events_occurred_idx ON audit_events (occurred_at)`);
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
