import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../../src/persistence/embedded-postgres';
import { spawnAdapter, waitHealthy } from '../helpers/adapter-process';

function processesFor(dataDir: string): string[] {
  try {
    return execFileSync('pgrep', ['-af', dataDir], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.trim() && !l.includes('pgrep'));
  } catch {
    return [];
  }
}

describe('a first start stopped while the embedded database is being set up', () => {
  it('the next start sets it up again and becomes healthy', async () => {
    const dataRoot = mkdtempSync(join(tmpdir(), 'adapter-firststart-'));
    const pgDir = join(dataRoot, 'pg');
    const port = await freePort();
    const env = {
      HTTP_PORT: String(port),
      MLLP_PORT: '0',
      DATA_DIR: dataRoot,
      EMBEDDED_PG_DIR: pgDir,
    };

    // Ctrl-C during the first `npm start`, while initdb runs (PG_VERSION is written first).
    const first = spawnAdapter(env);
    const started = Date.now();
    while (!existsSync(join(pgDir, 'PG_VERSION'))) {
      if (Date.now() - started > 30_000) throw new Error(`initdb never began:\n${first.output()}`);
      await sleep(20);
    }
    first.child.kill('SIGTERM');
    await first.exited;
    // initdb, not in the adapter's process group's way, may still finish on its own.
    for (let i = 0; i < 300 && processesFor(pgDir).length > 0; i++) await sleep(100);
    expect(existsSync(`${pgDir}.credentials.json`)).toBe(false);

    // Before, every later start failed: "ENOENT ... pg.credentials.json".
    const second = spawnAdapter(env);
    try {
      await waitHealthy(`http://127.0.0.1:${port}`, 60_000, second);
      expect(existsSync(`${pgDir}.credentials.json`)).toBe(true);
      expect(existsSync(`${pgDir}.initialising`)).toBe(false);
    } finally {
      if (second.child.exitCode === null) second.child.kill('SIGTERM');
      await second.exited;
    }
    expect(second.child.exitCode).toBe(0);
    expect(processesFor(pgDir)).toEqual([]);
  }, 180_000);
});
