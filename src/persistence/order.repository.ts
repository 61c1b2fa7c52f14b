import type { DataSource, EntityManager } from 'typeorm';
import type { OrderRequest } from '../domain/order-request';
import type { QcBypassDecision } from '../orders/order-events';

/** One `orders` row as the lifecycle reads it. */
export interface OrderRow {
  id: string;
  source: string;
  sender: string | null;
  state: string;
  upstream_order_id: string | null;
  upstream_status: string | null;
  upstream_batch_id: string | null;
  accession_number: string | null;
  patient_id: string | null;
  placer_group_number: string | null;
  study_instance_uid: string | null;
  request: OrderRequest;
  cancel_requested_at: Date | null;
  cancel_reason: string | null;
  place_attempted_at: Date | null;
  study_deadline_at: Date | null;
  package_path: string | null;
  upload_completed_at: Date | null;
  lease_owner: string | null;
  lease_until: Date | null;
  qc_bypass: QcBypassDecision | null;
  documents_fetched_for: string | null;
}

/**
 * The `orders` table for the order use cases. Every method runs on `manager` when given (inside
 * the caller's transaction), else on its own connection from the pool.
 */
export class OrderRepository {
  constructor(private readonly dataSource: DataSource) {}

  private db(manager?: EntityManager): EntityManager {
    return manager ?? this.dataSource.manager;
  }

  /** The first attempt to place the order upstream (a retry looks for its order first). */
  async markPlaceAttempted(orderId: string, manager?: EntityManager): Promise<void> {
    await this.db(manager).query(`UPDATE orders SET place_attempted_at = now() WHERE id = $1`, [
      orderId,
    ]);
  }

  /** Of `ids`, the upstream order ids other orders than `orderId` already hold. */
  async upstreamOrderIdsHeldElsewhere(
    ids: string[],
    orderId: string,
    manager?: EntityManager,
  ): Promise<string[]> {
    const rows: Array<{ upstream_order_id: string }> = await this.db(manager).query(
      `SELECT upstream_order_id FROM orders WHERE upstream_order_id = ANY($1::text[]) AND id <> $2`,
      [ids, orderId],
    );
    return rows.map((r) => r.upstream_order_id);
  }

  async setLastError(orderId: string, reason: string, manager?: EntityManager): Promise<void> {
    await this.db(manager).query(`UPDATE orders SET last_error = $2 WHERE id = $1`, [
      orderId,
      reason,
    ]);
  }

  async setPackagePath(orderId: string, packagePath: string, manager?: EntityManager) {
    await this.db(manager).query(`UPDATE orders SET package_path = $2 WHERE id = $1`, [
      orderId,
      packagePath,
    ]);
  }

  /** Remembers an upstream status without a state change. */
  async recordUpstreamStatus(
    orderId: string,
    status: string,
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET upstream_status = $2, upstream_status_at = now() WHERE id = $1`,
      [orderId, status],
    );
  }

  async setDocumentsFetchedFor(
    orderId: string,
    storedAs: string,
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(`UPDATE orders SET documents_fetched_for = $2 WHERE id = $1`, [
      orderId,
      storedAs,
    ]);
  }

  /** The members of an upstream batch, oldest first. */
  async idsOfBatch(batchId: string, manager?: EntityManager): Promise<Array<{ id: string }>> {
    return this.db(manager).query(
      `SELECT id FROM orders WHERE upstream_batch_id = $1 ORDER BY created_at`,
      [batchId],
    );
  }

  /** Our REST API's cancel request (kept from the first request; the reason is the latest). */
  async requestCancel(orderId: string, reason: string, manager?: EntityManager): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET cancel_requested_at = coalesce(cancel_requested_at, now()), cancel_reason = $2,
                updated_at = now(), version = version + 1 WHERE id = $1`,
      [orderId, reason],
    );
  }

  async setQcBypass(
    orderId: string,
    value: QcBypassDecision,
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET qc_bypass = $2::jsonb, updated_at = now(), version = version + 1 WHERE id = $1`,
      [orderId, JSON.stringify(value)],
    );
  }

  /** Orders waiting for a study whose deadline has passed (500 at a time). */
  async pastStudyDeadline(manager?: EntityManager): Promise<Array<{ id: string }>> {
    return this.db(manager).query(
      `SELECT id FROM orders WHERE state IN ('placed', 'study-ready') AND study_deadline_at < now() LIMIT 500`,
    );
  }

  /** Orders whose upstream status has not changed for longer than `stuckMs` (500 at a time). */
  async stuckUpstream(
    stuckMs: number,
    manager?: EntityManager,
  ): Promise<Array<{ id: string; upstream_status: string }>> {
    return this.db(manager).query(
      `SELECT id, upstream_status FROM orders WHERE state IN ('processing', 'qc-hold')
          AND upstream_status_at < now() - $1 * interval '1 millisecond' LIMIT 500`,
      [stuckMs],
    );
  }
}
