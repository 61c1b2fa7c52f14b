import { setTimeout as sleep } from 'node:timers/promises';
import type { Client as PgClient } from 'pg';
import { parseHl7 } from '../../src/hl7/hl7-message';
import { FaultInjector } from '../../src/sandbox/fault-injector';
import { RateLimiter } from '../../src/sandbox/rate-limiter';
import { TEST_TOKENS } from '../helpers/adapter';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import {
  account,
  adapterEnv,
  adminPost,
  connect,
  FireAdapter,
  LONG,
  openJobs,
  prepareOrders,
  reportFigures,
  scanLogs,
  sendOrders,
  startFirePeers,
  TERMINAL,
  type FirePeers,
} from './fire-support';

const ORDERS = Number(process.env.FIRE_ORDERS ?? (LONG ? 2_000 : 40));
/** The sandbox's per-endpoint limit (per minute) and ours, a little below it. */
const UPSTREAM_LIMIT = 60;
const OUR_LIMIT = 50;
/** HL7 orders whose results the RIS refuses for good (AR): the only dead letters allowed. */
const REFUSED_BY_RIS = 2;
const BUDGET_MS = Number(process.env.FIRE_BUDGET_SECONDS ?? (LONG ? 3 * 3600 : 300)) * 1000;
jest.setTimeout(BUDGET_MS + 120_000);

/** Every request that reached the sandbox's per-endpoint limiter, and its own refusals. */
const endpointHits = new Map<string, number[]>();
const limiterRefusals = new Map<string, number>();
const originalHit = RateLimiter.prototype.hit;
RateLimiter.prototype.hit = function hit(this: RateLimiter, key: string, limit: number) {
  const wait = originalHit.call(this, key, limit);
  if (key.startsWith('ep:')) {
    // `ep:<client ip>:<METHOD> <path>` (the ip may hold colons)
    const endpoint = /[A-Z]+ \/.*$/.exec(key)?.[0] ?? key;
    const times = endpointHits.get(endpoint) ?? [];
    times.push(Date.now());
    endpointHits.set(endpoint, times);
    if (wait !== null) limiterRefusals.set(endpoint, (limiterRefusals.get(endpoint) ?? 0) + 1);
  }
  return wait;
};
/** The faults the sandbox injected, by kind. */
const injected: Record<string, number> = {};
const originalDecide = FaultInjector.prototype.decide;
FaultInjector.prototype.decide = function decide(this: FaultInjector, method, path) {
  const d = originalDecide.call(this, method, path);
  const kind =
    d.kind === 'error'
      ? String(d.status)
      : d.kind === 'rate'
        ? '429'
        : d.kind === 'drop'
          ? 'dropped'
          : d.dropAfter
            ? 'answer-lost'
            : undefined;
  if (kind) injected[kind] = (injected[kind] ?? 0) + 1;
  if (d.delayMs > 0) injected.slow = (injected.slow ?? 0) + 1;
  return d;
};

/** The most requests one endpoint received in any 60 s (sliding, stricter than the sandbox's fixed windows). */
function maxPerMinute(): { endpoint: string; requests: number } {
  let best = { endpoint: '', requests: 0 };
  for (const [endpoint, times] of endpointHits) {
    let from = 0;
    for (let to = 0; to < times.length; to++) {
      while (times[to]! - times[from]! >= 60_000) from++;
      if (to - from + 1 > best.requests) best = { endpoint, requests: to - from + 1 };
    }
  }
  return best;
}

function counter(metrics: string, name: string, match = ''): number {
  return metrics
    .split('\n')
    .filter((l) => l.startsWith(name) && l.includes(match))
    .reduce((n, l) => n + Number(l.split(' ').pop()), 0);
}

/**
 * Done means every order is terminal, no outbox row is pending and no job is left: an order
 * turns `delivered` before its documents are fetched and published, so terminal states
 * alone are not "results delivered".
 */
async function settledState(pg: PgClient) {
  const states = await pg.query(`SELECT state, count(*)::int AS n FROM orders GROUP BY state`);
  const outbox = await pg.query(
    `SELECT count(*) FILTER (WHERE status = 'pending')::int AS pending FROM outbox`,
  );
  const jobs = await openJobs(pg);
  const byState = Object.fromEntries(states.rows.map((r) => [r.state as string, r.n as number]));
  return {
    terminal: TERMINAL.reduce((n, s) => n + (byState[s] ?? 0), 0),
    states: byState,
    pendingOutbox: outbox.rows[0].pending as number,
    openJobs: jobs.open,
  };
}

/**
 * Fault suite: the sandbox misbehaves on 20 % of its answers (500/503, 429, slow, dropped
 * connections, answers lost after the work was done) and enforces a per-endpoint limit; the
 * RIS is slow at times (beyond our reply timeout now and then), answers AE (busy) to some
 * messages and refuses (AR) every result of two orders; the EHR has short outages (503).
 * Every order must complete, exactly once upstream and once per destination; our limiter
 * must keep every endpoint under the upstream's limit (the sandbox never refuses for the
 * limit itself); retries must show in /metrics; the only dead letters are the results the
 * RIS refused for good.
 */
describe('fault suite: 20 % upstream faults, a per-endpoint limit, slow and refusing peers', () => {
  let db: TestDatabase;
  let pg: PgClient;
  let peers: FirePeers;
  let adapter: FireAdapter;
  const refusedPlacers = new Set<string>();

  beforeAll(async () => {
    db = await createTestDatabase();
    pg = await connect(db.url);
    peers = await startFirePeers(
      {
        rateLimitPerEndpoint: UPSTREAM_LIMIT,
        faults: {
          seed: 1121,
          endpoints: {
            '*': {
              error5xx: 0.08,
              rate429: 0.05,
              drop: 0.03,
              dropAfter: 0.02,
              slowMs: 800,
              slowShare: 0.05,
            },
          },
        },
      },
      [
        (n, _controlId, message) => {
          const obr = parseHl7(Buffer.from(message, 'utf8')).segments.find((s) => s.id === 'OBR');
          if (refusedPlacers.has(obr?.value(2) ?? '')) return 'AR';
          return n % 10 === 3 ? 'AE' : 'AA';
        },
        undefined,
        // Slow now and then; one message in 29 takes longer than our 5 s reply timeout.
        (n) => (n % 29 === 5 ? 6_000 : n % 10 === 7 ? 1_500 : 0),
      ],
    );
    adapter = await FireAdapter.create(() =>
      adapterEnv(peers, db.url, {
        IMAGING_RATE_LIMIT_PER_ENDPOINT: String(OUR_LIMIT),
        IMAGING_RETRY_MAX_ATTEMPTS: '8',
      }),
    );
  });
  afterAll(async () => {
    await adapter?.stop();
    await pg?.end();
    await peers?.close();
    await db?.drop();
    RateLimiter.prototype.hit = originalHit;
    FaultInjector.prototype.decide = originalDecide;
  });

  it('completes every order exactly once without exceeding the limit', async () => {
    const sent = await prepareOrders(peers.orthanc, ORDERS);
    for (const o of sent.filter((s) => s.via === 'hl7').slice(0, REFUSED_BY_RIS))
      refusedPlacers.add(o.spec.placer);
    const started = Date.now();
    await adapter.start();

    // The EHR is down (503) for 3 s in every 20.
    const outages = setInterval(() => {
      peers.ehr.inner.failWith = 503;
      setTimeout(() => (peers.ehr.inner.failWith = undefined), 3_000).unref();
    }, 20_000);
    let last = await settledState(pg);
    let done = false;
    try {
      await sendOrders(() => adapter, sent, started + BUDGET_MS);
      // The minute tick driven faster, as an operator could (POST /api/orders/poll-cycle).
      while (Date.now() < started + BUDGET_MS) {
        await adminPost(adapter, '/api/orders/poll-cycle');
        last = await settledState(pg);
        if (last.terminal >= ORDERS && last.pendingOutbox === 0 && last.openJobs === 0) {
          done = true;
          break;
        }
        await sleep(1_000);
      }
    } finally {
      clearInterval(outages);
      peers.ehr.inner.failWith = undefined;
    }
    const durationSeconds = Math.round((Date.now() - started) / 1000);

    const metrics = await (
      await fetch(`${adapter.httpUrl}/metrics`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
      })
    ).text();
    const acc = await account(pg, peers, sent);
    const { rows: dead } = await pg.query(
      `SELECT o.placer_order_number AS placer, x.destination, x.kind
         FROM outbox x JOIN orders o ON o.id = x.order_id WHERE x.status = 'dead'`,
    );
    // When each stage ran (seconds after the first order arrived): do the stages overlap?
    const { rows: stageRows } = await pg.query(
      `WITH t0 AS (SELECT min(created_at) AS t FROM orders)
       SELECT s.stage, round(extract(epoch FROM min(s.at) - t0.t))::int AS first,
              round(extract(epoch FROM max(s.at) - t0.t))::int AS last
         FROM t0, (SELECT 'placed' AS stage, placed_at AS at FROM orders
                   UNION ALL SELECT 'uploaded', upload_completed_at FROM orders
                   UNION ALL SELECT 'documents', fetched_at FROM order_documents
                   UNION ALL SELECT 'published', delivered_at FROM outbox) s
        GROUP BY s.stage, t0.t`,
    );
    const stages = Object.fromEntries(stageRows.map((r) => [r.stage, [r.first, r.last]]));
    const { rows: failedJobs } = await pg.query(
      `SELECT task_identifier AS task, count(*)::int AS n FROM graphile_worker.jobs
        WHERE attempts >= max_attempts GROUP BY 1`,
    );
    await adapter.stop();
    const logFindings = scanLogs(adapter.output(), sent);
    const busiest = maxPerMinute();

    reportFigures('fault', {
      orders: ORDERS,
      faultShare: 0.2,
      injectedFaults: injected,
      upstreamLimitPerEndpoint: UPSTREAM_LIMIT,
      ourLimitPerEndpoint: OUR_LIMIT,
      maxRequestsPerMinuteOneEndpoint: busiest,
      sandboxLimitRefusals: [...limiterRefusals.values()].reduce((n, c) => n + c, 0),
      upstreamRequests: [...endpointHits.values()].reduce((n, t) => n + t.length, 0),
      durationSeconds,
      finished: done,
      last,
      stages,
      upstreamRetries: counter(metrics, 'adapter_upstream_retries_total'),
      rateLimitWaitSeconds: Math.round(
        counter(metrics, 'adapter_upstream_rate_limit_wait_seconds_total'),
      ),
      jobsDeferredForBudget: counter(metrics, 'adapter_order_jobs_deferred_total'),
      outboundRetries: counter(metrics, 'adapter_outbound_attempts_total', 'outcome="retry"'),
      deadLetters: dead.length,
      refusedByRis: REFUSED_BY_RIS,
      failedJobs,
      ...acc,
      logFindings: logFindings.length,
    });

    expect(done).toBe(true);
    expect(acc.ordersInDb).toBe(ORDERS);
    expect(acc.duplicateOrdersInDb).toBe(0);
    expect(acc.upstreamDuplicates).toBe(0);
    expect(acc.ackedMissingUpstream).toBe(0);
    expect(acc.delivered).toBe(ORDERS);
    expect(acc.fhirReports).toMatchObject({ exactlyOne: ORDERS, more: 0 });
    expect(acc.dicomSr).toMatchObject({ exactlyOne: ORDERS, more: 0 });
    // Every order's ORU reached the RIS once (a resend keeps MSH-10); two were refused (AR).
    expect(acc.risOru).toMatchObject({ ordersWithOneResult: ORDERS, ordersWithMore: 0 });
    // Dead letters: exactly the results the RIS refused for good, nothing else.
    expect(dead.every((d) => d.destination === 'ris-hl7' && refusedPlacers.has(d.placer))).toBe(
      true,
    );
    expect(new Set(dead.map((d) => d.placer))).toEqual(refusedPlacers);
    expect(failedJobs).toEqual([]);
    // The upstream's limit held: it never had to refuse, and we stayed under it.
    expect([...limiterRefusals.entries()]).toEqual([]);
    expect(busiest.requests).toBeLessThanOrEqual(UPSTREAM_LIMIT);
    // Faults happened and were absorbed by retries visible in /metrics.
    expect(Object.keys(injected).length).toBeGreaterThan(0);
    expect(counter(metrics, 'adapter_upstream_retries_total')).toBeGreaterThan(0);
    expect(counter(metrics, 'adapter_outbound_attempts_total', 'outcome="retry"')).toBeGreaterThan(
      0,
    );
    expect(logFindings).toEqual([]);
  });
});
