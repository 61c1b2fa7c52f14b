import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { transformFileSync } from '@swc/core';
import { promisify } from 'node:util';
import { Client } from 'pg';

const run = promisify(execFile);

/** Percentile of a sorted-on-demand sample (nearest rank). */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export function round(value: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

export function machine(): { cores: number; cpu: string; node: string } {
  return { cores: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', node: process.version };
}

/** Prints the benchmark's figures as one JSON document (the only stdout output of a bench). */
export function report(name: string, figures: Record<string, unknown>): void {
  process.stdout.write(
    `${JSON.stringify({ bench: name, at: new Date().toISOString(), machine: machine(), ...figures }, null, 2)}\n`,
  );
}

export async function adminQuery(serverUrl: string, sql: string): Promise<void> {
  const c = new Client({ connectionString: serverUrl });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/**
 * The PostgreSQL ceiling for commits shaped like one inbound order: a pgbench run (the real
 * tool, same server) of a transaction that inserts a message row with ~2 KB of raw bytes, an
 * order row, three audit rows and a job row, at 1 and at N clients.
 */
export async function pgbenchOrderCommitCeiling(
  databaseUrl: string,
  clients: number[],
  seconds = 5,
): Promise<Record<string, { tps: number; latencyMsAvg: number }>> {
  return pgbenchCeiling(
    databaseUrl,
    `
    DROP TABLE IF EXISTS bench_messages, bench_orders, bench_audit, bench_jobs;
    CREATE TABLE bench_messages (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), key text UNIQUE, raw bytea, at timestamptz DEFAULT now());
    CREATE TABLE bench_orders (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), ref bigint, request jsonb, at timestamptz DEFAULT now());
    CREATE INDEX ON bench_orders (ref);
    CREATE TABLE bench_audit (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text, detail jsonb, at timestamptz DEFAULT now());
    CREATE TABLE bench_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, task text, payload json, at timestamptz DEFAULT now());
  `,
    [
      '\\set k random(1, 1000000000)',
      'BEGIN;',
      "INSERT INTO bench_messages (key, raw) VALUES ('k' || :k || '-' || :client_id || '-' || random(), decode(repeat('4d5348', 700), 'hex'));",
      'INSERT INTO bench_orders (ref, request) VALUES (:k, \'{"patient":{"identifiers":[{"value":"PAT-1"}]},"products":["neuro-volumetry"]}\');',
      "INSERT INTO bench_audit (kind, detail) VALUES ('a', '{}'), ('b', '{\"lineage\":[1,2,3,4,5,6,7,8,9,10]}'), ('c', '{}');",
      "INSERT INTO bench_jobs (task, payload) VALUES ('order.place-upstream', '{\"orderId\":1}');",
      'END;',
    ],
    clients,
    seconds,
  );
}

/**
 * The least durable work one inbound message needs before its ACK: one transaction that
 * inserts the message's raw bytes (rawBytes long, in a table with a primary key) and one
 * order row (primary key, the message's id) and commits. Nothing the adapter does per
 * message can commit fewer bytes than this, one message per transaction (several messages
 * sharing a commit can pass it).
 */
export async function pgbenchMinimalIngestCeiling(
  databaseUrl: string,
  clients: number[],
  seconds = 5,
  rawBytes = 834,
): Promise<Record<string, { tps: number; latencyMsAvg: number }>> {
  const hexPairs = Math.max(1, Math.round(rawBytes / 3));
  return pgbenchCeiling(
    databaseUrl,
    `
    DROP TABLE IF EXISTS bench_min_messages, bench_min_orders;
    CREATE TABLE bench_min_messages (id uuid PRIMARY KEY, raw bytea NOT NULL);
    CREATE TABLE bench_min_orders (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), message_id uuid NOT NULL, placer text);
  `,
    [
      '\\set k random(1, 1000000000)',
      'BEGIN;',
      `INSERT INTO bench_min_messages (id, raw) VALUES (gen_random_uuid(), decode(repeat('4d5348', ${hexPairs}), 'hex'));`,
      "INSERT INTO bench_min_orders (message_id, placer) VALUES (gen_random_uuid(), 'PLC-' || :k);",
      'END;',
    ],
    clients,
    seconds,
  );
}

/** Runs a pgbench script (lines) after the setup SQL, at each client count; tps and latency. */
async function pgbenchCeiling(
  databaseUrl: string,
  setupSql: string,
  lines: string[],
  clients: number[],
  seconds: number,
): Promise<Record<string, { tps: number; latencyMsAvg: number }>> {
  const dir = mkdtempSync(join(tmpdir(), 'pgbench-'));
  const script = join(dir, 'script.sql');
  writeFileSync(script, [...lines, ''].join('\n'));
  const c = new Client({ connectionString: databaseUrl });
  await c.connect();
  await c.query(setupSql);
  await c.end();
  const u = new URL(databaseUrl);
  const env = { ...process.env, PGPASSWORD: decodeURIComponent(u.password) };
  const out: Record<string, { tps: number; latencyMsAvg: number }> = {};
  for (const n of clients) {
    const { stdout } = await run(
      'pgbench',
      [
        '-n',
        '-f',
        script,
        '-c',
        String(n),
        '-j',
        String(Math.min(n, 2)),
        '-T',
        String(seconds),
        '-h',
        u.hostname,
        '-p',
        u.port || '5432',
        '-U',
        decodeURIComponent(u.username) || 'postgres',
        u.pathname.slice(1),
      ],
      { env },
    );
    const tps = Number(/tps = ([\d.]+)/.exec(stdout)?.[1] ?? NaN);
    const lat = Number(/latency average = ([\d.]+) ms/.exec(stdout)?.[1] ?? NaN);
    out[`clients_${n}`] = { tps: round(tps, 1), latencyMsAvg: round(lat, 2) };
  }
  return out;
}

/** A TCP port free on loopback right now (for a process the bench starts). */
export function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

const ROOT = join(__dirname, '..');

/**
 * A bench worker and every project file it requires, compiled once to plain JavaScript in
 * `.bench-build-<pid>`: under @swc-node/register the compiler itself would add ~120 MB to the
 * RSS a bench means to measure as the code's own. The files are found by following the
 * worker's relative requires, so a new import cannot leave the build incomplete. Returns the
 * build folder and the worker's compiled path.
 */
export function compileToPlainJs(entry: string): { dir: string; script: string } {
  const dir = join(ROOT, `.bench-build-${process.pid}`);
  const pending = [entry];
  const done = new Set<string>();
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (done.has(file)) continue;
    done.add(file);
    const { code } = transformFileSync(join(ROOT, file), {
      // decorators parse (a folder may also hold its Nest wiring, never loaded by the worker)
      jsc: {
        parser: { syntax: 'typescript', decorators: true },
        transform: { legacyDecorator: true, decoratorMetadata: true },
        target: 'es2022',
      },
      module: { type: 'commonjs' },
    });
    const target = join(dir, file.replace(/\.ts$/, '.js'));
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, code);
    for (const [, spec] of code.matchAll(/require\("(\.{1,2}\/[^"]+)"\)/g)) {
      const base = relative(ROOT, resolve(ROOT, dirname(file), spec!));
      const source = [`${base}.ts`, join(base, 'index.ts')].find((f) => existsSync(join(ROOT, f)));
      if (source) pending.push(source);
    }
  }
  return { dir, script: join(dir, entry.replace(/\.ts$/, '.js')) };
}

/**
 * A parser's cost per input shape and size: `run` (its time in microseconds) once to warm up,
 * then `rounds(size)` times; the median of each, in ms and in µs per KiB.
 */
export function medianPerShape<S extends string>(
  shapes: readonly S[],
  sizes: readonly number[],
  build: (shape: S, size: number) => Buffer,
  run: (bytes: Buffer) => number,
  rounds: (size: number) => number,
): Array<Record<string, number | string>> {
  const results: Array<Record<string, number | string>> = [];
  for (const shape of shapes) {
    for (const size of sizes) {
      const bytes = build(shape, size);
      run(bytes); // warm-up
      const times = Array.from({ length: rounds(size) }, () => run(bytes)).sort((a, b) => a - b);
      const median = times[Math.floor(times.length / 2)]!;
      results.push({
        shape,
        bytes: bytes.length,
        medianMs: Math.round(median / 10) / 100,
        usPerKb: Math.round((median / (bytes.length / 1024)) * 10) / 10,
      });
    }
  }
  return results;
}
