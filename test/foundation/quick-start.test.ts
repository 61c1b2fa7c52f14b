import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../../src/persistence/embedded-postgres';
import { spawnAdapter, waitHealthy } from '../helpers/adapter-process';

/**
 * Issue #18 item 1: the README's quick start reaches an end state. The adapter runs as
 * `npm start` does with nothing configured but the demo site file (embedded PostgreSQL, the
 * in-process sandbox), on ports of the test's own; the README's "by hand" block runs as
 * written (only the port and the token filled in); both orders must reach `delivered`.
 */
describe('README quick start', () => {
  const readme = readFileSync(join(__dirname, '../../README.md'), 'utf8');
  const dataRoot = mkdtempSync(join(tmpdir(), 'quick-start-'));
  afterAll(() => rmSync(dataRoot, { recursive: true, force: true }));

  it('names npm run demo and the commands it runs', () => {
    const quickStart = readme.slice(
      readme.indexOf('## Quick start'),
      readme.indexOf('## Configuration'),
    );
    expect(quickStart).toContain('CONFIG_FILE=scripts/demo-site.yaml npm start');
    expect(quickStart).toContain('DEMO_TOKEN=<admin token> npm run demo');
  });

  it('the by-hand block sends one HL7 and one FHIR order, and both are delivered', async () => {
    const block = /\*\*The same by hand\*\*[^`]*```sh\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block).toBeDefined();
    const [http, mllp] = [await freePort(), await freePort()];
    const proc = spawnAdapter({
      HTTP_PORT: String(http),
      MLLP_PORT: String(mllp),
      DATA_DIR: dataRoot,
      EMBEDDED_PG_DIR: join(dataRoot, 'pg'),
      CONFIG_FILE: 'scripts/demo-site.yaml',
    });
    const url = `http://127.0.0.1:${http}`;
    try {
      await waitHealthy(url, 60_000, proc);
      const token = /admin\s+(admin-\S+)/.exec(proc.output())![1]!;
      const script = block!
        .replace(/<admin token>/g, token)
        .replace(/localhost:8080/g, `127.0.0.1:${http}`);
      const out = execFileSync('bash', ['-e', '-c', script], {
        env: { ...process.env, DEMO_URL: url, DEMO_MLLP_PORT: String(mllp), DATABASE_URL: '' },
        encoding: 'utf8',
        timeout: 120_000,
      });
      expect(out).toContain('MSA|AA|QS-MSG-1');
      expect(out).toMatch(/"resourceType":"ServiceRequest"/);
      expect(out.match(/STOW-RS .* HTTP 200/g)).toHaveLength(2);

      const stateOf = async (accession: string) => {
        const res = await fetch(`${url}/api/audit/orders?accession=${accession}`, {
          headers: { authorization: `Bearer ${token}` },
        });
        const body = (await res.json()) as { items: Array<{ state: string }> };
        return body.items[0]?.state;
      };
      const started = Date.now();
      let states: Array<string | undefined> = [];
      while (Date.now() - started < 150_000) {
        states = [await stateOf('QS-ACC-1'), await stateOf('QS-ACC-2')];
        if (states.every((s) => s === 'delivered' || s === 'failed' || s === 'cancelled')) break;
        await sleep(2_000);
      }
      expect(states).toEqual(['delivered', 'delivered']);
    } finally {
      proc.child.kill('SIGINT');
      await proc.exited;
    }
  }, 300_000);
});
