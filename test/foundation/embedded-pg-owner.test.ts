import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../src/persistence/embedded-postgres';
import { spawnAdapter, waitHealthy } from '../helpers/adapter-process';

function postgresProcessesFor(dataDir: string): string[] {
  try {
    return execFileSync('pgrep', ['-af', `postgres -D ${dataDir}`], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.trim() && !l.includes('pgrep'));
  } catch {
    return [];
  }
}

describe('embedded PostgreSQL: a second start on the same directory', () => {
  it('is refused with one line while the first adapter runs, the first keeps its database; after a kill -9 it takes over', async () => {
    const dataRoot = mkdtempSync(join(tmpdir(), 'adapter-owner-'));
    const pgDir = join(dataRoot, 'pg');
    const shared = { DATA_DIR: dataRoot, EMBEDDED_PG_DIR: pgDir, MLLP_PORT: '0' };
    const [port1, port2] = [await freePort(), await freePort()];
    const url1 = `http://127.0.0.1:${port1}`;
    const first = spawnAdapter({ ...shared, HTTP_PORT: String(port1) });
    try {
      await waitHealthy(url1, 60_000, first);
      const serverBefore = postgresProcessesFor(pgDir);
      expect(serverBefore).toHaveLength(1);

      // `npm start` typed a second time (another terminal, a service manager's restart racing
      // a manual start): before, it took the running server for one a `kill -9` left, stopped
      // it and started its own; the first adapter's database stayed down for good.
      const second = spawnAdapter({ ...shared, HTTP_PORT: String(port2) });
      const timer = setTimeout(() => second.child.kill('SIGKILL'), 60_000);
      const { code } = await second.exited;
      clearTimeout(timer);
      expect(code).toBe(2);
      const lines = second.output().trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(
        new RegExp(
          `^imaging-ai-adapter: embedded PostgreSQL: ${pgDir} is in use by a running adapter \\(pid ${first.child.pid}, its PostgreSQL pid \\d+\\); stop it first, or give this one its own EMBEDDED_PG_DIR or a DATABASE_URL$`,
        ),
      );
      expect(postgresProcessesFor(pgDir)).toEqual(serverBefore);
      const health = await fetch(`${url1}/health`);
      expect(health.status).toBe(200);

      // A kill -9 leaves the server behind, now without its adapter: the next start stops it.
      first.child.kill('SIGKILL');
      await first.exited;
      const third = spawnAdapter({ ...shared, HTTP_PORT: String(port2) });
      await waitHealthy(`http://127.0.0.1:${port2}`, 60_000, third);
      expect(postgresProcessesFor(pgDir)).toHaveLength(1);
      third.child.kill('SIGTERM');
      expect((await third.exited).code).toBe(0);
      expect(postgresProcessesFor(pgDir)).toEqual([]);
    } finally {
      if (first.child.exitCode === null) first.child.kill('SIGTERM');
      await first.exited;
    }
  }, 240_000);
});
