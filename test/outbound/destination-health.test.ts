import { setTimeout as sleep } from 'node:timers/promises';
import { OutboxOrderEvents } from '../../src/outbound/outbox-order-events';
import { DESTINATIONS } from '../../src/outbound/outbound.settings';
import { DestinationHealthRepository } from '../../src/persistence/destination-health.repository';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy';
import { startAckingRis, type TestRis } from './outbound-peers';
import { playStatus, seedOrder, testOutboundSettings } from './outbound-seed';

jest.setTimeout(120_000);

interface DestinationCheck {
  status: string;
  because: string[];
  pending: number;
  oldestPendingSeconds: number | null;
  deadLetters: number;
  consecutiveFailures: number;
  lastSuccessAt: string | null;
  lastFailureAt: string | null;
  lastFailureReason: string | null;
}

/**
 * /health and /metrics say how each destination we deliver to is doing, from the outbox:
 * before, a RIS down for an hour left /health `ok` while its ORUs piled up. A real RIS (MLLP
 * on loopback) behind a proxy the test cuts and restores; the adapter's own worker delivers.
 */
describe('destinations in /health and /metrics (a RIS that goes down and comes back)', () => {
  let ris: TestRis;
  let proxy: TcpProxy;
  let adapter: TestAdapter;
  /** The RIS refuses (AR) the messages whose n is in here; accepts the rest. */
  const refuse = new Set<number>();
  const events = new OutboxOrderEvents(testOutboundSettings({ destinations: [DESTINATIONS.hl7] }));

  beforeAll(async () => {
    ris = await startAckingRis((n) => (refuse.has(n) ? 'AR' : 'AA'));
    proxy = await startTcpProxy('127.0.0.1', ris.port);
    adapter = await startTestAdapter({
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: String(proxy.port),
      RIS_MLLP_TIMEOUT_SECONDS: '2',
      OUTBOUND_POLL_MS: '50',
      OUTBOUND_BACKOFF_BASE_MS: '100',
      OUTBOUND_BACKOFF_MAX_MS: '300',
      OUTBOUND_MAX_ATTEMPTS: '1000',
      OUTBOUND_DEGRADED_AFTER_SECONDS: '2',
    });
  });
  afterAll(async () => {
    await adapter?.close();
    await proxy?.close();
    await ris?.close();
  });

  const health = async () => {
    const res = await fetch(`${adapter.httpUrl}/health`);
    const body = (await res.json()) as {
      status: string;
      checks: { destinations: Record<string, DestinationCheck> };
    };
    return { code: res.status, status: body.status, ris: body.checks.destinations['ris-hl7']! };
  };
  const metrics = async () =>
    (
      await fetch(`${adapter.httpUrl}/metrics`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
      })
    ).text();
  const until = async (check: () => Promise<boolean>, ms = 30_000) => {
    const started = Date.now();
    while (Date.now() - started < ms) {
      if (await check()) return;
      await sleep(100);
    }
    throw new Error('timed out');
  };
  const newOru = async () => {
    const order = await seedOrder(adapter.dataSource);
    await playStatus(adapter.dataSource, events, order, 'CANCELLED');
    return order;
  };

  it('up and empty at first; degraded with its backlog, failures and reason while the RIS is down; up again once it is back', async () => {
    const first = await health();
    expect(first).toMatchObject({ code: 200, status: 'ok' });
    expect(first.ris).toMatchObject({ status: 'up', pending: 0, deadLetters: 0 });

    proxy.cut();
    await newOru();
    await until(async () => {
      const h = await health();
      return h.ris.status === 'degraded' && h.ris.consecutiveFailures >= 2;
    });
    const down = await health();
    expect(down.code).toBe(200); // still ready: the orders are safe in the database
    expect(down.status).toBe('degraded');
    expect(down.ris).toMatchObject({
      status: 'degraded',
      because: ['backlog'],
      pending: 1,
      deadLetters: 0,
      lastSuccessAt: null,
    });
    expect(down.ris.oldestPendingSeconds).toBeGreaterThan(2);
    expect(down.ris.lastFailureReason).toMatch(/^[A-Za-z0-9_ ]{1,40}$/);
    const scrape = await metrics();
    expect(scrape).toContain('adapter_dependency_up{dependency="ris-hl7"} 0');
    expect(scrape).toContain('adapter_outbox_pending{destination="ris-hl7"} 1');
    expect(scrape).toMatch(/adapter_outbox_consecutive_failures\{destination="ris-hl7"\} [1-9]/);
    expect(scrape).toMatch(/adapter_outbox_oldest_pending_seconds\{destination="ris-hl7"\} [1-9]/);
    // nothing of the peer's address in a public answer
    expect(JSON.stringify(down)).not.toContain(String(proxy.port));

    proxy.restore();
    await until(async () => (await health()).ris.pending === 0);
    const back = await health();
    expect(back).toMatchObject({ code: 200, status: 'ok' });
    expect(back.ris).toMatchObject({
      status: 'up',
      because: [],
      pending: 0,
      oldestPendingSeconds: null,
      consecutiveFailures: 0,
    });
    expect(Date.parse(back.ris.lastSuccessAt!)).toBeGreaterThan(
      Date.parse(back.ris.lastFailureAt!),
    );
    expect(await metrics()).toContain('adapter_dependency_up{dependency="ris-hl7"} 1');
  });

  it('a dead letter makes it degraded until it is replayed', async () => {
    refuse.add(ris.received.length + 1);
    await newOru();
    await until(async () => (await health()).ris.deadLetters === 1);
    const dead = await health();
    expect(dead.status).toBe('degraded');
    expect(dead.ris).toMatchObject({
      status: 'degraded',
      because: ['dead-letters'],
      lastFailureReason: 'ACK AR',
    });
    expect(await metrics()).toContain('adapter_outbox_dead_letters{destination="ris-hl7"} 1');

    const [row] = (await adapter.dataSource.query(
      `SELECT id::text AS id FROM outbox WHERE destination = 'ris-hl7' AND status = 'dead'`,
    )) as Array<{ id: string }>;
    const replay = await fetch(`${adapter.httpUrl}/api/audit/dead-letters/${row!.id}/replay`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.admin}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({ reason: 'RIS interface fixed' }),
    });
    expect(replay.status).toBeLessThan(300);
    await until(async () => (await health()).ris.pending === 0);
    const replayed = await health();
    expect(replayed.status).toBe('ok');
    expect(replayed.ris).toMatchObject({ status: 'up', deadLetters: 0, consecutiveFailures: 0 });
  });

  it('answers fast over a backlog of 50,000 pending rows, through the partial indexes only', async () => {
    proxy.cut();
    // 50,000 undelivered ORUs (due later: the worker leaves them alone), and as many delivered
    await adapter.dataSource.query(
      `INSERT INTO outbox (destination, kind, dedupe_key, payload, status, next_attempt_at, created_at, delivered_at)
       SELECT 'ris-hl7', 'hl7-oru', 'load-' || g, '{}'::jsonb,
              CASE WHEN g % 2 = 0 THEN 'pending' ELSE 'delivered' END,
              now() + interval '1 hour', now() - g * interval '10 milliseconds',
              CASE WHEN g % 2 = 0 THEN NULL ELSE now() END
         FROM generate_series(1, 100000) g`,
    );
    await adapter.dataSource.query('ANALYZE outbox');
    const plans: string[] = [];
    const explaining = new DestinationHealthRepository({
      query: async (sql: string, params?: unknown[]) => {
        const plan = (await adapter.dataSource.query(`EXPLAIN ${sql}`, params)) as Array<
          Record<string, string>
        >;
        plans.push(plan.map((r) => Object.values(r)[0]).join('\n'));
        return [];
      },
    } as never);
    await explaining.figures(['ris-hl7']);
    expect(plans[0]).not.toMatch(/Seq Scan on outbox/);
    expect(plans[0]).toMatch(/outbox_pending_created_idx/);

    await health(); // warm
    const times: number[] = [];
    for (let i = 0; i < 30; i++) {
      const started = performance.now();
      const h = await health();
      times.push(performance.now() - started);
      // counted up to 10,000: past it the age says more, and the count costs a read per row
      expect(h.ris).toMatchObject({ pending: 10_000, pendingCapped: true });
    }
    times.sort((a, b) => a - b);
    const median = times[15]!;
    const p95 = times[28]!;
    process.stdout.write(
      `/health over 50,000 pending rows: median ${median.toFixed(1)} ms, p95 ${p95.toFixed(1)} ms\n`,
    );
    expect(median).toBeLessThan(100);
  });
});
