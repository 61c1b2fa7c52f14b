import type { EntityManager } from 'typeorm';
import type { OrderRow } from './order.repository';
import { RepositoryBase } from './repository-base';

/**
 * The upload lease on `orders` (`lease_owner`, `lease_until`): one worker uploads an order's
 * study at a time across replicas; a lapsed lease is taken over.
 */
export class UploadLeaseRepository extends RepositoryBase {
  /** Extends our lease (no effect once another worker holds it). */
  async renew(
    orderId: string,
    workerId: string,
    leaseMs: number,
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET lease_until = now() + $3 * interval '1 millisecond' WHERE id = $1 AND lease_owner = $2`,
      [orderId, workerId, leaseMs],
    );
  }

  /** Serializes claims per study across replicas until the transaction of `manager` ends. */
  async lockStudy(studyInstanceUid: string, manager: EntityManager): Promise<void> {
    await manager.query(`SELECT pg_advisory_xact_lock(hashtext('study-upload:' || $1))`, [
      studyInstanceUid,
    ]);
  }

  /** Takes the lease of an order ready to upload (or resumes ours / a lapsed one): the row, or undefined. */
  async claim(
    orderId: string,
    workerId: string,
    leaseMs: number,
    manager?: EntityManager,
  ): Promise<OrderRow | undefined> {
    const [rows] = (await this.db(manager).query(
      `UPDATE orders SET lease_owner = $2, lease_until = now() + $3 * interval '1 millisecond'
          WHERE id = $1 AND state IN ('study-ready', 'uploading') AND cancel_requested_at IS NULL
            AND (lease_until IS NULL OR lease_until < now() OR lease_owner = $2)
          RETURNING *`,
      [orderId, workerId, leaseMs],
    )) as [OrderRow[], number];
    return rows[0];
  }

  /** Gives our lease back (no effect once another worker holds it). */
  async release(orderId: string, workerId: string, manager?: EntityManager): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2`,
      [orderId, workerId],
    );
  }

  /** Clears the lease whoever holds it. */
  async clear(orderId: string, manager?: EntityManager): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET lease_owner = NULL, lease_until = NULL WHERE id = $1`,
      [orderId],
    );
  }

  /**
   * Other orders of the same study uploading now (live lease) or completed less than
   * `windowMs` ago.
   */
  async recentUploadsOfStudy(
    studyInstanceUid: string,
    orderId: string,
    windowMs: number,
    manager?: EntityManager,
  ): Promise<Array<{ id: string; upload_completed_at: Date | null }>> {
    return this.db(manager).query(
      `SELECT id, upload_completed_at FROM orders
        WHERE study_instance_uid = $1 AND id <> $2
          AND ((state = 'uploading' AND lease_until > now())
               OR upload_completed_at > now() - $3 * interval '1 millisecond')`,
      [studyInstanceUid, orderId, windowMs],
    );
  }

  /**
   * Uploads whose lease lapsed (a killed worker's), 500 at a time. An upload whose run
   * released its lease after a transient failure and whose job waits for its next try
   * (unlocked, attempts left, or still in the job outbox) is not one: enqueued again, its job
   * ran at once with its attempts reset, so every minute's sweep retried an upstream in
   * trouble instead of graphile-worker's back-off, and the job never ran out of attempts. Nor
   * is one whose job used every attempt (unlocked, out of attempts): it ends the order
   * (the sweep's not-uploaded); enqueued again, its back-off started over and a study the
   * upstream kept refusing was retried forever, no one told. Nor is one whose job a live
   * worker pool (heartbeat row) is running: its run releases the lease before the job is marked
   * failed, and a sweep in between enqueued a second job under the key (graphile-worker clears
   * the running one's key), so the upload ran twice and the exhausted job was no longer found
   * by its key (red CI of lifecycle-ends' not-uploaded case). A killed pool's job is unlocked,
   * or its heartbeat row deleted, within JOB_WORKER_DEAD_AFTER_SECONDS.
   */
  async lapsed(manager?: EntityManager): Promise<Array<{ id: string }>> {
    return this.db(manager).query(`SELECT o.id FROM orders o WHERE ${LAPSED} LIMIT 500`);
  }

  /**
   * Whether the order's upload lease is still lapsed (as `lapsed` reads it): the sweep's second
   * look, under the order's row lock, before it enqueues the upload again.
   */
  async isLapsed(orderId: string, manager?: EntityManager): Promise<boolean> {
    const rows: Array<{ id: string }> = await this.db(manager).query(
      `SELECT o.id FROM orders o WHERE o.id = $1 AND ${LAPSED}`,
      [orderId],
    );
    return rows.length > 0;
  }
}

/** An upload whose lease lapsed with no job to resume it (`lapsed`), of the order `o`. */
const LAPSED = `o.state = 'uploading' AND (o.lease_until IS NULL OR o.lease_until < now())
          AND NOT EXISTS (SELECT 1 FROM graphile_worker._private_jobs j
                           WHERE j.key = 'upload:' || o.id::text
                             AND (j.locked_by IS NULL
                                  OR EXISTS (SELECT 1 FROM job_worker_heartbeats h
                                              WHERE h.worker_id = j.locked_by)))
          AND NOT EXISTS (SELECT 1 FROM job_outbox x WHERE x.job_key = 'upload:' || o.id::text)`;
