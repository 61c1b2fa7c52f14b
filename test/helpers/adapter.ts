import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Writable } from 'node:stream';
import pino from 'pino';
import { startAdapter, type RunningAdapter } from '../../src/bootstrap';
import { createTestDatabase, type TestDatabase } from './database';

/** Known bearer tokens of the test adapter, one per role. */
export const TEST_TOKENS = {
  sender: 'sender-token-0123456789abcdef',
  analyst: 'analyst-token-0123456789abcdef',
  admin: 'admin-token-0123456789abcdef',
} as const;

export interface TestAdapter extends RunningAdapter {
  db: TestDatabase;
  dataDir: string;
  close(): Promise<void>;
}

/**
 * The whole adapter in-process on its own test database, random HTTP and MLLP ports, and
 * (unless IMAGING_BASE_URL is given) the in-process sandbox upstream.
 */
export async function startTestAdapter(
  env: Record<string, string> = {},
  /** Where the adapter's log lines go (JSON lines at `level`), for tests that read them. */
  logs?: { sink: Writable; level?: string },
): Promise<TestAdapter> {
  const db = await createTestDatabase();
  const dataDir = mkdtempSync(join(tmpdir(), 'adapter-test-'));
  let adapter: RunningAdapter;
  try {
    adapter = await startAdapter({
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: db.url,
        HTTP_PORT: '0',
        HTTP_HOST: '127.0.0.1',
        MLLP_PORT: '0',
        MLLP_HOST: '127.0.0.1',
        DATA_DIR: dataDir,
        POLL_INTERVAL_SECONDS: '300',
        API_TOKENS: Object.entries(TEST_TOKENS)
          .map(([role, token]) => `${role}:${token}`)
          .join(','),
        ...env,
      },
      logger: logs
        ? pino({ level: logs.level ?? 'info' }, logs.sink)
        : pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }),
      announce: () => undefined,
    });
  } catch (error) {
    await db.drop();
    throw error;
  }
  return {
    ...adapter,
    db,
    dataDir,
    async close() {
      await adapter.close();
      await db.drop();
    },
  };
}
