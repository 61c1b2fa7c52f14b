import { Client } from 'pg';
import { createDataSource } from '../../src/persistence/data-source.factory';
import { migrateUnderLock } from '../../src/persistence/migrator';
import {
  provideTestDatabaseServer,
  withDatabase,
  type TestDatabaseServer,
} from './test-database-server';

declare global {
  var __testDatabaseServer: TestDatabaseServer | undefined;
}

/**
 * Provides a real PostgreSQL for the whole run and a migrated template database, so each
 * test file gets its own database (CREATE DATABASE … TEMPLATE) in milliseconds and files
 * run in parallel.
 */
export default async function globalSetup(): Promise<void> {
  const server = await provideTestDatabaseServer();
  globalThis.__testDatabaseServer = server;
  const template = `itest_tpl_${process.pid}_${Date.now().toString(36)}`;
  const admin = new Client({ connectionString: server.serverUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${template}`);
  } finally {
    await admin.end();
  }
  const url = withDatabase(server.serverUrl, template);
  const dataSource = createDataSource({ url, poolSize: 2 });
  await dataSource.initialize();
  try {
    await migrateUnderLock(dataSource, url);
  } finally {
    await dataSource.destroy();
  }
  process.env.TEST_DATABASE_SERVER_URL = server.serverUrl;
  process.env.TEST_DATABASE_TEMPLATE = template;
  process.env.TEST_DATABASE_KIND = server.kind;
}
