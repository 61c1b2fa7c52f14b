/**
 * `npm run bench [-- name…]`: runs every benchmark of bench/ (each `bench/<name>/<name>.bench.ts`)
 * one after the other as its own process, and writes one JSON summary with the machine's core
 * count and the PostgreSQL ceiling (pgbench, same server, same run) to
 * bench/results/latest.json (and prints it).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { adminQuery, machine, pgbenchOrderCommitCeiling, withDatabase } from './bench-utils';

const SERVER = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

function runBench(
  file: string,
): Promise<{ ok: boolean; seconds: number; result?: unknown; error?: string }> {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(process.execPath, ['-r', '@swc-node/register', file], {
      env: process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err = (err + c.toString()).slice(-4000)));
    child.on('exit', (code) => {
      const seconds = Math.round((Date.now() - started) / 100) / 10;
      // a bench prints one JSON document; take the last complete one
      const at = out.lastIndexOf('\n{');
      const text = (at >= 0 ? out.slice(at + 1) : out).trim();
      try {
        resolve({ ok: code === 0, seconds, result: JSON.parse(text) });
      } catch {
        resolve({
          ok: false,
          seconds,
          error: `exit ${code}: ${err.split('\n').slice(-5).join(' | ')}`,
        });
      }
    });
  });
}

async function main(): Promise<void> {
  const only = process.argv.slice(2);
  const names = readdirSync(__dirname, { withFileTypes: true })
    .filter((d) => d.isDirectory() && d.name !== 'results')
    .map((d) => d.name)
    .filter((n) => existsSync(join(__dirname, n, `${n}.bench.ts`)))
    .filter((n) => only.length === 0 || only.includes(n))
    .sort();
  const dbName = `bench_ceiling_${Date.now().toString(36)}`;
  await adminQuery(SERVER, `CREATE DATABASE ${dbName}`);
  let ceiling: unknown;
  try {
    ceiling = await pgbenchOrderCommitCeiling(withDatabase(SERVER, dbName), [1, 8], 5);
  } finally {
    await adminQuery(SERVER, `DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  }
  const results: Record<string, unknown> = {};
  for (const name of names) {
    process.stderr.write(`bench: ${name} …\n`);
    results[name] = await runBench(join(__dirname, name, `${name}.bench.ts`));
  }
  const summary = {
    command: `npm run bench${only.length ? ` -- ${only.join(' ')}` : ''}`,
    at: new Date().toISOString(),
    machine: machine(),
    postgresCeiling: { tool: 'pgbench', shape: 'one inbound order commit', ...(ceiling as object) },
    benches: results,
  };
  mkdirSync(join(__dirname, 'results'), { recursive: true });
  writeFileSync(join(__dirname, 'results', 'latest.json'), `${JSON.stringify(summary, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  if (Object.values(results).some((r) => !(r as { ok: boolean }).ok)) process.exitCode = 1;
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
