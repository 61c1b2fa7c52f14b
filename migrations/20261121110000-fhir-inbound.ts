import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * FHIR front door. `fhir_resources`: the ServiceRequest we serve per order (as received, with
 * our id, versionId and lastUpdated), plus where it came from when an EHR owns it (a
 * Subscription source). `fhir_subscriptions`: per Subscription, the last event number we
 * processed and when we last heard from it, so gaps can be detected and caught up.
 * `fhir_subscription_events`: every event number processed once, so a resent notification
 * changes nothing.
 */
export class FhirInbound20261121110000 implements MigrationInterface {
  name = 'FhirInbound20261121110000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE fhir_resources (
        resource_type text NOT NULL,
        id text NOT NULL,
        order_id uuid REFERENCES orders (id),
        sender text,
        version_id integer NOT NULL DEFAULT 1,
        last_updated timestamptz NOT NULL DEFAULT now(),
        source_url text,
        source_version text,
        resource jsonb NOT NULL,
        PRIMARY KEY (resource_type, id)
      )`);
    await q.query(`CREATE INDEX fhir_resources_order_idx ON fhir_resources (order_id)`);
    await q.query(`CREATE INDEX fhir_resources_source_idx ON fhir_resources (source_url)`);
    await q.query(`
      CREATE TABLE fhir_subscriptions (
        subscription_ref text PRIMARY KEY,
        topic text,
        status text,
        last_event_number bigint NOT NULL DEFAULT 0,
        handshake_at timestamptz,
        last_heartbeat_at timestamptz,
        last_notification_at timestamptz,
        last_event_at timestamptz,
        remote_id text,
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);
    await q.query(`
      CREATE TABLE fhir_subscription_events (
        subscription_ref text NOT NULL,
        event_number bigint NOT NULL,
        inbound_message_id uuid REFERENCES inbound_messages (id),
        processed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (subscription_ref, event_number)
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE fhir_subscription_events`);
    await q.query(`DROP TABLE fhir_subscriptions`);
    await q.query(`DROP TABLE fhir_resources`);
  }
}
