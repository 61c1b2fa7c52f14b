import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { DiagnosticReport } from '@medplum/fhirtypes';
import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
import { parseHl7 } from '../../src/hl7/hl7-message';
import { freePort } from '../../src/persistence/embedded-postgres';
import type { SandboxOptions } from '../../src/sandbox/sandbox-options';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { TEST_TOKENS } from '../helpers/adapter';
import { spawnAdapter, waitHealthy, type AdapterProcess } from '../helpers/adapter-process';
import { ackSummary } from '../helpers/hl7-fixtures';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import {
  newOrderSpec,
  ormMessage,
  SANDBOX_CLIENT,
  studyFor,
  writeSiteConfig,
} from '../e2e/e2e-support';
import { serviceRequestFor, type Hl7OrderSpec } from '../e2e/e2e-support';
import {
  startAckingRis,
  startValidatingEhr,
  type TestEhr,
  type TestRis,
} from '../outbound/outbound-peers';

/**
 * Shared orchestration of the "proof under fire" suites (docs/fire.md): real peers on
 * loopback that outlive the adapter (the sandbox upstream in the Jest process, Orthanc, the
 * validating FHIR engine, an ACKing RIS), adapter processes (`src/main.ts`) on fixed ports so
 * a restarted one is found where the senders left it, order senders that behave like a RIS
 * or an EHR (resend until acknowledged), and the end-of-run accounting.
 */

/** `CRASH_LONG=1` selects the long versions (10,000 orders, more kills). */
export const LONG = process.env.CRASH_LONG === '1';

export const TERMINAL = ['delivered', 'failed', 'cancelled'];

export interface FirePeers {
  dir: string;
  sandbox: RunningSandbox;
  orthanc: RunningOrthanc;
  ehr: TestEhr;
  ris: TestRis;
  config: string;
  close(): Promise<void>;
}

export async function startFirePeers(
  sandbox: Partial<SandboxOptions> = {},
  risBehaviour: Parameters<typeof startAckingRis> = [],
): Promise<FirePeers> {
  const dir = mkdtempSync(join(tmpdir(), 'fire-'));
  const orthanc = await startOrthanc();
  const ehr = await startValidatingEhr();
  const ris = await startAckingRis(...risBehaviour);
  const sb = await startSandbox({
    port: 0,
    host: '127.0.0.1',
    dataDir: join(dir, 'sandbox'),
    // Each upstream step takes a twentieth of its nominal time: an order is analysed in
    // about a second, so hundreds of orders fit CI's budget.
    timeScale: 0.05,
    ...sandbox,
  });
  return {
    dir,
    sandbox: sb,
    orthanc,
    ehr,
    ris,
    config: writeSiteConfig(dir),
    async close() {
      await sb.close();
      await ris.close();
      await ehr.close();
      await orthanc.stop();
    },
  };
}

/** One adapter process that can be killed and started again on the same ports and data. */
export class FireAdapter {
  proc?: AdapterProcess;
  /** Everything every incarnation wrote to stdout/stderr (scanned for PHI at the end). */
  private logs = '';
  starts = 0;
  kills = 0;

  private constructor(
    readonly httpPort: number,
    readonly mllpPort: number,
    private readonly env: () => Record<string, string>,
  ) {}

  static async create(env: () => Record<string, string>): Promise<FireAdapter> {
    return new FireAdapter(await freePort(), await freePort(), env);
  }

  get httpUrl(): string {
    return `http://127.0.0.1:${this.httpPort}`;
  }

  get alive(): boolean {
    return !!this.proc && this.proc.child.exitCode === null && this.proc.child.signalCode === null;
  }

  async start(): Promise<number> {
    this.proc = spawnAdapter({
      ...this.env(),
      HTTP_PORT: String(this.httpPort),
      HTTP_HOST: '127.0.0.1',
      MLLP_PORT: String(this.mllpPort),
      MLLP_HOST: '127.0.0.1',
    });
    this.starts++;
    return waitHealthy(this.httpUrl, 90_000, this.proc);
  }

  /** SIGKILL: no shutdown hook runs, in-flight work is cut where it stands. */
  async kill(): Promise<void> {
    if (!this.proc || !this.alive) return;
    this.proc.child.kill('SIGKILL');
    await this.proc.exited;
    this.logs += this.proc.output();
    this.kills++;
  }

  async stop(): Promise<void> {
    if (!this.proc) return;
    if (this.alive) {
      this.proc.child.kill('SIGTERM');
      await this.proc.exited;
    }
    this.logs += this.proc.output();
    this.proc = undefined;
  }

  output(): string {
    return this.logs + (this.proc && this.alive ? this.proc.output() : '');
  }
}

/** Environment of an adapter wired to the fire peers. */
export function adapterEnv(
  peers: FirePeers,
  databaseUrl: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    DATABASE_URL: databaseUrl,
    DATA_DIR: join(peers.dir, 'data'),
    IMAGING_BASE_URL: peers.sandbox.baseUrl,
    ...SANDBOX_CLIENT,
    DICOMWEB_URL: peers.orthanc.dicomWebUrl,
    FHIR_SERVER_URL: peers.ehr.baseUrl,
    RIS_MLLP_HOST: '127.0.0.1',
    RIS_MLLP_PORT: String(peers.ris.port),
    RIS_MLLP_TIMEOUT_SECONDS: '5',
    STUDY_QUIET_PERIOD_SECONDS: '1',
    CONFIG_FILE: peers.config,
    FHIR_UNKNOWN_PROCEDURE: 'default-products:neuro-volumetry',
    POLL_INTERVAL_SECONDS: '2',
    ORDER_LEASE_SECONDS: '3',
    OUTBOUND_BACKOFF_BASE_MS: '200',
    OUTBOUND_BACKOFF_MAX_MS: '2000',
    OUTBOUND_MAX_ATTEMPTS: '30',
    LOG_LEVEL: 'info',
    API_TOKENS: Object.entries(TEST_TOKENS)
      .map(([role, token]) => `${role}:${token}`)
      .join(','),
    ...extra,
  };
}

export interface SentOrder {
  spec: Hl7OrderSpec;
  via: 'hl7' | 'fhir';
  /** Times the sender had to resend before it got its AA / 2xx. */
  resends: number;
  acked: boolean;
}

/** A FHIR ServiceRequest as an EHR posts it (contained Patient, placer and accession). */
export function serviceRequest(spec: Hl7OrderSpec): Record<string, unknown> {
  return serviceRequestFor(spec, {
    identifierBase: 'http://fire.example',
    occurrenceDateTime: '2026-11-21T10:00:00Z',
    requesterDisplay: 'Dr. Paula Arzt',
  });
}

/**
 * What a sender got back: `AA`, `AR 207` … for MLLP (code and error codes), the HTTP status
 * (and `OperationOutcome` when the body is one) for FHIR, `no answer: …` when the
 * connection failed or timed out.
 */
export interface SenderAnswer {
  via: 'hl7' | 'fhir';
  at: number;
  accepted: boolean;
  answer: string;
}

/**
 * Sends orders the way a RIS (MLLP) and an EHR (FHIR REST) do: one at a time per channel,
 * each resent — same message, same control id — until it is acknowledged, however long the
 * adapter is down. Stops resending when `deadline` passes (the order is then not ACKed and
 * not counted); a function deadline is read before every attempt, so a suite can end its
 * senders at once (e.g. when it fails).
 */
export async function sendOrders(
  adapter: () => FireAdapter,
  orders: SentOrder[],
  deadlineMs: number | (() => number),
  channels = 2,
  onAnswer?: (answer: SenderAnswer) => void,
): Promise<void> {
  const queues: SentOrder[][] = Array.from({ length: channels }, () => []);
  orders.forEach((o, i) => queues[i % channels]!.push(o));
  await Promise.all(
    queues.map(async (queue) => {
      let mllp: MllpClient | undefined;
      let mllpPort = 0;
      for (const order of queue) {
        for (;;) {
          if (Date.now() > (typeof deadlineMs === 'number' ? deadlineMs : deadlineMs())) {
            await mllp?.close().catch(() => undefined);
            return;
          }
          const a = adapter();
          try {
            if (order.via === 'hl7') {
              if (!mllp || mllpPort !== a.mllpPort) {
                await mllp?.close().catch(() => undefined);
                mllp = new MllpClient({
                  host: '127.0.0.1',
                  port: a.mllpPort,
                  responseTimeoutMs: 10_000,
                });
                mllpPort = a.mllpPort;
              }
              const ack = ackSummary(await mllp.send(ormMessage(order.spec)));
              onAnswer?.({
                via: 'hl7',
                at: Date.now(),
                accepted: ack.code === 'AA',
                // The HL7 error codes (table 0357), from ERR-3 (v2.5) or ERR-1.4 (v2.3).
                answer: [ack.code, ...ack.errors.map((e) => /(\d{3})[&^][^|]*HL70357/.exec(e)?.[1])]
                  .filter(Boolean)
                  .join(' '),
              });
              if (ack.code === 'AA') break;
            } else {
              const res = await fetch(`${a.httpUrl}/fhir/ServiceRequest`, {
                method: 'POST',
                headers: {
                  authorization: `Bearer ${TEST_TOKENS.sender}`,
                  'content-type': 'application/fhir+json',
                  // The EHR's own idempotency: a resend must not create a second order.
                  'if-none-exist': `identifier=http://fire.example/ehr/orders|${order.spec.placer}`,
                },
                body: JSON.stringify(serviceRequest(order.spec)),
                signal: AbortSignal.timeout(10_000),
              });
              const body = await res.text();
              const ok = res.status >= 200 && res.status < 300;
              onAnswer?.({
                via: 'fhir',
                at: Date.now(),
                accepted: ok,
                answer: `${res.status}${!ok && body.includes('"OperationOutcome"') ? ' OperationOutcome' : ''}`,
              });
              if (ok) break;
            }
          } catch (error) {
            onAnswer?.({
              via: order.via,
              at: Date.now(),
              accepted: false,
              answer: `no answer: ${(error as Error).name}`,
            });
            await mllp?.close().catch(() => undefined);
            mllp = undefined;
          }
          order.resends++;
          await sleep(250);
        }
        order.acked = true;
      }
      await mllp?.close().catch(() => undefined);
    }),
  );
}

/** Order specs with their studies stored in Orthanc (2 slices of 32×32: small, real). */
export async function prepareOrders(
  orthanc: RunningOrthanc,
  count: number,
  fhirShare = 0.5,
): Promise<SentOrder[]> {
  const orders: SentOrder[] = [];
  for (let i = 0; i < count; i++) {
    const spec = newOrderSpec('sandbox-outcome: delivered');
    for (const instance of studyFor({ ...spec, slices: 2 })) await orthanc.store(instance.bytes);
    orders.push({
      spec,
      via: i % Math.round(1 / fhirShare) === 0 ? 'fhir' : 'hl7',
      resends: 0,
      acked: false,
    });
  }
  return orders;
}

export let lastAdminAnswer = '';

export async function adminPost(adapter: FireAdapter, path: string): Promise<void> {
  try {
    const res = await fetch(`${adapter.httpUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
      signal: AbortSignal.timeout(30_000),
    });
    lastAdminAnswer = `${res.status} ${await res.text()}`;
  } catch {
    // the adapter is down or restarting: the next round tries again
  }
}

export interface Progress {
  states: Record<string, number>;
  outbox: Record<string, number>;
  /**
   * Non-terminal orders whose job has been locked for over 20 s: normally a job a killed
   * process was running, until the dead-worker sweep frees it (JOB_WORKER_DEAD_AFTER_SECONDS).
   */
  lockedJobOrders: number;
}

export async function progress(pg: PgClient): Promise<Progress> {
  const s = await pg.query(`SELECT state, count(*)::int AS n FROM orders GROUP BY state`);
  const o = await pg.query(`SELECT status, count(*)::int AS n FROM outbox GROUP BY status`);
  const l = await pg.query(
    `SELECT count(DISTINCT o.id)::int AS n FROM orders o
       JOIN graphile_worker._private_jobs j ON j.payload->>'orderId' = o.id::text
      WHERE j.locked_at IS NOT NULL AND j.locked_at < now() - interval '20 seconds'
        AND o.state NOT IN ('delivered', 'failed', 'cancelled')`,
  );
  return {
    states: Object.fromEntries(s.rows.map((r) => [r.state as string, r.n as number])),
    outbox: Object.fromEntries(o.rows.map((r) => [r.status as string, r.n as number])),
    lockedJobOrders: l.rows[0].n as number,
  };
}

/**
 * Drives the run to its end as an operator would: the lifecycle tick and a poll cycle
 * (`POST /api/orders/poll-cycle`, what the minute cron does) every `everyMs`, until every
 * order is terminal, no outbox row is pending and no job is left that can still run — or
 * the deadline passes (then "stuck"). An order turns `delivered` before its documents are
 * fetched and published, and a job may still be due (a retry, the cron's minute jobs), so
 * terminal states alone are not the end. Tolerated by design, and only these: the minute
 * tick (cron adds it again every minute). Jobs that used up their attempts never run
 * again, so they do not hold the end back; `jobs.failedForGood` reports them and the
 * suites require none.
 */
export async function driveToEnd(
  adapters: () => FireAdapter[],
  pg: PgClient,
  expected: number,
  deadlineMs: number,
  everyMs = 1_000,
): Promise<{ done: boolean; last: Progress; jobs: OpenJobs }> {
  let last = await progress(pg);
  let jobs = await openJobs(pg);
  while (Date.now() < deadlineMs) {
    const alive = adapters().filter((a) => a.alive);
    if (alive.length > 0) await adminPost(alive[0]!, '/api/orders/poll-cycle');
    last = await progress(pg);
    jobs = await openJobs(pg);
    const terminal = TERMINAL.reduce((n, s) => n + (last.states[s] ?? 0), 0);
    if (terminal >= expected && !last.outbox.pending && jobs.open - jobs.failedForGood === 0)
      return { done: true, last, jobs };
    await sleep(everyMs);
  }
  return { done: false, last, jobs };
}

/** One group of open jobs (see `openJobs`). */
export interface OpenJobGroup {
  task: string;
  n: number;
  /** attempts/max_attempts */
  attempts: string;
  /** Seconds from now until the group's earliest and latest run_at (negative: due). */
  runInSeconds: [number, number];
  locked: number;
  lastError: string | null;
}

export interface OpenJobs {
  /** Jobs (other than the minute tick) plus `job_outbox` rows. */
  open: number;
  /** Of those: jobs that used up their attempts; graphile-worker keeps them for good. */
  failedForGood: number;
  /** Of those: `job_outbox` rows not yet moved into the queue. */
  outbox: number;
  groups: OpenJobGroup[];
}

/**
 * Jobs still open: graphile-worker jobs other than the minute tick ('order.lifecycle-tick',
 * which cron adds again every minute by design), plus `job_outbox` rows not yet relayed —
 * the fault suite's "no job left". Grouped by task, attempts/max_attempts, locked or not and
 * last error (truncated), for the suites' end-of-run report.
 */
export async function openJobs(pg: PgClient): Promise<OpenJobs> {
  const { rows } = await pg.query(
    `SELECT task_identifier AS task, count(*)::int AS n,
            attempts || '/' || max_attempts AS attempts,
            bool_and(attempts >= max_attempts AND locked_by IS NULL) AS failed_for_good,
            round(extract(epoch FROM min(run_at) - now()))::int AS first_run,
            round(extract(epoch FROM max(run_at) - now()))::int AS last_run,
            count(*) FILTER (WHERE locked_by IS NOT NULL)::int AS locked,
            left(last_error, 120) AS last_error
       FROM graphile_worker.jobs
      WHERE task_identifier <> 'order.lifecycle-tick'
      GROUP BY task_identifier, attempts, max_attempts, locked_by IS NOT NULL, left(last_error, 120)
      ORDER BY 1, 3`,
  );
  const { rows: outbox } = await pg.query(`SELECT count(*)::int AS n FROM job_outbox`);
  const groups: OpenJobGroup[] = rows.map((r) => ({
    task: r.task as string,
    n: r.n as number,
    attempts: r.attempts as string,
    runInSeconds: [r.first_run as number, r.last_run as number],
    locked: r.locked as number,
    lastError: r.last_error as string | null,
  }));
  const outboxRows = outbox[0].n as number;
  return {
    open: groups.reduce((n, g) => n + g.n, 0) + outboxRows,
    failedForGood: rows.reduce((n, r) => n + (r.failed_for_good ? (r.n as number) : 0), 0),
    outbox: outboxRows,
    groups,
  };
}

/** Jobs the adapters' dead-worker sweeps unlocked (from their logs), and how many sweeps did. */
export function deadWorkerUnlocks(logs: string): { sweeps: number; jobs: number } {
  let sweeps = 0;
  let jobs = 0;
  for (const line of logs.split('\n')) {
    if (!line.includes('jobs of dead job workers unlocked')) continue;
    try {
      jobs += Number((JSON.parse(line) as { jobsUnlocked?: number }).jobsUnlocked ?? 0);
      sweeps++;
    } catch {
      // not a JSON log line
    }
  }
  return { sweeps, jobs };
}

export interface Accounting {
  ackedOrders: number;
  ordersInDb: number;
  duplicateOrdersInDb: number;
  upstreamOrders: number;
  upstreamDuplicates: number;
  ackedMissingUpstream: number;
  delivered: number;
  notDelivered: Record<string, number>;
  outbox: Record<string, number>;
  /** Per destination: orders with exactly one result document after the receiver's dedupe. */
  fhirReports: { orders: number; exactlyOne: number; more: number; none: number };
  risOru: {
    messages: number;
    distinctControlIds: number;
    resentSameControlId: number;
    ordersWithOneResult: number;
    ordersWithMore: number;
  };
  dicomSr: { orders: number; exactlyOne: number; more: number; none: number };
}

/** Counts everything at the end of a run; see the suites for what must hold. */
export async function account(
  pg: PgClient,
  peers: FirePeers,
  sent: SentOrder[],
): Promise<Accounting> {
  const acked = sent.filter((o) => o.acked);
  const placers = acked.map((o) => o.spec.placer);
  const { rows: dbOrders } = await pg.query(
    `SELECT id::text AS id, placer_order_number AS placer, state, upstream_order_id
       FROM orders WHERE placer_order_number = ANY($1::text[])`,
    [placers],
  );
  const byPlacer = new Map<string, Array<Record<string, string>>>();
  for (const r of dbOrders) byPlacer.set(r.placer, [...(byPlacer.get(r.placer) ?? []), r]);
  const duplicateOrdersInDb = [...byPlacer.values()].filter((v) => v.length > 1).length;

  // Upstream: every order we own carries our order id as correlation_id.
  const upstreamByCorrelation = new Map<string, number>();
  for (const o of peers.sandbox.state.orders.values()) {
    const c = String((o.apiMetadata as Record<string, unknown>).correlation_id ?? '');
    upstreamByCorrelation.set(c, (upstreamByCorrelation.get(c) ?? 0) + 1);
  }
  let upstreamDuplicates = 0;
  let ackedMissingUpstream = 0;
  for (const r of dbOrders) {
    const n = upstreamByCorrelation.get(r.id) ?? 0;
    if (n > 1) upstreamDuplicates++;
    if (n === 0) ackedMissingUpstream++;
  }
  const notDelivered: Record<string, number> = {};
  let delivered = 0;
  for (const r of dbOrders) {
    if (r.state === 'delivered') delivered++;
    else notDelivered[r.state] = (notDelivered[r.state] ?? 0) + 1;
  }
  const { rows: outboxRows } = await pg.query(
    `SELECT status, count(*)::int AS n FROM outbox GROUP BY status`,
  );

  // FHIR: DiagnosticReports by our deterministic identifier, per order.
  const reports = await peers.ehr.search<DiagnosticReport>('DiagnosticReport', '_count=100000');
  const reportsPerValue = new Map<string, number>();
  for (const r of reports) {
    for (const id of r.identifier ?? [])
      if (id.value) reportsPerValue.set(id.value, (reportsPerValue.get(id.value) ?? 0) + 1);
  }
  const fhir = { orders: dbOrders.length, exactlyOne: 0, more: 0, none: 0 };
  for (const r of dbOrders) {
    const n = reportsPerValue.get(r.id) ?? 0;
    if (n === 1) fhir.exactlyOne++;
    else if (n > 1) fhir.more++;
    else fhir.none++;
  }

  // RIS: ORU^R01 messages; the RIS de-duplicates on MSH-10 (a resend keeps it).
  const orus = peers.ris.received
    .map((m) => parseHl7(Buffer.from(m, 'utf8')))
    .filter((m) => m.messageType.code === 'ORU');
  const controlIds = new Map<string, number>();
  const resultsPerPlacer = new Map<string, Set<string>>();
  for (const m of orus) {
    controlIds.set(m.controlId, (controlIds.get(m.controlId) ?? 0) + 1);
    const obr = m.segments.find((s) => s.id === 'OBR');
    const placer = obr?.value(2) ?? '';
    resultsPerPlacer.set(placer, (resultsPerPlacer.get(placer) ?? new Set()).add(m.controlId));
  }
  let ordersWithOneResult = 0;
  let ordersWithMore = 0;
  for (const p of placers) {
    const n = resultsPerPlacer.get(p)?.size ?? 0;
    if (n === 1) ordersWithOneResult++;
    else if (n > 1) ordersWithMore++;
  }

  // PACS: SR instances per order's study in Orthanc (SOP Instance UIDs are deterministic,
  // so a resent SR overwrites itself; a second, different SR would show here).
  const dicom = { orders: dbOrders.length, exactlyOne: 0, more: 0, none: 0 };
  const srPerStudy = await srInstancesPerStudy(peers.orthanc);
  for (const o of acked) {
    const n = srPerStudy.get(o.spec.studyUid) ?? 0;
    if (n === 1) dicom.exactlyOne++;
    else if (n > 1) dicom.more++;
    else dicom.none++;
  }

  return {
    ackedOrders: acked.length,
    ordersInDb: byPlacer.size,
    duplicateOrdersInDb,
    upstreamOrders: peers.sandbox.state.orders.size,
    upstreamDuplicates,
    ackedMissingUpstream,
    delivered,
    notDelivered,
    outbox: Object.fromEntries(outboxRows.map((r) => [r.status as string, r.n as number])),
    fhirReports: fhir,
    risOru: {
      messages: orus.length,
      distinctControlIds: controlIds.size,
      resentSameControlId: orus.length - controlIds.size,
      ordersWithOneResult,
      ordersWithMore,
    },
    dicomSr: dicom,
  };
}

async function srInstancesPerStudy(orthanc: RunningOrthanc): Promise<Map<string, number>> {
  const res = await fetch(`${orthanc.url}/tools/find`, {
    method: 'POST',
    body: JSON.stringify({ Level: 'Series', Query: { Modality: 'SR' }, Expand: true }),
  });
  const series = (await res.json()) as Array<{
    ParentStudy: string;
    Instances: string[];
  }>;
  const perStudy = new Map<string, number>();
  const studyUid = new Map<string, string>();
  for (const s of series) {
    let uid = studyUid.get(s.ParentStudy);
    if (!uid) {
      const st = (await (await fetch(`${orthanc.url}/studies/${s.ParentStudy}`)).json()) as {
        MainDicomTags: { StudyInstanceUID: string };
      };
      uid = st.MainDicomTags.StudyInstanceUID;
      studyUid.set(s.ParentStudy, uid);
    }
    perStudy.set(uid, (perStudy.get(uid) ?? 0) + s.Instances.length);
  }
  return perStudy;
}

/**
 * PHI and secrets in logs: the test patients' names and identifiers, and any presigned URL
 * signature (`signature=` query parameter, src/sandbox/presigned-url.ts).
 */
export function scanLogs(logs: string, sent: SentOrder[]): string[] {
  const findings: string[] = [];
  const needles = new Set<string>(['MUSTERMANN', 'Mustermann', 'ERIKA^', 'Lindenweg', '19640812']);
  for (const o of sent) needles.add(o.spec.patientId);
  for (const n of needles) if (logs.includes(n)) findings.push(`log contains ${n}`);
  const sig = /[?&](X-Sandbox-Signature|signature|X-Amz-Signature)=[^&\s"]+/i.exec(logs);
  if (sig) findings.push(`log contains a presigned URL signature (${sig[1]})`);
  return findings;
}

/** One JSON line the README quotes. */
export function reportFigures(suite: string, figures: Record<string, unknown>): void {
  process.stdout.write(`FIRE ${JSON.stringify({ suite, long: LONG, ...figures })}\n`);
}

export async function connect(url: string): Promise<PgClient> {
  const pg = new PgClient({ connectionString: url });
  await pg.connect();
  return pg;
}

/**
 * The verdict the kill suites share (crash, replicas, db-restart): every ACKed order once in
 * the database and upstream, and once at each destination after its own de-duplication;
 * every order delivered; no job held by a killed process, left open or out of attempts; no
 * outbox row pending or dead. One comparison, so that a failure shows every figure at once.
 */
export function expectExactlyOnceAndComplete(
  acc: Accounting,
  end: { last: Progress; jobs: OpenJobs },
  orders: number,
): void {
  expect({
    ackedOrders: acc.ackedOrders,
    ordersInDb: acc.ordersInDb,
    duplicateOrdersInDb: acc.duplicateOrdersInDb,
    upstreamOrders: acc.upstreamOrders,
    upstreamDuplicates: acc.upstreamDuplicates,
    ackedMissingUpstream: acc.ackedMissingUpstream,
    delivered: acc.delivered,
    fhirReports: { exactlyOne: acc.fhirReports.exactlyOne, more: acc.fhirReports.more },
    risOru: {
      ordersWithOneResult: acc.risOru.ordersWithOneResult,
      ordersWithMore: acc.risOru.ordersWithMore,
    },
    dicomSr: { exactlyOne: acc.dicomSr.exactlyOne, more: acc.dicomSr.more },
    outbox: { pending: acc.outbox.pending ?? 0, dead: acc.outbox.dead ?? 0 },
    lockedJobOrders: end.last.lockedJobOrders,
    openJobs: end.jobs.open,
    openJobGroups: end.jobs.groups,
  }).toEqual({
    ackedOrders: orders,
    ordersInDb: orders,
    duplicateOrdersInDb: 0,
    upstreamOrders: orders,
    upstreamDuplicates: 0,
    ackedMissingUpstream: 0,
    delivered: orders,
    fhirReports: { exactlyOne: orders, more: 0 },
    risOru: { ordersWithOneResult: orders, ordersWithMore: 0 },
    dicomSr: { exactlyOne: orders, more: 0 },
    outbox: { pending: 0, dead: 0 },
    lockedJobOrders: 0,
    openJobs: 0,
    openJobGroups: [],
  });
}
