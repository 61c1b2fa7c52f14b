import { Client } from 'pg';
import type { DataSource } from 'typeorm';

/** Arbitrary but fixed: every replica takes the same advisory lock before migrating. */
const MIGRATION_LOCK_KEY = 7_470_301_121;

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
  return withMigrationLock(url, async () => {
    const applied = await dataSource.runMigrations({ transaction: 'each' });
    return { applied: applied.map((m) => m.name) };
  });
}

/** Reverts the newest migration, under the same lock. */
export async function revertLastMigration(dataSource: DataSource, url: string): Promise<void> {
  await withMigrationLock(url, () => dataSource.undoLastMigration({ transaction: 'each' }));
}

/** Serialises schema changes across replicas (ours and the job queue's). */
export async function withMigrationLock<T>(url: string, work: () => Promise<T>): Promise<T> {
  const client = new Client({
    connectionString: url,
    application_name: 'imaging-ai-adapter-migrate',
  });
  await client.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      return await work();
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
    }
  } finally {
    await client.end();
  }
}
