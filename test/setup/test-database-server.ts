import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'node:http';
import { Client } from 'pg';
import {
  startEmbeddedPostgres,
  type RunningEmbeddedPostgres,
} from '../../src/persistence/embedded-postgres';

/**
 * Which PostgreSQL the tests use, in this order: `DATABASE_URL` if set (CI: the machine's
 * server on 127.0.0.1:5432) → Testcontainers if a Docker engine answers within a few
 * seconds → an embedded PostgreSQL of the run's own (temp directory).
 */
export interface TestDatabaseServer {
  kind: 'database-url' | 'testcontainers' | 'embedded';
  /** A URL on the server whose database part is replaced per test database. */
  serverUrl: string;
  stop(): Promise<void>;
}

export async function provideTestDatabaseServer(): Promise<TestDatabaseServer> {
  const configured = process.env.DATABASE_URL;
  if (configured) {
    const client = new Client({ connectionString: configured, connectionTimeoutMillis: 5000 });
    try {
      await client.connect();
    } catch (error) {
      throw new Error(`DATABASE_URL is set but does not answer: ${(error as Error).message}`, {
        cause: error,
      });
    } finally {
      await client.end().catch(() => undefined);
    }
    return { kind: 'database-url', serverUrl: configured, stop: async () => undefined };
  }
  if (await dockerAnswers(3000)) {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:17-alpine').start();
    return {
      kind: 'testcontainers',
      serverUrl: container.getConnectionUri(),
      stop: async () => {
        await container.stop();
      },
    };
  }
  // A data directory of this run's own: two runs at once must not stop each other's server.
  const root = mkdtempSync(join(tmpdir(), 'adapter-test-pg-'));
  const embedded: RunningEmbeddedPostgres = await startEmbeddedPostgres({
    dataDir: join(root, 'pg'),
  });
  return {
    kind: 'embedded',
    serverUrl: embedded.adminUrl,
    stop: async () => {
      await embedded.stop();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/**
 * A Docker socket that accepts and never answers would hang Testcontainers forever:
 * ping it ourselves with a deadline first.
 */
function dockerAnswers(timeoutMs: number): Promise<boolean> {
  const socketPath = (process.env.DOCKER_HOST ?? 'unix:///var/run/docker.sock').replace(
    /^unix:\/\//,
    '',
  );
  if (!socketPath.startsWith('/') || !existsSync(socketPath)) return Promise.resolve(false);
  return new Promise((resolve) => {
    const req = request({ socketPath, path: '/_ping', timeout: timeoutMs }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('timeout', () => {
      req.destroy();
      resolve(false);
    });
    req.on('error', () => resolve(false));
    req.end();
  });
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}
