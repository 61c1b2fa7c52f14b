/**
 * bench/mllp-ingest: durable-ACK throughput and latency of the HL7 front door.
 * 10,000 ORM^O01 over 1 connection, then over 8, against the adapter running as its own
 * process on a fresh database; beside it, pgbench's ceilings on the same PostgreSQL: the
 * minimum durable work of one message (its raw bytes + an order row, one commit; measured
 * right after each phase) with the ratio, and the full commit shape of one message. Prints JSON. Usage: `npm run bench -- mllp-ingest` or
 * `node -r @swc-node/register bench/mllp-ingest/mllp-ingest.bench.ts` (BENCH_MESSAGES=n,
 * BENCH_ADAPTER_NODE_ARGS for the adapter's node, e.g. `--cpu-prof`).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { MllpClient } from '../../src/hl7';
import {
  adminQuery,
  freePort,
  percentile,
  pgbenchMinimalIngestCeiling,
  pgbenchOrderCommitCeiling,
  report,
  round,
  withDatabase,
} from '../bench-utils';

const MESSAGES = Number(process.env.BENCH_MESSAGES ?? 10_000);
const SERVER = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** Message i: the IHE SWF fixture with its own control id, placer and accession numbers. */
function message(template: string, run: string, i: number): Buffer {
  return Buffer.from(
    template
      .replace('MSGID20240318144217', `${run}-${i}`)
      .replace(/PLC-100234/g, `PLC-${run}-${i}`)
      .replace(/ACC-20240318-0042/g, `ACC-${run}-${i}`),
    'latin1',
  );
}

async function drive(
  port: number,
  connections: number,
  messages: Buffer[],
): Promise<{
  seconds: number;
  latencies: number[];
  codes: Record<string, number>;
  clientCpuMs: number;
}> {
  const latencies: number[] = [];
  const cpuBefore = process.cpuUsage();
  const codes: Record<string, number> = {};
  let next = 0;
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: connections }, async () => {
      const client = new MllpClient({ host: '127.0.0.1', port, responseTimeoutMs: 30_000 });
      try {
        while (next < messages.length) {
          const m = messages[next++]!;
          const t0 = process.hrtime.bigint();
          const reply = await client.send(m);
          latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
          const code = /\rMSA\|(\w\w)/.exec(reply.toString('latin1'))?.[1] ?? '??';
          codes[code] = (codes[code] ?? 0) + 1;
        }
      } finally {
        await client.close();
      }
    }),
  );
  const cpu = process.cpuUsage(cpuBefore);
  return {
    seconds: Number(process.hrtime.bigint() - started) / 1e9,
    latencies,
    codes,
    clientCpuMs: (cpu.user + cpu.system) / 1000,
  };
}

/** CPU time (user + system) of a process so far, in ms; 0 when it cannot be read. */
function processCpuMs(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
  } catch {
    return 0;
  }
}
const CLOCK_TICKS = 100;

/**
 * CPU spent by the adapter process and by the PostgreSQL backends serving the bench database
 * (its pool connections): on two shared cores throughput varies with the neighbours' load,
 * CPU per message much less.
 */
async function cpuSnapshot(
  adapterPid: number | undefined,
  databaseUrl: string,
): Promise<{ adapter: number; postgres: Map<number, number> }> {
  const c = new Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    const rows = (
      await c.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
      )
    ).rows;
    return {
      adapter: processCpuMs(adapterPid),
      postgres: new Map(rows.map((r) => [r.pid, processCpuMs(r.pid)])),
    };
  } finally {
    await c.end();
  }
}

async function main(): Promise<void> {
  const dbName = `bench_mllp_${Date.now().toString(36)}`;
  await adminQuery(SERVER, `CREATE DATABASE ${dbName}`);
  const databaseUrl = withDatabase(SERVER, dbName);
  const httpPort = await freePort();
  const mllpPort = await freePort();
  // BENCH_ADAPTER_NODE_ARGS, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`: profiles the adapter
  const nodeArgs = (process.env.BENCH_ADAPTER_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const adapter = spawn(
    process.execPath,
    [...nodeArgs, '-r', '@swc-node/register', 'src/main.ts'],
    {
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: databaseUrl,
        HTTP_PORT: String(httpPort),
        MLLP_PORT: String(mllpPort),
        HTTP_HOST: '127.0.0.1',
        MLLP_HOST: '127.0.0.1',
        DATA_DIR: mkdtempSync(join(tmpdir(), 'bench-mllp-')),
        API_TOKENS: 'admin:bench-admin-token-0123456789',
        LOG_LEVEL: 'warn',
        JOBS_ENABLED: 'false', // ingest only: no upstream work competes for the two cores
        // the group-commit settings can be varied from outside (INTAKE_BATCHES_IN_FLIGHT …)
        ...Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('INTAKE_'))),
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  try {
    for (let i = 0; i < 300; i++) {
      try {
        if ((await fetch(`http://127.0.0.1:${httpPort}/health`)).ok) break;
      } catch {
        // starting
      }
      await sleep(100);
    }
    const template = readFileSync(
      join(__dirname, '..', '..', 'test', 'fixtures', 'hl7', 'orm-o01-v231-ihe-swf-zds.hl7'),
      'latin1',
    );
    // warm-up (JIT, pools)
    await drive(
      mllpPort,
      2,
      Array.from({ length: 200 }, (_, i) => message(template, 'warm', i)),
    );
    const rawBytes = message(template, 'c1', 0).length;
    // the minimum-work ceiling is measured right after each phase, on the same server and
    // under the same neighbours' load, so that the ratio of the two is what counts
    const cpu0 = await cpuSnapshot(adapter.pid, databaseUrl);
    const one = await drive(
      mllpPort,
      1,
      Array.from({ length: MESSAGES }, (_, i) => message(template, 'c1', i)),
    );
    const cpu1 = await cpuSnapshot(adapter.pid, databaseUrl);
    const minimal1 = await pgbenchMinimalIngestCeiling(databaseUrl, [1], 5, rawBytes);
    const cpu2 = await cpuSnapshot(adapter.pid, databaseUrl);
    const eight = await drive(
      mllpPort,
      8,
      Array.from({ length: MESSAGES }, (_, i) => message(template, 'c8', i)),
    );
    const cpu3 = await cpuSnapshot(adapter.pid, databaseUrl);
    const minimal8 = await pgbenchMinimalIngestCeiling(databaseUrl, [8], 5, rawBytes);
    const ceiling = await pgbenchOrderCommitCeiling(databaseUrl, [1, 8], 5);
    const figure = (r: typeof one, from: typeof cpu0, to: typeof cpu0) => ({
      messages: r.latencies.length,
      cpuMsPerMessage: {
        adapter: round((to.adapter - from.adapter) / r.latencies.length, 3),
        postgresBackends: round(
          [...to.postgres].reduce((n, [pid, ms]) => n + ms - (from.postgres.get(pid) ?? 0), 0) /
            r.latencies.length,
          3,
        ),
        // the bench's own MLLP client (it stands for the RIS and shares the two cores)
        benchClient: round(r.clientCpuMs / r.latencies.length, 3),
      },
      messagesPerSecond: round(r.latencies.length / r.seconds, 1),
      ackLatencyMs: {
        p50: round(percentile(r.latencies, 50)),
        p99: round(percentile(r.latencies, 99)),
        max: round(Math.max(...r.latencies)),
      },
      ackCodes: r.codes,
    });
    const f1 = figure(one, cpu0, cpu1);
    const f8 = figure(eight, cpu2, cpu3);
    const target1 = Math.min(1000, ceiling.clients_1!.tps / 2);
    const target8 = Math.min(3000, ceiling.clients_8!.tps / 2);
    const min1 = minimal1.clients_1!.tps;
    const min8 = minimal8.clients_8!.tps;
    report('mllp-ingest', {
      oneConnection: f1,
      eightConnections: f8,
      minimalWorkCeiling: {
        tool: 'pgbench',
        shape: `one transaction per message: the raw bytes (${rawBytes} B) + one order row, commit`,
        ...minimal1,
        ...minimal8,
        ratio: {
          oneConnection: round(f1.messagesPerSecond / min1, 2),
          eightConnections: round(f8.messagesPerSecond / min8, 2),
          target: { oneConnection: 0.7, eightConnections: 0.6 },
          met: f1.messagesPerSecond >= 0.7 * min1 && f8.messagesPerSecond >= 0.6 * min8,
        },
      },
      postgresCeiling: { tool: 'pgbench', sameCommitShape: true, ...ceiling },
      targets: {
        oneConnection: {
          messagesPerSecond: round(target1, 1),
          met: f1.messagesPerSecond >= target1,
        },
        eightConnections: {
          messagesPerSecond: round(target8, 1),
          met: f8.messagesPerSecond >= target8,
        },
        rule: 'at least 1,000/s on one connection and 3,000/s on eight, or half the pgbench ceiling, whichever is lower',
      },
    });
  } finally {
    adapter.kill('SIGTERM');
    await new Promise((r) => adapter.once('exit', r));
    await adminQuery(SERVER, `DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
