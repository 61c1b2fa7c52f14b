/**
 * bench/poll: the cost of following in-flight orders upstream. For 100, 1,000 and 10,000
 * in-flight orders (each a real order in the sandbox, over HTTP, and a followed order in a
 * scratch database with the real migrations), one poll cycle of the real OrderPollerService
 * through the production client (PostgreSQL rate limiter, audit observer): once with nothing
 * changed, once after 10 orders changed (5 cancelled upstream, so they leave the active
 * list, and 5 uploaded, so their status moves within it). Beside it, a naive poller's cost:
 * one `GET /status` per in-flight order per cycle, timed for real at the same size, and the
 * number of orders it could follow within the contract's 600 calls/min per endpoint at the
 * recommended 5-minute interval.
 * Target: at most 3 calls per cycle plus one per changed order, at every size.
 * Usage: `node scripts/with-node.cjs -r @swc-node/register bench/poll/poll.bench.ts`
 * (BENCH_SIZES=100,1000,10000; DATABASE_URL names the server, default the local one).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { AuditCallObserver } from '../../src/imaging-client/audit-call.observer';
import { ImagingClient } from '../../src/imaging-client/imaging-client';
import { withDefaults } from '../../src/imaging-client/imaging-client.config';
import { createProductionImagingClient } from '../../src/imaging-client/imaging-client.factory';
import { InMemoryRateLimiter } from '../../src/imaging-client/in-memory-rate-limiter';
import {
  InMemoryUploadProgressStore,
  InMemoryUploadSlots,
} from '../../src/imaging-client/in-memory-upload.stores';
import { silentLogger, systemClock, type CallRecord } from '../../src/imaging-client/ports';
import { StudyUploader } from '../../src/imaging-client/study-uploader';
import { JobQueue } from '../../src/jobs/job-queue';
import { noOrderEvents } from '../../src/orders/order-events';
import { OrderLifecycleService } from '../../src/orders/order-lifecycle.service';
import { OrderPollerService } from '../../src/orders/order-poller.service';
import { createDataSource } from '../../src/persistence/data-source.factory';
import { migrateUnderLock } from '../../src/persistence/migrator';
import { startSandbox } from '../../src/sandbox/sandbox';
import type { StudyAcquirer } from '../../src/domain/study-acquirer.port';
import { adminQuery, report, round, withDatabase } from '../bench-utils';

const SIZES = (process.env.BENCH_SIZES ?? '100,1000,10000').split(',').map(Number);
const SERVER = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const CREDENTIALS = {
  clientId: 'sandbox-client',
  clientSecret: 'sandbox-secret',
  organizationId: 'sandbox-org',
};
const PER_ENDPOINT_PER_MINUTE = 600;
const INTERVAL_MINUTES = 5;
const logger = pino({ level: 'silent' });

/** The poller never acquires studies; a port that says so. */
const noStudies: StudyAcquirer = {
  acquire: () => Promise.resolve({ status: 'failed', reason: 'not in this bench' }),
  release: () => Promise.resolve(),
};

async function measure(size: number) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-poll-'));
  const sandbox = await startSandbox({
    port: 0,
    host: '127.0.0.1',
    clock: 'manual',
    dataDir: join(dir, 'sandbox'),
    // Seeding 10,000 orders is not what is measured: the sandbox does not limit it.
    rateLimitPerEndpoint: 10_000_000,
    rateLimitPerIp: 10_000_000,
  });
  const dbName = `bench_poll_${Date.now().toString(36)}`;
  await adminQuery(SERVER, `CREATE DATABASE ${dbName}`);
  const url = withDatabase(SERVER, dbName);
  const ds = createDataSource({ url, poolSize: 4 });
  await ds.initialize();
  const jobs = new JobQueue({ url, concurrency: 1, logger });
  try {
    await migrateUnderLock(ds, url);
    await jobs.migrate();

    // Seeding client: no client-side limit.
    const seeder = new ImagingClient(
      withDefaults({ baseUrl: sandbox.baseUrl, ...CREDENTIALS, createSettleMs: 0 }),
      {
        clock: systemClock,
        rateLimiter: new InMemoryRateLimiter({
          perEndpointPerMinute: 10_000_000,
          totalPerMinute: 10_000_000,
        }),
        observer: { onCall: () => undefined },
        logger: silentLogger,
      },
    );
    const upstreamIds: string[] = new Array<string>(size);
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        for (let i = next++; i < size; i = next++) {
          const created = await seeder.createOrder(
            { patient_id: `BENCH-${i}`, products: ['neuro-volumetry'] },
            { correlationId: `bench-${i}` },
          );
          upstreamIds[i] = created.orderId;
        }
      }),
    );
    await ds.query(
      `INSERT INTO orders (source, sender, state, upstream_order_id, upstream_status, upstream_status_at, request)
       SELECT 'hl7v2', 'BENCH', 'processing', u, 'PENDING', now(),
              '{"source":"hl7v2","action":"create","patient":{"identifiers":[]},"products":["neuro-volumetry"]}'::jsonb
         FROM unnest($1::text[]) u`,
      [upstreamIds],
    );

    // The measured client: production wiring, plus a counter of calls by operation.
    const counted: CallRecord[] = [];
    const audit = new AuditCallObserver(ds, silentLogger);
    const imaging = createProductionImagingClient({
      config: { baseUrl: sandbox.baseUrl, ...CREDENTIALS },
      dataSource: ds,
      logger: silentLogger,
      rateLimitScope: `bench-${dbName}`,
      observers: [audit, { onCall: (r) => counted.push(r) }],
    });
    const lifecycle = new OrderLifecycleService({
      dataSource: ds,
      jobs,
      imaging,
      acquirer: noStudies,
      events: noOrderEvents,
      logger,
      settings: {
        studyDeadlineMs: 86_400_000,
        upstreamStuckMs: 86_400_000,
        leaseMs: 60_000,
        sandboxOutcomeFromNotes: false,
      },
    });
    const poller = new OrderPollerService({
      dataSource: ds,
      client: imaging.client,
      lifecycle,
      logger,
      intervalMs: 300_000,
    });
    await imaging.client.testToken(); // the token is not part of a cycle's cost
    const cycle = async () => {
      counted.length = 0;
      const stats = (await poller.runNow())!;
      const byOperation: Record<string, number> = {};
      for (const r of counted) byOperation[r.operation] = (byOperation[r.operation] ?? 0) + 1;
      return {
        upstreamCalls: counted.filter((r) => r.operation !== 'token').length,
        byOperation,
        changed: stats.changed,
        cycleMs: stats.durationMs,
        withinTarget: counted.length <= 3 + stats.changed,
      };
    };

    const unchanged = await cycle();

    // 10 orders change: 5 cancelled (leave the active list), 5 uploaded (status moves on).
    for (const id of upstreamIds.slice(0, 5)) await seeder.cancelOrder(id);
    const uploader = new StudyUploader(seeder, {
      progress: new InMemoryUploadProgressStore(),
      slots: new InMemoryUploadSlots(100),
      clock: systemClock,
      logger: silentLogger,
    });
    for (const id of upstreamIds.slice(5, 10)) {
      const res = await fetch(
        `${sandbox.baseUrl.replace(/\/v1$/, '')}/sandbox/sample-study.dcm?seed=${id}`,
      );
      const file = join(dir, `${id}.dcm`);
      writeFileSync(file, Buffer.from(await res.arrayBuffer()));
      await uploader.upload(id, file);
    }
    await sandbox.advance(1_500);
    const tenChanged = await cycle();

    // A naive poller: GET /status for every in-flight order, timed at this size without a
    // client-side limit (with the contract's limit it would take size/600 minutes).
    const naiveStarted = Date.now();
    let cursor = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        for (let i = cursor++; i < size; i = cursor++) {
          await seeder.getStatus({ orderId: upstreamIds[i]! });
        }
      }),
    );
    const naiveMs = Date.now() - naiveStarted;
    await audit.flush();
    await imaging.client.close();
    await seeder.close();
    return {
      inFlightOrders: size,
      unchanged,
      tenChanged,
      naive: {
        upstreamCallsPerCycle: size,
        cycleMs: naiveMs,
        cycleMinutesUnderContractLimit: round(size / PER_ENDPOINT_PER_MINUTE, 2),
        ordersFollowableEvery5Min: PER_ENDPOINT_PER_MINUTE * INTERVAL_MINUTES,
        keepsUp: size <= PER_ENDPOINT_PER_MINUTE * INTERVAL_MINUTES,
      },
    };
  } finally {
    await jobs.stop();
    await ds.destroy();
    await sandbox.close();
    await adminQuery(SERVER, `DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  }
}

async function main(): Promise<void> {
  const results = [];
  for (const size of SIZES) results.push(await measure(size));
  report('poll', {
    target: 'at most 3 upstream calls per cycle plus one per changed order',
    allWithinTarget: results.every((r) => r.unchanged.withinTarget && r.tenChanged.withinTarget),
    results,
  });
}

main().catch((error: unknown) => {
  process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
