import { spawn, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';

/** The adapter as a real OS process (`src/main.ts`), for start/stop/crash tests. */
export interface AdapterProcess {
  child: ChildProcess;
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export function spawnAdapter(env: Record<string, string | undefined>): AdapterProcess {
  const child = spawn(process.execPath, ['-r', '@swc-node/register', 'src/main.ts'], {
    cwd: process.cwd(),
    env: { PATH: process.env.PATH, HOME: process.env.HOME, LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  // 'exit' can come before the last output chunks have been read from the pipes: wait for
  // both pipes to end too (bounded: a grandchild, e.g. an orphaned embedded PostgreSQL after
  // SIGKILL, may hold them open).
  const drained = (stream: NodeJS.ReadableStream & { readableEnded?: boolean }) =>
    new Promise<void>((resolve) => {
      if (stream.readableEnded) return resolve();
      stream.once('end', resolve);
      stream.once('close', resolve);
    });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => {
      const bound = new Promise<void>((r) => setTimeout(r, 2_000).unref());
      void Promise.race([
        Promise.all([drained(child.stdout!), drained(child.stderr!)]),
        bound,
      ]).then(() => resolve({ code, signal }));
    }),
  );
  return { child, output: () => out, exited };
}

/** Polls GET /health until 200 or the deadline. */
export async function waitHealthy(
  url: string,
  timeoutMs: number,
  proc?: AdapterProcess,
): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < timeoutMs) {
    if (proc && proc.child.exitCode !== null)
      throw new Error(`adapter exited early:\n${proc.output()}`);
    try {
      const res = await fetch(`${url}/health`);
      if (res.status === 200) return Date.now() - started;
    } catch {
      // not listening yet
    }
    await sleep(200);
  }
  throw new Error(`not healthy within ${timeoutMs} ms${proc ? `:\n${proc.output()}` : ''}`);
}

/** Its exit within `ms`, or it is killed (a start that should have been refused and was not). */
export async function exitWithin(proc: AdapterProcess, ms: number) {
  const timer = setTimeout(() => proc.child.kill('SIGKILL'), ms);
  try {
    return await proc.exited;
  } finally {
    clearTimeout(timer);
  }
}
