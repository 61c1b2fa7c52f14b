/**
 * bench/publish: time from a terminal status being seen to all three destinations
 * acknowledging, over 1,000 orders, with real peers on loopback: the validating FHIR engine
 * (Task + DiagnosticReport), an MLLP RIS that ACKs the ORU, Orthanc receiving the SR and the
 * encapsulated PDF by STOW-RS. Each order goes through the lifecycle's hooks as in
 * production: DELIVERED in one transaction (Task row), its stored documents in the next
 * (DiagnosticReport, ORU, SR, PDF rows); the outbox workers (real claim loops, woken by the
 * same signal as in the app, OUTBOUND_POLL_MS as the safety net) deliver them.
 * Latency per order = last `delivered_at` of its rows − the moment before the status
 * transaction began. Orders arrive at BENCH_RATE per second (default 20, a busy site's
 * afternoon compressed ×100). Target: p99 under 1 s.
 * Usage: `node scripts/with-node.cjs -r @swc-node/register bench/publish/publish.bench.ts`
 * (BENCH_ORDERS=1000, BENCH_RATE=20, BENCH_CONCURRENCY=8; DATABASE_URL names the server).
 */
import pino from 'pino';
import { migrateUnderLock } from '../../src/persistence/migrator';
import { createDataSource } from '../../src/persistence/data-source.factory';
import { DicomWebResultPublisher } from '../../src/outbound/dicomweb-result.publisher';
import { FhirResultPublisher } from '../../src/outbound/fhir-result.publisher';
import { Hl7ResultPublisher } from '../../src/outbound/hl7-result.publisher';
import { OutboxOrderEvents } from '../../src/outbound/outbox-order-events';
import { outboxSignal } from '../../src/outbound/outbox-signal';
import { OutboxWorker } from '../../src/outbound/outbox.worker';
import { DESTINATIONS, type OutboundSettings } from '../../src/outbound/outbound.settings';
import { createMrBrainStudy } from '../../test/helpers/dicom-factory';
import { startOrthanc } from '../../test/helpers/orthanc';
import { startAckingRis, startValidatingEhr } from '../../test/outbound/outbound-peers';
import { playStatus, RESULT_DOCS, seedOrder } from '../../test/outbound/outbound-seed';
import { adminQuery, percentile, report, round, withDatabase } from '../bench-utils';

const ORDERS = Number(process.env.BENCH_ORDERS ?? 1000);
const RATE = Number(process.env.BENCH_RATE ?? 20);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const POLL_MS = Number(process.env.BENCH_POLL_MS ?? 250);
/** Orders sent first and not counted: validator definitions, JIT, connections, Orthanc's cache. */
const WARMUP = Number(process.env.BENCH_WARMUP ?? 20);
const SERVER = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const logger = pino({ level: 'silent' });

async function main(): Promise<void> {
  const dbName = `bench_publish_${Date.now().toString(36)}`;
  await adminQuery(SERVER, `CREATE DATABASE ${dbName}`);
  const url = withDatabase(SERVER, dbName);
  const ds = createDataSource({ url, poolSize: 24 });
  await ds.initialize();
  const ehr = await startValidatingEhr();
  const ris = await startAckingRis();
  const orthanc = await startOrthanc();
  try {
    await migrateUnderLock(ds, url);
    const study = createMrBrainStudy({
      patient: {
        patientId: 'PAT-4711',
        patientName: 'SCHMIDT^ANNA^MARIA',
        birthDate: '19560214',
        sex: 'F',
      },
      study: {
        accessionNumber: 'ACC-0042',
        studyDate: '20240318',
        studyTime: '150000',
        studyId: 'S1',
      },
      series: [{ slices: 4, rows: 32, columns: 32 }],
    });
    for (const i of study) await orthanc.store(i.bytes);
    const source = {
      attributes: {
        studyInstanceUid: study[0]!.studyInstanceUid,
        accessionNumber: 'ACC-0042',
        patientId: 'PAT-4711',
        patientName: 'SCHMIDT^ANNA^MARIA',
        patientBirthDate: '19560214',
        patientSex: 'F',
        studyDate: '20240318',
        studyTime: '150000',
        studyId: 'S1',
        modalities: ['MR'],
      },
      instances: study.map((i) => ({
        sopClassUid: '1.2.840.10008.5.1.4.1.1.4',
        sopInstanceUid: i.sopInstanceUid,
        seriesInstanceUid: i.seriesInstanceUid,
      })),
    };
    const settings: OutboundSettings = {
      destinations: [DESTINATIONS.fhir, DESTINATIONS.hl7, DESTINATIONS.dicom],
      overrides: {},
      ormStatusMessages: false,
      hl7: {
        sendingApplication: 'IAA',
        sendingFacility: 'BENCH',
        defaultVersion: '2.5.1',
        textType: 'TX',
      },
      maxAttempts: 10,
      alertCoalesceMs: 0,
      pdfEmbedMaxBytes: 5 * 1024 * 1024,
      backoffBaseMs: 200,
      backoffMaxMs: 2000,
      devices: {},
      deviceDefaults: { manufacturer: 'Imaging Analysis Service', version: '3.2.1' },
    };
    const warmup = [];
    for (let i = 0; i < WARMUP; i++) warmup.push(await seedOrder(ds, { source }));
    const orders = [];
    for (let i = 0; i < ORDERS; i++) orders.push(await seedOrder(ds, { source }));

    const worker = new OutboxWorker({
      dataSource: ds,
      settings,
      logger,
      pollMs: POLL_MS,
      concurrency: CONCURRENCY,
      publishers: [
        new FhirResultPublisher({ baseUrl: ehr.baseUrl, dataSource: ds }),
        new Hl7ResultPublisher({
          host: '127.0.0.1',
          port: ris.port,
          responseTimeoutMs: 10_000,
          settings: settings.hl7,
          connections: CONCURRENCY,
        }),
        new DicomWebResultPublisher({ baseUrl: orthanc.dicomWebUrl }),
      ],
    });
    const unsubscribe = outboxSignal.subscribe(() => worker.kick());
    const events = new OutboxOrderEvents(settings, () => outboxSignal.notify());
    worker.start();
    const drained = async () => {
      const deadline = Date.now() + 120_000;
      for (;;) {
        const [{ n }] = (await ds.query(
          `SELECT count(*)::int AS n FROM outbox WHERE status = 'pending'`,
        )) as Array<{ n: number }>;
        if (n === 0 || Date.now() > deadline) return;
        await new Promise((r) => setTimeout(r, 200));
      }
    };
    for (const order of warmup) {
      await playStatus(ds, events, order, 'DELIVERED', { documents: RESULT_DOCS });
    }
    await drained();
    const measured = new Set(orders.map((o) => o.id));

    const seenAt = new Map<string, number>();
    const started = Date.now();
    const arrivals = orders.map(async (order, i) => {
      const due = started + (i * 1000) / RATE;
      await new Promise((r) => setTimeout(r, Math.max(0, due - Date.now())));
      seenAt.set(order.id, Date.now());
      await playStatus(ds, events, order, 'DELIVERED', { documents: RESULT_DOCS });
    });
    await Promise.all(arrivals);
    await drained();
    const wall = Date.now() - started;
    unsubscribe();
    await worker.stop();

    const rows: Array<{
      order_id: string;
      destination: string;
      status: string;
      attempts: number;
      delivered_ms: string | null;
    }> = await ds.query(
      `SELECT order_id, destination, status, attempts, (extract(epoch FROM delivered_at) * 1000)::bigint::text AS delivered_ms FROM outbox`,
    );
    const perOrder = new Map<string, number>();
    const perDestination: Record<string, number[]> = {};
    let undelivered = 0;
    let retried = 0;
    for (const r of rows) {
      if (!measured.has(r.order_id)) continue;
      if (r.attempts > 1) retried += 1;
      if (r.status !== 'delivered' || !r.delivered_ms) {
        undelivered += 1;
        continue;
      }
      const latency = Number(r.delivered_ms) - seenAt.get(r.order_id)!;
      perOrder.set(r.order_id, Math.max(perOrder.get(r.order_id) ?? 0, latency));
      (perDestination[r.destination] ??= []).push(latency);
    }
    const all = [...perOrder.values()];
    const stats = (v: number[]) => ({
      p50: round(percentile(v, 50)),
      p99: round(percentile(v, 99)),
      max: round(Math.max(...v)),
    });
    report('publish', {
      orders: ORDERS,
      ratePerSecond: RATE,
      concurrencyPerDestination: CONCURRENCY,
      pollMs: POLL_MS,
      warmupOrders: WARMUP,
      documentsPerOrder: rows.filter((r) => measured.has(r.order_id)).length / ORDERS,
      allThreeAcknowledgedMs: stats(all),
      perDestinationMs: Object.fromEntries(
        Object.entries(perDestination).map(([d, v]) => [d, stats(v)]),
      ),
      undelivered,
      retriedRows: retried,
      wallSeconds: round(wall / 1000),
      targetP99Ms: 1000,
      meetsTarget: percentile(all, 99) < 1000 && undelivered === 0,
      ehrRejected: ehr.rejected,
      risMessages: ris.received.length,
    });
  } finally {
    await ris.close();
    await ehr.close();
    await orthanc.stop();
    await ds.destroy();
    await adminQuery(SERVER, `DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
