/**
 * bench/throughput: end-to-end orders per second against the upstream's budget. N orders
 * (BENCH_ORDERS, default 600) go in over MLLP (BENCH_SENDERS connections, default 4, as fast
 * as they are ACKed),
 * each with its study pushed over STOW-RS, to the adapter running as its own process on a
 * fresh database, and are followed until their results are stored (state `delivered` and the
 * report documents in `order_documents`). The upstream is the sandbox, in this process, at
 * the contract's limits (600 requests per minute per endpoint, 2,000 in all, fixed windows:
 * it answers 429 above them) with its processing steps shortened (BENCH_TIME_SCALE, default
 * 0.01: an order is analysed in about 0.1 s), so that the upstream's budget is the bound.
 *
 * Every request the sandbox's limiter counts is recorded here: calls per order by endpoint,
 * the busiest endpoint's calls in any sliding minute, 429s. The bound printed beside the
 * figure is min over endpoints of 600 / (calls per order on it) and 2,000 / (calls per order
 * in all), in orders per minute; the ratio is orders/s measured against it.
 *
 * The adapter runs with POLL_INTERVAL_SECONDS=10 (one cycle costs `GET /list-orders` and
 * `GET /reports` whatever the number of orders; the default 300 s leaves results waiting
 * upstream); BENCH_ADAPTER_ENV overrides it.
 *
 * Usage: `npm run bench -- throughput` or
 * `node -r @swc-node/register bench/throughput/throughput.bench.ts` (BENCH_ORDERS=n,
 * BENCH_TIME_SCALE=x; BENCH_ADAPTER_ENV='{"JOB_CONCURRENCY":"8"}' adds adapter settings).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { MllpClient } from '../../src/hl7';
import { LIMITS } from '../../src/imaging-spec/imaging-spec';
import { RateLimiter } from '../../src/sandbox/rate-limiter';
import { startSandbox } from '../../src/sandbox/sandbox';
import { createMrBrainSeries, generateUid } from '../../test/helpers/dicom-factory';
import { adminQuery, freePort, report, round, withDatabase } from '../bench-utils';

const ORDERS = Number(process.env.BENCH_ORDERS ?? 600);
const TIME_SCALE = Number(process.env.BENCH_TIME_SCALE ?? 0.01);
const SENDERS = Number(process.env.BENCH_SENDERS ?? 4);
const DEADLINE_MS = Number(process.env.BENCH_DEADLINE_SECONDS ?? 900) * 1000;
const SERVER = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const SENDER_TOKEN = 'bench-sender-token-0123456789';
const ADMIN_TOKEN = 'bench-admin-token-0123456789';

/** Every request the sandbox's limiter saw: `METHOD /path` → times; refusals (429) apart. */
const hits = new Map<string, number[]>();
const refusals = new Map<string, number>();
let totalHits = 0;
const originalHit = RateLimiter.prototype.hit;
RateLimiter.prototype.hit = function hit(this: RateLimiter, key: string, limit: number) {
  const wait = originalHit.call(this, key, limit);
  if (key.startsWith('ip:')) {
    if (wait === null) totalHits++;
    else refusals.set('(all, per IP)', (refusals.get('(all, per IP)') ?? 0) + 1);
  }
  if (key.startsWith('ep:')) {
    // `ep:<client ip>:<METHOD> <path>` (the ip may hold colons)
    const endpoint = /[A-Z]+ \/.*$/.exec(key)?.[0] ?? key;
    if (wait === null) {
      const times = hits.get(endpoint) ?? [];
      times.push(Date.now());
      hits.set(endpoint, times);
    } else refusals.set(endpoint, (refusals.get(endpoint) ?? 0) + 1);
  }
  return wait;
};

/** The most calls one endpoint (or all together) took in any 60 s. */
function maxPerMinute(times: number[]): number {
  let best = 0;
  let from = 0;
  for (let to = 0; to < times.length; to++) {
    while (times[to]! - times[from]! >= 60_000) from++;
    best = Math.max(best, to - from + 1);
  }
  return best;
}

interface OrderSpec {
  placer: string;
  accession: string;
  studyUid: string;
  patientId: string;
}

function ormMessage(spec: OrderSpec): Buffer {
  const segments = [
    `MSH|^~\\&|RADIS1|BENCHHOSP|AIADAPTER|BENCHHOSP|20261121093000||ORM^O01|MSG${spec.placer}|P|2.3.1`,
    `PID|||${spec.patientId}^^^BENCHHOSP^MR||MUSTERMANN^ERIKA^^^^^L||19640812|F`,
    `ORC|NW|${spec.placer}^RADIS1||||SC||^^^20261121100000^^R||20261121093000|||4711^ARZT^PAULA^^^DR`,
    `OBR|1|${spec.placer}^RADIS1||MRKOPF^MRT Kopf^L||20261121100000||||||||||4711^ARZT^PAULA^^^DR||${spec.accession}|RP-${spec.placer}|SPS-${spec.placer}||||MR|||^^^20261121100000^^R`,
    `ZDS|${spec.studyUid}^RADIS1^Application^DICOM`,
  ];
  return Buffer.from(segments.join('\r') + '\r', 'latin1');
}

/** The study of an order (2 slices of 32×32, real pixel data) as a STOW-RS body. */
function stowBody(spec: OrderSpec): { body: Buffer; contentType: string } {
  const instances = createMrBrainSeries({
    patient: {
      patientId: spec.patientId,
      patientName: 'MUSTERMANN^ERIKA',
      birthDate: '19640812',
      sex: 'F',
    },
    study: { studyInstanceUid: spec.studyUid, accessionNumber: spec.accession },
    series: { slices: 2, rows: 32, columns: 32 },
    seed: 7,
  });
  const boundary = `BenchBoundary${Date.now().toString(16)}`;
  const chunks: Buffer[] = [];
  for (const i of instances) {
    chunks.push(
      Buffer.from(
        `--${boundary}\r\nContent-Type: application/dicom\r\nContent-Length: ${i.bytes.length}\r\n\r\n`,
      ),
      i.bytes,
      Buffer.from('\r\n'),
    );
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return {
    body: Buffer.concat(chunks),
    contentType: `multipart/related; type="application/dicom"; boundary=${boundary}`,
  };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-throughput-'));
  const sandbox = await startSandbox({
    port: 0,
    host: '127.0.0.1',
    dataDir: join(dir, 'sandbox'),
    timeScale: TIME_SCALE,
    rateLimitPerEndpoint: LIMITS.requestsPerEndpointPerMinute,
    rateLimitPerIp: LIMITS.requestsPerIpPerMinute,
  });
  const config = join(dir, 'site.yaml');
  writeFileSync(
    config,
    [
      'site:',
      '  name: throughput bench',
      'mappings:',
      '  hl7:',
      '    productTable:',
      '      - code: MRKOPF',
      '        products: [neuro-volumetry]',
      '',
    ].join('\n'),
  );
  const dbName = `bench_tp_${Date.now().toString(36)}`;
  await adminQuery(SERVER, `CREATE DATABASE ${dbName}`);
  const databaseUrl = withDatabase(SERVER, dbName);
  const httpPort = await freePort();
  const mllpPort = await freePort();
  const extraEnv = JSON.parse(process.env.BENCH_ADAPTER_ENV ?? '{}') as Record<string, string>;
  const adapter = spawn(process.execPath, ['-r', '@swc-node/register', 'src/main.ts'], {
    env: {
      PATH: process.env.PATH,
      DATABASE_URL: databaseUrl,
      HTTP_PORT: String(httpPort),
      MLLP_PORT: String(mllpPort),
      HTTP_HOST: '127.0.0.1',
      MLLP_HOST: '127.0.0.1',
      DATA_DIR: join(dir, 'data'),
      API_TOKENS: `sender:${SENDER_TOKEN},admin:${ADMIN_TOKEN}`,
      LOG_LEVEL: 'warn',
      IMAGING_BASE_URL: sandbox.baseUrl,
      IMAGING_CLIENT_ID: 'sandbox-client',
      IMAGING_CLIENT_SECRET: 'sandbox-secret',
      IMAGING_ORGANIZATION_ID: 'sandbox-org',
      CONFIG_FILE: config,
      STUDY_QUIET_PERIOD_SECONDS: '1',
      POLL_INTERVAL_SECONDS: '10',
      ...extraEnv,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const pg = new Client({ connectionString: databaseUrl });
  try {
    for (let i = 0; i < 600; i++) {
      try {
        if ((await fetch(`http://127.0.0.1:${httpPort}/health`)).ok) break;
      } catch {
        // starting
      }
      await sleep(100);
    }
    await pg.connect();
    const run = Date.now().toString(36).toUpperCase();
    const specs: OrderSpec[] = Array.from({ length: ORDERS }, (_, i) => ({
      placer: `PLC-${run}-${i}`,
      accession: `ACC-${run}-${i}`,
      studyUid: generateUid(),
      patientId: `PAT-${run}-${i}`,
    }));
    const bodies = specs.map(stowBody);
    const callsBefore = totalHits;
    for (const times of hits.values()) times.length = 0;
    const started = Date.now();
    let next = 0;
    let notAcked = 0;
    let stowFailed = 0;
    const senders = Promise.all(
      Array.from({ length: SENDERS }, async () => {
        const mllp = new MllpClient({
          host: '127.0.0.1',
          port: mllpPort,
          responseTimeoutMs: 30_000,
        });
        try {
          while (next < specs.length) {
            const i = next++;
            const ack = (await mllp.send(ormMessage(specs[i]!))).toString('latin1');
            if (!/\rMSA\|AA/.test(ack)) notAcked++;
            const res = await fetch(`http://127.0.0.1:${httpPort}/dicomweb/studies`, {
              method: 'POST',
              headers: {
                authorization: `Bearer ${SENDER_TOKEN}`,
                'content-type': bodies[i]!.contentType,
              },
              body: bodies[i]!.body,
            });
            await res.arrayBuffer();
            if (res.status !== 200) stowFailed++;
          }
        } finally {
          await mllp.close();
        }
      }),
    );
    let sentAt = 0;
    void senders.then(() => (sentAt = Date.now()));
    let done = 0;
    let firstDeliveredAt = 0;
    let states: Record<string, number> = {};
    const timeline: Array<{ s: number; delivered: number }> = [];
    while (Date.now() - started < DEADLINE_MS) {
      await sleep(1000);
      const r = await pg.query<{ state: string; n: number; with_docs: number }>(
        `SELECT o.state, count(*)::int AS n,
                count(*) FILTER (WHERE EXISTS (SELECT 1 FROM order_documents d
                                  WHERE d.order_id = o.id AND d.kind = 'results'))::int AS with_docs
           FROM orders o GROUP BY o.state`,
      );
      states = Object.fromEntries(r.rows.map((x) => [x.state, x.n]));
      done = r.rows.find((x) => x.state === 'delivered')?.with_docs ?? 0;
      if (done > 0 && !firstDeliveredAt) firstDeliveredAt = Date.now();
      timeline.push({ s: Math.round((Date.now() - started) / 1000), delivered: done });
      const terminal = ['delivered', 'failed', 'cancelled'].reduce(
        (n, s) => n + (states[s] ?? 0),
        0,
      );
      if (done >= ORDERS || (sentAt && terminal >= ORDERS && done === states.delivered)) break;
    }
    const seconds = (Date.now() - started) / 1000;
    await senders;
    const calls = totalHits - callsBefore;
    const endpoints = [...hits.entries()]
      .filter(([, t]) => t.length > 0)
      .map(([endpoint, t]) => ({
        endpoint,
        calls: t.length,
        perOrder: round(t.length / Math.max(1, done), 3),
        maxPerSlidingMinute: maxPerMinute(t),
      }))
      .sort((a, b) => b.calls - a.calls);
    const perEndpointLimit = LIMITS.requestsPerEndpointPerMinute;
    const totalLimit = LIMITS.requestsPerIpPerMinute;
    const perOrderTotal = calls / Math.max(1, done);
    const bounds = [
      ...endpoints.map((e) => ({
        by: e.endpoint,
        ordersPerMinute: perEndpointLimit / e.perOrder,
      })),
      { by: '(all endpoints, per IP)', ordersPerMinute: totalLimit / perOrderTotal },
    ].sort((a, b) => a.ordersPerMinute - b.ordersPerMinute);
    const bound = bounds[0]!;
    const busiestPerOrder = Math.max(0, ...endpoints.map((e) => e.perOrder));
    const ordersPerSecond = done / seconds;
    const busiest = endpoints
      .slice()
      .sort((a, b) => b.maxPerSlidingMinute - a.maxPerSlidingMinute)[0];
    const allTimes = [...hits.values()].flat().sort((a, b) => a - b);
    report('throughput', {
      orders: ORDERS,
      sandboxTimeScale: TIME_SCALE,
      adapterSettings: extraEnv,
      delivered: done,
      states,
      notAcked,
      stowFailed,
      seconds: round(seconds, 1),
      senders: SENDERS,
      allSentAfterSeconds: sentAt ? round((sentAt - started) / 1000, 1) : null,
      firstDeliveredAfterSeconds: firstDeliveredAt
        ? round((firstDeliveredAt - started) / 1000, 1)
        : null,
      ordersPerSecond: round(ordersPerSecond, 2),
      ordersPerMinute: round(ordersPerSecond * 60, 1),
      upstream: {
        limits: { perEndpointPerMinute: perEndpointLimit, totalPerMinute: totalLimit },
        calls,
        callsPerOrder: round(perOrderTotal, 3),
        endpoints,
        busiestEndpoint: busiest
          ? { endpoint: busiest.endpoint, maxCallsPerSlidingMinute: busiest.maxPerSlidingMinute }
          : null,
        maxCallsPerSlidingMinuteAll: maxPerMinute(allTimes),
        refusals429: Object.fromEntries(refusals),
      },
      bound: {
        rule: 'min over endpoints of 600 / calls per order there, and 2,000 / calls per order in all (orders per minute)',
        by: bound.by,
        ordersPerMinute: round(bound.ordersPerMinute, 1),
        ordersPerSecond: round(bound.ordersPerMinute / 60, 2),
        next: bounds
          .slice(1, 3)
          .map((b) => ({ by: b.by, ordersPerMinute: round(b.ordersPerMinute, 1) })),
      },
      ratio: round(ordersPerSecond / (bound.ordersPerMinute / 60), 2),
      // The bound is a long-run rate. A budget counted per sliding minute also lets a first
      // minute's worth go at once, so a run of a few minutes can pass it; the fewest seconds
      // the busiest endpoint's budget allows for these N orders (processing aside) shows how
      // much of the run was the budget and how much the pipeline.
      budgetFloorSeconds: busiestPerOrder
        ? 60 * (Math.ceil((ORDERS * busiestPerOrder) / perEndpointLimit) - 1)
        : null,
      target: { ratio: 0.8, met: ordersPerSecond >= 0.8 * (bound.ordersPerMinute / 60) },
      timeline: timeline.filter((_, i) => i % 10 === 0),
    });
  } finally {
    await pg.end().catch(() => undefined);
    adapter.kill('SIGTERM');
    await new Promise((r) => adapter.once('exit', r));
    await sandbox.close();
    await adminQuery(SERVER, `DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
