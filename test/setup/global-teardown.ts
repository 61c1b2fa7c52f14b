import { Client } from 'pg';

export default async function globalTeardown(): Promise<void> {
  const serverUrl = process.env.TEST_DATABASE_SERVER_URL;
  const template = process.env.TEST_DATABASE_TEMPLATE;
  if (serverUrl && template) {
    const admin = new Client({ connectionString: serverUrl });
    try {
      await admin.connect();
      await admin.query(`DROP DATABASE IF EXISTS ${template} WITH (FORCE)`);
    } catch (error) {
      // Leaving a template behind is harmless; failing the run for it is not.
      console.warn(`test teardown: could not drop ${template}: ${(error as Error).message}`);
    } finally {
      await admin.end().catch(() => undefined);
    }
  }
  await globalThis.__testDatabaseServer?.stop();
}
