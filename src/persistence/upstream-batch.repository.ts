import type { EntityManager } from 'typeorm';
import { RepositoryBase } from './repository-base';
import { pgJson } from '../common/pg-safe';

/**
 * `upstream_batches`: one row per placer group (ORC-4) or FHIR requisition, the upstream batch
 * its orders join, and the batch's aggregated report.
 */
export class UpstreamBatchRepository extends RepositoryBase {
  async findByGroup(
    sender: string,
    placerGroupNumber: string | null,
    manager?: EntityManager,
  ): Promise<{ batch_id: string | null; products: string[] } | undefined> {
    const rows: Array<{ batch_id: string | null; products: string[] }> = await this.db(
      manager,
    ).query(
      `SELECT batch_id, products FROM upstream_batches WHERE sender = $1 AND placer_group_number = $2`,
      [sender, placerGroupNumber],
    );
    return rows[0];
  }

  /** The group's row, created if absent (the first member placed). */
  async insertIfAbsent(
    sender: string,
    placerGroupNumber: string,
    products: string[],
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `INSERT INTO upstream_batches (sender, placer_group_number, products) VALUES ($1, $2, $3::jsonb)
         ON CONFLICT DO NOTHING`,
      [sender, placerGroupNumber, pgJson(products)],
    );
  }

  /** Locks the group's row until the transaction ends; its upstream batch id if created. */
  async lockBatchId(
    sender: string,
    placerGroupNumber: string,
    manager: EntityManager,
  ): Promise<string | null | undefined> {
    const rows: Array<{ batch_id: string | null }> = await manager.query(
      `SELECT batch_id FROM upstream_batches WHERE sender = $1 AND placer_group_number = $2 FOR UPDATE`,
      [sender, placerGroupNumber],
    );
    return rows[0]?.batch_id;
  }

  async setBatchId(
    sender: string,
    placerGroupNumber: string,
    batchId: string,
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `UPDATE upstream_batches SET batch_id = $3 WHERE sender = $1 AND placer_group_number = $2`,
      [sender, placerGroupNumber, batchId],
    );
  }

  /**
   * Members of the batch not yet ended. Every order of the placer group counts, placed or not
   * yet.
   */
  async openMemberCount(batchId: string, manager?: EntityManager): Promise<number> {
    const rows: Array<{ open: string }> = await this.db(manager).query(
      `SELECT count(*) FILTER (WHERE o.state NOT IN ('delivered', 'failed', 'cancelled'))::int AS open
         FROM upstream_batches b
         JOIN orders o ON coalesce(o.sender, '') = b.sender AND o.placer_group_number = b.placer_group_number
        WHERE b.batch_id = $1`,
      [batchId],
    );
    return Number(rows[0]?.open ?? 1);
  }

  async findByBatchId(
    batchId: string,
    manager?: EntityManager,
  ): Promise<{ sender: string; placer_group_number: string; report_fetched_at: Date } | undefined> {
    const batches: Array<{ sender: string; placer_group_number: string; report_fetched_at: Date }> =
      await this.db(manager).query(
        `SELECT sender, placer_group_number, report_fetched_at FROM upstream_batches WHERE batch_id = $1`,
        [batchId],
      );
    return batches[0];
  }

  async storeReport(
    batchId: string,
    body: Buffer,
    contentType: string,
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `UPDATE upstream_batches SET report = $2, report_content_type = $3, report_fetched_at = now() WHERE batch_id = $1`,
      [batchId, body, contentType],
    );
  }
}
