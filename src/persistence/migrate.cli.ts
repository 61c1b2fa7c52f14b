import { ConfigError, loadConfig } from '../config/app-config';
import { createDataSource } from './data-source.factory';
import { startEmbeddedPostgres } from './embedded-postgres';
import { migrateUnderLock, revertLastMigration } from './migrator';

/** `npm run migration:run` / `npm run migration:revert` (against DATABASE_URL, or the embedded database). */
async function main(): Promise<void> {
  const direction = process.argv[2] ?? 'up';
  if (direction !== 'up' && direction !== 'down') throw new Error(`usage: migrate.cli.ts up|down`);
  const config = loadConfig();
  const embedded = config.DATABASE_URL
    ? undefined
    : await startEmbeddedPostgres({ dataDir: config.EMBEDDED_PG_DIR });
  const url = config.DATABASE_URL ?? embedded!.url;
  const dataSource = createDataSource({ url, poolSize: 2 });
  try {
    await dataSource.initialize();
    if (direction === 'up') {
      const report = await migrateUnderLock(dataSource, url);
      console.log(
        `migrations: applied ${report.applied.length}${report.applied.length ? `: ${report.applied.join(', ')}` : ''}`,
      );
    } else {
      await revertLastMigration(dataSource, url);
      console.log('migrations: reverted the newest migration');
    }
  } finally {
    if (dataSource.isInitialized) await dataSource.destroy();
    await embedded?.stop();
  }
}

main().catch((error: unknown) => {
  if (error instanceof ConfigError) {
    for (const p of error.problems) console.error(`config error: ${p}`);
  } else {
    console.error(`migration failed: ${(error as Error).message}`);
  }
  process.exit(1);
});
