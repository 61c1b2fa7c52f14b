import type { DataSource } from 'typeorm';
import { withSchemaLock } from '../common/schema-lock';

export interface MigrationReport {
  applied: string[];
}

/**
 * Runs pending migrations under a session advisory lock, so replicas that start at once
 * migrate the schema exactly once: the first one migrates, the others wait for the lock
 * and then find nothing pending.
 */
export async function migrateUnderLock(
  dataSource: DataSource,
  url: string,
): Promise<MigrationReport> {
  return withSchemaLock(url, async () => {
    const applied = await dataSource.runMigrations({ transaction: 'each' });
    return { applied: applied.map((m) => m.name) };
  });
}

/** Reverts the newest migration, under the same lock. */
export async function revertLastMigration(dataSource: DataSource, url: string): Promise<void> {
  await withSchemaLock(url, () => dataSource.undoLastMigration({ transaction: 'each' }));
}
