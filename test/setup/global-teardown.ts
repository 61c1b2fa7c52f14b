import { Client } from 'pg';

export default async function globalTeardown(): Promise<void> {
  const serverUrl = process.env.TEST_DATABASE_SERVER_URL;
  const template = process.env.TEST_DATABASE_TEMPLATE;
  if (serverUrl && template) {
    const admin = new Client({ connectionString: serverUrl });
    await admin.connect();
    try {
      await admin.query(`DROP DATABASE IF EXISTS ${template} WITH (FORCE)`);
    } finally {
      await admin.end();
    }
  }
  await globalThis.__testDatabaseServer?.stop();
}
