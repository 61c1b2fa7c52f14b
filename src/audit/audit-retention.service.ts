import type { DataSource } from 'typeorm';
import { AuditEventRepository } from '../persistence/audit-event.repository';
import { AuditSessionRepository } from '../persistence/audit-session.repository';

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
 * below it is walked in primary-key batches, each its own short transaction: row deletes
 * take no lock that blocks inserts, and no batch holds locks for long. The events of an
 * order that has not ended (and of the messages that touched it) are kept until a prune
 * after its end: its timeline, lineage and MSH-10 search are read from them.
 */
export class AuditRetentionService {
  constructor(
    private readonly dataSource: DataSource,
    private readonly retentionDays: number,
    private readonly batchSize = 5000,
  ) {}

  async prune(now: Date = new Date()): Promise<PruneResult> {
    const cutoff = new Date(now.getTime() - this.retentionDays * 86_400_000);
    const events = new AuditEventRepository(this.dataSource);
    let deleted = 0;
    let batches = 0;
    const maxId = await events.newestIdBefore(cutoff);
    let afterId = '0';
    if (maxId) {
      for (;;) {
        const batch = await events.deleteBatch(afterId, maxId, cutoff, this.batchSize);
        deleted += batch.deleted;
        batches += 1;
        if (batch.scanned < this.batchSize || batch.lastId === null) break;
        afterId = batch.lastId;
      }
    }
    const sessionsDeleted = await new AuditSessionRepository(this.dataSource).pruneExpired();
    return { deleted, batches, cutoff: cutoff.toISOString(), sessionsDeleted };
  }
}
