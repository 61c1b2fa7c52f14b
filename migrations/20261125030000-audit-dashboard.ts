import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The audit dashboard (/audit, issue #18): outbound documents per destination for the last
 * hour/day (by `created_at`) and results out per minute (by `delivered_at`) read a time range
 * of the outbox through an index instead of scanning it. Inbound messages per minute use
 * `inbound_messages_received_at_idx`, orders per state/source `orders_created_idx`, the
 * oldest waiting order per state `orders_state_created_idx`, errors the new partial `audit_events_errors_time_idx` (error events only: ingest inserts pay nothing).
 * The order list's "errors only" also takes orders whose upstream order failed.
 */
export class AuditDashboard20261125030000 implements MigrationInterface {
  name = 'AuditDashboard20261125030000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE INDEX outbox_created_idx ON outbox (created_at)`);
    await q.query(
      `CREATE INDEX outbox_delivered_idx ON outbox (delivered_at) WHERE delivered_at IS NOT NULL`,
    );
    // Errors of the last hour/day: partial, so that the ingest path (info events) pays nothing.
    await q.query(
      `CREATE INDEX audit_events_errors_time_idx ON audit_events (occurred_at) WHERE severity = 'error'`,
    );
    // "errors only" also finds orders whose upstream order failed (FAILED,
    // PREPROCESSING_FAILED, EXPIRED), without scanning the orders.
    await q.query(
      `CREATE INDEX orders_upstream_failed_idx ON orders (id)
        WHERE upstream_status IN ('FAILED', 'PREPROCESSING_FAILED', 'EXPIRED')`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX orders_upstream_failed_idx`);
    await q.query(`DROP INDEX audit_events_errors_time_idx`);
    await q.query(`DROP INDEX outbox_delivered_idx`);
    await q.query(`DROP INDEX outbox_created_idx`);
  }
}
