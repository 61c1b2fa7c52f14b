/**
 * bench/mllp-memory: peak memory of the adapter while 32 senders each send one ~9.9 MB
 * ORM^O01 at the same moment (issue #15 item 7: 16 such messages took RSS from 0.48 to 2 GB).
 * The adapter runs as its own process (ingest only); its peak RSS (VmHWM) and the time until
 * every ACK arrived are reported with the byte budget off (MLLP_MAX_INFLIGHT_BYTES=0) and at
 * its default. Target: all answered, peak RSS under 600 MB with the budget.
 * Usage: `node scripts/with-node.cjs -r @swc-node/register bench/mllp-memory/mllp-memory.bench.ts`
 * (BENCH_SENDERS=32, BENCH_MESSAGE_MB=9.9; DATABASE_URL names the server).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { MllpClient } from '../../src/hl7';
import { freePort } from '../../src/persistence/embedded-postgres';
import { adminQuery, report, round, withDatabase } from '../bench-utils';

const SERVER = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const SENDERS = Number(process.env.BENCH_SENDERS ?? 32);
const MESSAGE_BYTES = Math.round(Number(process.env.BENCH_MESSAGE_MB ?? 9.9) * 1_000_000);

const TEMPLATE = readFileSync(
  join(__dirname, '..', '..', 'test', 'fixtures', 'hl7', 'orm-o01-v231-ihe-swf-zds.hl7'),
  'latin1',
).replace(/[\r\n]+$/, '');

function message(i: number): Buffer {
  const head = TEMPLATE.replace('MSGID20240318144217', `MEM-${i}`)
    .replace(/PLC-100234/g, `PLC-MEM-${i}`)
    .replace(/ACC-20240318-0042/g, `ACC-MEM-${i}`);
  // ~2.5 KB notes: a long dictated history, within the segment bound.
  const line = `NTE|1||${'Prior imaging and clinical history as dictated by the referrer. '.repeat(40)}`;
  const count = Math.ceil((MESSAGE_BYTES - head.length) / (line.length + 1));
  return Buffer.from(
    `${head}\r${Array.from({ length: count }, () => line).join('\r')}\r`,
    'latin1',
  );
}

function peakRssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return round(kb / 1024, 0);
}

function currentRssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024, 0);
}

async function run(budget: string): Promise<Record<string, unknown>> {
  const dbName = `bench_mem_${Date.now().toString(36)}`;
  await adminQuery(SERVER, `CREATE DATABASE ${dbName}`);
  const httpPort = await freePort();
  const mllpPort = await freePort();
  const adapter = spawn(process.execPath, ['-r', '@swc-node/register', 'src/main.ts'], {
    env: {
      PATH: process.env.PATH,
      DATABASE_URL: withDatabase(SERVER, dbName),
      HTTP_PORT: String(httpPort),
      MLLP_PORT: String(mllpPort),
      HTTP_HOST: '127.0.0.1',
      MLLP_HOST: '127.0.0.1',
      DATA_DIR: mkdtempSync(join(tmpdir(), 'bench-mem-')),
      API_TOKENS: 'admin:bench-admin-token-0123456789',
      LOG_LEVEL: 'warn',
      JOBS_ENABLED: 'false',
      MLLP_MAX_INFLIGHT_BYTES: budget,
      ...(process.env.BENCH_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_NODE_OPTIONS } : {}),
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  try {
    for (let i = 0; i < 300; i++) {
      try {
        if ((await fetch(`http://127.0.0.1:${httpPort}/health`)).ok) break;
      } catch {
        // starting
      }
      await sleep(100);
    }
    const messages = Array.from({ length: SENDERS }, (_, i) => message(i));
    const idleRss = currentRssMb(adapter.pid!);
    const started = Date.now();
    const codes = await Promise.all(
      messages.map(async (m) => {
        const client = new MllpClient({
          host: '127.0.0.1',
          port: mllpPort,
          responseTimeoutMs: 600_000,
        });
        try {
          const ack = (await client.send(m)).toString('latin1');
          return /\rMSA\|(\w\w)/.exec(ack)?.[1] ?? '?';
        } catch (error) {
          return (error as Error).message;
        } finally {
          await client.close();
        }
      }),
    );
    return {
      budgetBytes: Number(budget),
      senders: SENDERS,
      messageBytes: messages[0]!.length,
      allAnswered: codes.every((c) => c === 'AA'),
      codes: [...new Set(codes)],
      seconds: round((Date.now() - started) / 1000, 1),
      idleRssMb: idleRss,
      peakRssMb: peakRssMb(adapter.pid!),
    };
  } finally {
    adapter.kill('SIGKILL');
    await new Promise((r) => adapter.once('exit', r));
    await adminQuery(SERVER, `DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  }
}

/** Budgets to compare (BENCH_BUDGETS, bytes, comma-separated): 0 = off, then the default. */
const BUDGETS = (process.env.BENCH_BUDGETS ?? `0,${4 * 1024 * 1024}`).split(',');

async function main(): Promise<void> {
  const runs = [];
  for (const budget of BUDGETS) runs.push(await run(budget.trim()));
  report('mllp-memory', { runs });
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
