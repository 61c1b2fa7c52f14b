import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
import { startTestAdapter, type TestAdapter } from './adapter';

type AdapterLogs = Parameters<typeof startTestAdapter>[1];

/** An adapter with one MLLP sender connected and a database client beside it. */
export interface MllpHarness {
  adapter: TestAdapter;
  mllp: MllpClient;
  db: PgClient;
  close(): Promise<void>;
}

/** Starts the adapter (jobs off unless `env` says otherwise), connects an MLLP sender and PostgreSQL. */
export async function startMllpHarness(
  env: Record<string, string> = {},
  logs?: AdapterLogs,
): Promise<MllpHarness> {
  const adapter = await startTestAdapter({ JOBS_ENABLED: 'false', ...env }, logs);
  const mllp = new MllpClient({
    host: '127.0.0.1',
    port: adapter.mllpPort,
    responseTimeoutMs: 10_000,
  });
  const db = new PgClient({ connectionString: adapter.db.url });
  await db.connect();
  return {
    adapter,
    mllp,
    db,
    async close() {
      await mllp.close();
      await db.end();
      await adapter.close();
    },
  };
}
