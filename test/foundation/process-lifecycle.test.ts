import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { MIGRATIONS } from '../../migrations';
import { freePort } from '../../src/persistence/embedded-postgres';
import { spawnAdapter, waitHealthy } from '../helpers/adapter-process';
import { createEmptyDatabase } from '../helpers/database';

const TOKENS = 'admin:lifecycle-admin-token-0001,sender:lifecycle-sender-token-001';

function postgresProcessesFor(dataDir: string): string[] {
  try {
    return execFileSync('pgrep', ['-af', `postgres -D ${dataDir}`], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.trim() && !l.includes('pgrep'));
  } catch {
    return [];
  }
}

describe('adapter process lifecycle', () => {
  let upstream: Server;
  let upstreamEnv: Record<string, string>;

  beforeAll(async () => {
    upstream = createServer((_, res) => {
      res.statusCode = 401;
      res.end();
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    upstreamEnv = {
      IMAGING_BASE_URL: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`,
      IMAGING_CLIENT_ID: 'c',
      IMAGING_CLIENT_SECRET: 's',
      IMAGING_ORGANIZATION_ID: 'o',
    };
  });
  afterAll(async () => {
    await new Promise((r) => upstream.close(r));
  });

  it('bad configuration exits non-zero with one clear line per problem and no stack trace', async () => {
    const proc = spawnAdapter({ HTTP_PORT: 'abc', MLLP_PORT: '99999', API_TOKENS: TOKENS });
    const { code } = await proc.exited;
    expect(code).not.toBe(0);
    const lines = proc.output().trim().split('\n');
    expect(lines).toEqual([
      expect.stringMatching(/^imaging-ai-adapter: HTTP_PORT: must be a port number \(got "abc"\)$/),
      expect.stringMatching(/^imaging-ai-adapter: MLLP_PORT: must be 0\.\.65535 \(got "99999"\)$/),
    ]);
  });

  it('an unreachable DATABASE_URL exits non-zero with one line naming it', async () => {
    // Port 1 (tcpmux): nothing listens there and no test binds it. A port from freePort() could
    // be taken by another test file's server meanwhile (seen in CI: "Connection terminated").
    const port = 1;
    const proc = spawnAdapter({
      ...upstreamEnv,
      DATABASE_URL: `postgres://adapter:pw@127.0.0.1:${port}/adapter`,
      API_TOKENS: TOKENS,
      LOG_LEVEL: 'silent',
    });
    const { code } = await proc.exited;
    expect(code).not.toBe(0);
    const out = proc.output().trim();
    expect(out.split('\n')).toHaveLength(1);
    expect(out).toMatch(
      new RegExp(
        `DATABASE_URL: cannot connect to postgres://adapter:\\*\\*\\*\\*@127\\.0\\.0\\.1:${port}/adapter: ECONNREFUSED`,
      ),
    );
    expect(out).not.toContain(':pw@');
  });

  it('two processes started at once on one empty database both become healthy; schema migrated once', async () => {
    const db = await createEmptyDatabase();
    const [p1, p2] = [await freePort(), await freePort()];
    const procs = [p1, p2].map((port) =>
      spawnAdapter({
        ...upstreamEnv,
        DATABASE_URL: db.url,
        HTTP_PORT: String(port),
        MLLP_PORT: '0',
        API_TOKENS: TOKENS,
        DATA_DIR: mkdtempSync(join(tmpdir(), 'adapter-')),
      }),
    );
    try {
      await Promise.all([
        waitHealthy(`http://127.0.0.1:${p1}`, 60_000, procs[0]),
        waitHealthy(`http://127.0.0.1:${p2}`, 60_000, procs[1]),
      ]);
      const c = new Client({ connectionString: db.url });
      await c.connect();
      const { rows } = await c.query('SELECT name FROM schema_migrations');
      await c.end();
      expect(rows).toHaveLength(MIGRATIONS.length);
    } finally {
      for (const p of procs) p.child.kill('SIGTERM');
      await Promise.all(procs.map((p) => p.exited));
      await db.drop();
    }
  });

  it('nothing configured (embedded PostgreSQL and sandbox): healthy within 30 s, tokens printed once, SIGINT leaves no postgres, a start after kill -9 works', async () => {
    const dataRoot = mkdtempSync(join(tmpdir(), 'adapter-embedded-'));
    const pgDir = join(dataRoot, 'pg');
    const port = await freePort();
    // only what keeps this test off other processes' ports and files
    const env = {
      HTTP_PORT: String(port),
      MLLP_PORT: '0',
      DATA_DIR: dataRoot,
      EMBEDDED_PG_DIR: pgDir,
    };
    const url = `http://127.0.0.1:${port}`;

    const first = spawnAdapter(env);
    expect(await waitHealthy(url, 30_000, first)).toBeLessThan(30_000);
    const health = (await (await fetch(`${url}/health`)).json()) as {
      checks: { upstream: { status: string; baseUrl?: string } };
    };
    expect(health.checks.upstream.status).toBe('up');
    const printed = /admin\s+(admin-\S+)/.exec(first.output());
    expect(printed).not.toBeNull();
    const metrics = await fetch(`${url}/metrics`, {
      headers: { authorization: `Bearer ${printed![1]}` },
    });
    expect(metrics.status).toBe(200);
    first.child.kill('SIGINT');
    expect((await first.exited).code).toBe(0);
    expect(postgresProcessesFor(pgDir)).toEqual([]);

    const second = spawnAdapter(env);
    await waitHealthy(url, 30_000, second);
    expect(second.output()).not.toMatch(/admin\s+admin-/); // generated tokens are shown once only
    second.child.kill('SIGKILL');
    await second.exited;
    await sleep(200);
    expect(postgresProcessesFor(pgDir)).toHaveLength(1); // the orphaned postmaster

    const third = spawnAdapter(env);
    await waitHealthy(url, 30_000, third);
    third.child.kill('SIGTERM');
    expect((await third.exited).code).toBe(0);
    expect(postgresProcessesFor(pgDir)).toEqual([]);
  }, 120_000);
});
