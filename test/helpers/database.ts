import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import type { DataSource } from 'typeorm';
import { createDataSource } from '../../src/persistence/data-source.factory';
import { withDatabase } from '../setup/test-database-server';

export interface TestDatabase {
  /** postgres:// URL of this test file's own, migrated database. */
  url: string;
  name: string;
  /** An initialised DataSource on it (closed by drop()). */
  dataSource: DataSource;
  drop(): Promise<void>;
}

/**
 * A fresh database for one test file, copied from the run's migrated template.
 * Call in beforeAll and `drop()` in afterAll.
 */
export async function createTestDatabase(): Promise<TestDatabase> {
  const serverUrl = process.env.TEST_DATABASE_SERVER_URL;
  const template = process.env.TEST_DATABASE_TEMPLATE;
  if (!serverUrl || !template)
    throw new Error('test database server not set up (jest globalSetup did not run)');
  const name = `itest_${randomBytes(6).toString('hex')}`;
  await adminQuery(serverUrl, `CREATE DATABASE ${name} TEMPLATE ${template}`);
  const url = withDatabase(serverUrl, name);
  const dataSource = createDataSource({ url, poolSize: 5, applicationName: 'jest' });
  await dataSource.initialize();
  return {
    url,
    name,
    dataSource,
    async drop() {
      if (dataSource.isInitialized) await dataSource.destroy();
      await adminQuery(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}

/** An empty database (no schema) for tests of migrations themselves. */
export async function createEmptyDatabase(): Promise<{
  url: string;
  name: string;
  drop(): Promise<void>;
}> {
  const serverUrl = process.env.TEST_DATABASE_SERVER_URL;
  if (!serverUrl) throw new Error('test database server not set up (jest globalSetup did not run)');
  const name = `itest_${randomBytes(6).toString('hex')}`;
  await adminQuery(serverUrl, `CREATE DATABASE ${name}`);
  return {
    url: withDatabase(serverUrl, name),
    name,
    drop: () => adminQuery(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
  };
}

async function adminQuery(serverUrl: string, sql: string): Promise<void> {
  const admin = new Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(sql);
  } finally {
    await admin.end();
  }
}
