import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..');

/** Runs `npm run sandbox`'s command line (without npm) with the given environment. */
function runSandbox(env: Record<string, string>): {
  child: ReturnType<typeof spawn>;
  output: () => string;
  exit: Promise<number | null>;
} {
  const child = spawn(
    process.execPath,
    ['scripts/with-node.cjs', '-r', '@swc-node/register', 'src/sandbox/main.ts'],
    {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => out, exit };
}

describe('sandbox entry point (src/sandbox/main.ts)', () => {
  it('refuses to start on bad configuration, one line per bad variable', async () => {
    const run = runSandbox({
      SANDBOX_PORT: 'x',
      SANDBOX_RETIRED: 'maybe',
      SANDBOX_TIME_SCALE: '0',
    });
    expect(await run.exit).toBe(2);
    const lines = run
      .output()
      .split('\n')
      .filter((l) => l.includes('configuration error'));
    expect(lines).toHaveLength(3);
    expect(lines.join('\n')).toMatch(/SANDBOX_PORT[\s\S]*SANDBOX_TIME_SCALE[\s\S]*SANDBOX_RETIRED/);
  });

  it('serves /v1 on the configured port, prints the default client, and stops on SIGTERM', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'sandbox-main-'));
    const run = runSandbox({ SANDBOX_PORT: '0', SANDBOX_DATA_DIR: dataDir, SANDBOX_CLIENTS: '' });
    try {
      const deadline = Date.now() + 30_000;
      let baseUrl: string | undefined;
      // The client lines are written after the base URL line: under load they may arrive in
      // a later chunk of the pipe, so wait for both.
      while ((!baseUrl || !run.output().includes('client "')) && Date.now() < deadline) {
        baseUrl = /base URL (http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(run.output())?.[1];
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(baseUrl).toBeDefined();
      expect(run.output()).toContain(
        'client "sandbox-client" secret "sandbox-secret" organization "sandbox-org" role org_admin scopes read,write',
      );
      const token = await fetch(`${baseUrl}/auth/token`, {
        method: 'POST',
        headers: {
          authorization: `Basic ${Buffer.from('sandbox-client:sandbox-secret').toString('base64')}`,
          'content-type': 'application/x-www-form-urlencoded',
        },
        body: 'grant_type=client_credentials',
      });
      expect(token.status).toBe(200);
      // Request lines are logged (without query strings: presigned URLs are secrets).
      for (let i = 0; i < 50 && !/POST \/v1\/auth\/token 200/.test(run.output()); i++)
        await new Promise((r) => setTimeout(r, 50));
      expect(run.output()).toMatch(/POST \/v1\/auth\/token 200/);
      run.child.kill('SIGTERM');
      expect(await run.exit).toBe(0);
    } finally {
      run.child.kill('SIGKILL');
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
