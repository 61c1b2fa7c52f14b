import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * First schema: orders, inbound messages (raw bytes kept, rejected ones included), audit
 * events and the outbox, with the indexes later lookups need.
 */
export class InitialSchema20261121090000 implements MigrationInterface {
  name = 'InitialSchema20261121090000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE inbound_messages (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        received_at timestamptz NOT NULL DEFAULT now(),
        transport text NOT NULL,
        sender text,
        remote_address text,
        message_type text,
        message_control_id text,
        idempotency_key text,
        content_type text,
        raw bytea NOT NULL,
        outcome text NOT NULL,
        response_code text,
        response bytea,
        response_content_type text,
        error jsonb,
        quirks jsonb NOT NULL DEFAULT '[]'::jsonb,
        CONSTRAINT inbound_messages_outcome_chk CHECK (outcome IN ('accepted', 'rejected', 'error', 'duplicate'))
      )`);
    // A duplicate (same sender + MSH-10, or same FHIR identifier) is answered from the row
    // that accepted it; rejected inputs are kept but never block a corrected resend.
    await q.query(
      `CREATE UNIQUE INDEX inbound_messages_idempotency_uq ON inbound_messages (idempotency_key) WHERE outcome = 'accepted'`,
    );
    await q.query(
      `CREATE INDEX inbound_messages_control_id_idx ON inbound_messages (message_control_id)`,
    );
    await q.query(
      `CREATE INDEX inbound_messages_received_at_idx ON inbound_messages (received_at)`,
    );

    await q.query(`
      CREATE TABLE orders (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        version integer NOT NULL DEFAULT 1,
        source text NOT NULL,
        sender text,
        inbound_message_id uuid REFERENCES inbound_messages (id),
        state text NOT NULL,
        upstream_order_id text,
        upstream_status text,
        upstream_batch_id text,
        accession_number text,
        patient_id text,
        placer_order_number text,
        filler_order_number text,
        placer_group_number text,
        study_instance_uid text,
        request jsonb NOT NULL,
        mapping_version text,
        last_error text,
        CONSTRAINT orders_source_chk CHECK (source IN ('hl7v2', 'fhir', 'api'))
      )`);
    await q.query(`CREATE UNIQUE INDEX orders_upstream_order_id_uq ON orders (upstream_order_id)`);
    await q.query(`CREATE INDEX orders_accession_idx ON orders (accession_number)`);
    await q.query(`CREATE INDEX orders_patient_id_idx ON orders (patient_id)`);
    await q.query(`CREATE INDEX orders_placer_idx ON orders (placer_order_number)`);
    await q.query(`CREATE INDEX orders_filler_idx ON orders (filler_order_number)`);
    await q.query(`CREATE INDEX orders_study_uid_idx ON orders (study_instance_uid)`);
    await q.query(`CREATE INDEX orders_state_idx ON orders (state, updated_at)`);
    await q.query(`CREATE INDEX orders_created_at_idx ON orders (created_at)`);

    await q.query(`
      CREATE TABLE audit_events (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        occurred_at timestamptz NOT NULL DEFAULT now(),
        order_id uuid,
        inbound_message_id uuid,
        kind text NOT NULL,
        severity text NOT NULL DEFAULT 'info',
        actor text,
        summary text NOT NULL,
        detail jsonb NOT NULL DEFAULT '{}'::jsonb,
        CONSTRAINT audit_events_severity_chk CHECK (severity IN ('info', 'warning', 'error'))
      )`);
    await q.query(`CREATE INDEX audit_events_order_idx ON audit_events (order_id, id)`);
    await q.query(`CREATE INDEX audit_events_message_idx ON audit_events (inbound_message_id, id)`);
    await q.query(`CREATE INDEX audit_events_occurred_idx ON audit_events (occurred_at)`);
    await q.query(
      `CREATE INDEX audit_events_errors_idx ON audit_events (id) WHERE severity = 'error'`,
    );

    await q.query(`
      CREATE TABLE outbox (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        order_id uuid REFERENCES orders (id),
        destination text NOT NULL,
        kind text NOT NULL,
        dedupe_key text NOT NULL,
        payload jsonb NOT NULL,
        status text NOT NULL DEFAULT 'pending',
        attempts integer NOT NULL DEFAULT 0,
        next_attempt_at timestamptz NOT NULL DEFAULT now(),
        last_error text,
        delivered_at timestamptz,
        CONSTRAINT outbox_status_chk CHECK (status IN ('pending', 'delivered', 'dead'))
      )`);
    await q.query(`CREATE UNIQUE INDEX outbox_dedupe_uq ON outbox (destination, dedupe_key)`);
    await q.query(
      `CREATE INDEX outbox_due_idx ON outbox (next_attempt_at) WHERE status = 'pending'`,
    );
    await q.query(`CREATE INDEX outbox_order_idx ON outbox (order_id, destination, id)`);
    await q.query(`CREATE INDEX outbox_dead_idx ON outbox (updated_at) WHERE status = 'dead'`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE outbox`);
    await q.query(`DROP TABLE audit_events`);
    await q.query(`DROP TABLE orders`);
    await q.query(`DROP TABLE inbound_messages`);
  }
}
