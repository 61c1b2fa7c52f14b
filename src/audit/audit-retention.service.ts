import type { DataSource } from 'typeorm';
import { AuditSessionStore } from '../auth/audit-session.store';

export const AUDIT_PRUNE_TASK = 'audit.prune';
/** Nightly, once per cluster (graphile-worker records the fired slot). */
export const AUDIT_PRUNE_CRON = '17 3 * * *';

export interface PruneResult {
  deleted: number;
  batches: number;
  cutoff: string;
  sessionsDeleted: number;
}

/**
 * Deletes audit events older than the retention period. Ids grow with time (identity), so
 * the newest expired id is found once through the occurred_at index and everything at or
 * below it is deleted in primary-key batches, each its own short transaction: row deletes
 * take no lock that blocks inserts, and no batch holds locks for long.
 */
export class AuditRetentionService {
  constructor(
    private readonly dataSource: DataSource,
    private readonly retentionDays: number,
    private readonly batchSize = 5000,
  ) {}

  async prune(now: Date = new Date()): Promise<PruneResult> {
    const cutoff = new Date(now.getTime() - this.retentionDays * 86_400_000);
    const top: Array<{ id: string | null }> = await this.dataSource.query(
      `SELECT max(id)::text AS id FROM audit_events WHERE occurred_at < $1`,
      [cutoff],
    );
    let deleted = 0;
    let batches = 0;
    const maxId = top[0]?.id;
    if (maxId) {
      for (;;) {
        const rows: Array<{ n: number }> = await this.dataSource.query(
          `WITH gone AS (
             DELETE FROM audit_events WHERE id IN (
               SELECT id FROM audit_events WHERE id <= $1::bigint AND occurred_at < $2 ORDER BY id LIMIT ${this.batchSize})
             RETURNING 1)
           SELECT count(*)::int AS n FROM gone`,
          [maxId, cutoff],
        );
        const n = rows[0]?.n ?? 0;
        deleted += n;
        batches += 1;
        if (n < this.batchSize) break;
      }
    }
    const sessionsDeleted = await new AuditSessionStore(this.dataSource).pruneExpired();
    return { deleted, batches, cutoff: cutoff.toISOString(), sessionsDeleted };
  }
}
