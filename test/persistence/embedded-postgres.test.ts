import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import {
  freePort,
  startEmbeddedPostgres,
  type RunningEmbeddedPostgres,
} from '../../src/persistence/embedded-postgres';

jest.setTimeout(120_000);

async function query<T extends Record<string, unknown>>(url: string, sql: string): Promise<T[]> {
  const client = new Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

/**
 * The embedded PostgreSQL on a fixed port, stopped like a crash (immediate shutdown) and
 * started again on the same port and data directory: what the database-restart suite
 * (test/fire/db-restart.test.ts) does to the adapter's database.
 */
describe('embedded PostgreSQL: fixed port, immediate stop, restart on the same data', () => {
  const root = mkdtempSync(join(tmpdir(), 'embedded-pg-test-'));
  let server: RunningEmbeddedPostgres | undefined;

  afterAll(async () => {
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it('listens where asked, quits at once on an immediate stop, recovers its committed data on the next start', async () => {
    const port = await freePort();
    const dataDir = join(root, 'pg');
    const lines: string[] = [];
    server = await startEmbeddedPostgres({ dataDir, port, log: (l) => lines.push(l) });
    expect(server.port).toBe(port);
    const url = server.url;
    expect(new URL(url).port).toBe(String(port));

    await query(url, `CREATE TABLE kept (id int PRIMARY KEY)`);
    await query(url, `INSERT INTO kept VALUES (1), (2)`);
    // A connection open at the moment of the stop is cut, as in a crash.
    const open = new Client({ connectionString: url });
    await open.connect();
    const cut = new Promise<Error>((resolve) => open.on('error', resolve));

    const first = server;
    server = undefined;
    await first.stop('immediate');
    expect((await cut).message).toMatch(/terminat|shutdown|administrator/i);
    await open.end().catch(() => undefined);
    await expect(query(url, 'SELECT 1')).rejects.toThrow(/ECONNREFUSED|connect/);

    lines.length = 0;
    server = await startEmbeddedPostgres({ dataDir, port, log: (l) => lines.push(l) });
    // Same port, same credentials: clients reconnect with the URL they had.
    expect(server.url).toBe(url);
    // An immediate stop writes no shutdown checkpoint: the start runs crash recovery.
    expect(lines.join('\n')).toMatch(/not properly shut down; automatic recovery in progress/);
    expect(await query<{ id: number }>(url, 'SELECT id FROM kept ORDER BY id')).toEqual([
      { id: 1 },
      { id: 2 },
    ]);

    // A fast stop (the default) shuts down cleanly: no recovery on the next start.
    const second = server;
    server = undefined;
    await second.stop();
    lines.length = 0;
    server = await startEmbeddedPostgres({ dataDir, port, log: (l) => lines.push(l) });
    expect(lines.join('\n')).not.toMatch(/automatic recovery/);
    expect(lines.join('\n')).toMatch(/database system was shut down/);
  });

  it('a start that is not ready in time leaves no server behind, and the next start works', async () => {
    const port = await freePort();
    const dataDir = join(root, 'pg-slow');
    // Initialised first, so that the timed-out start below is a plain start.
    const first = await startEmbeddedPostgres({ dataDir, port });
    await first.stop();
    await expect(startEmbeddedPostgres({ dataDir, port, readyTimeoutMs: 1 })).rejects.toThrow(
      /did not accept connections within 0 s/,
    );
    await expect(
      query(`postgres://postgres@127.0.0.1:${port}/postgres`, 'SELECT 1'),
    ).rejects.toThrow(/ECONNREFUSED/);
    const again = await startEmbeddedPostgres({ dataDir, port });
    try {
      expect(await query<{ one: number }>(again.url, 'SELECT 1 AS one')).toEqual([{ one: 1 }]);
    } finally {
      await again.stop();
    }
  });
});
