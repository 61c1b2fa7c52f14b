import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import type { ProductionImagingClient } from '../../src/imaging-client/imaging-client.factory';
import { IMAGING } from '../../src/imaging-client/imaging-client.module';
import { OrderLifecycleService } from '../../src/orders/order-lifecycle.service';
import { POLL_LEASE_MS, OrderPollerService } from '../../src/orders/order-poller.service';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { startFaultyProxy } from '../imaging-client/faulty-proxy';
import { SANDBOX_CLIENT } from '../e2e/e2e-support';

jest.setTimeout(120_000);

/**
 * The poll cycle's running lease (`poll_schedule.running_until` / `running_owner`): short,
 * renewed by its holder while the cycle runs, released only by its holder. Two pollers on one
 * database stand for two replicas; the upstream's `GET /list-orders` is held by a proxy to
 * keep a cycle running. The kill -9 of a real process mid-cycle is in
 * test/e2e/killed-worker.e2e.test.ts.
 */
describe('poll cycle lease (real PostgreSQL, sandbox behind a holding proxy)', () => {
  let sandbox: RunningSandbox;
  let proxy: Awaited<ReturnType<typeof startFaultyProxy>>;
  let adapter: TestAdapter;
  let gate: { promise: Promise<void>; open: () => void } | undefined;
  const LEASE_MS = 900;

  const newGate = () => {
    let open!: () => void;
    const promise = new Promise<void>((resolve) => (open = resolve));
    gate = { promise, open };
    return gate;
  };

  const poller = (leaseMs = LEASE_MS) =>
    new OrderPollerService({
      dataSource: adapter.dataSource,
      client: adapter.app.get<ProductionImagingClient>(IMAGING).client,
      lifecycle: adapter.app.get(OrderLifecycleService),
      logger: pino({ level: 'silent' }),
      intervalMs: 3600_000,
      leaseMs,
    });

  const schedule = async () =>
    (
      await adapter.dataSource.query(
        `SELECT running_owner, running_until, extract(epoch FROM running_until - now()) * 1000 AS left_ms
           FROM poll_schedule WHERE name = 'upstream-poll'`,
      )
    )[0] as { running_owner: string | null; running_until: Date | null; left_ms: string | null };

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'poll-lease-'));
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', dataDir: dir });
    proxy = await startFaultyProxy(sandbox.baseUrl, (method, path) =>
      gate && path === '/list-orders' ? { until: gate.promise } : 'pass',
    );
    adapter = await startTestAdapter({
      IMAGING_BASE_URL: proxy.baseUrl,
      ...SANDBOX_CLIENT,
      // No minute tick: the pollers of this test are the only cycles.
      JOBS_ENABLED: 'false',
      POLL_INTERVAL_SECONDS: '3600',
    });
  });
  afterAll(async () => {
    gate?.open();
    await adapter?.close();
    await proxy?.close();
    await sandbox?.close();
  });

  it('a cycle longer than its lease keeps it (renewed) and no other poller starts one meanwhile', async () => {
    const a = poller();
    const b = poller();
    const g = newGate();
    const running = a.runNow();
    const hits = () => proxy.hits.filter((h) => h.path === '/list-orders').length;
    const before = hits();
    while (hits() === before) await sleep(20);
    // Three leases long: without renewal B would take over after the first.
    const until = Date.now() + 3 * LEASE_MS;
    while (Date.now() < until) {
      expect(await b.runNow()).toBeUndefined();
      expect(Number((await schedule()).left_ms)).toBeGreaterThan(0);
      await sleep(100);
    }
    gate = undefined;
    g.open();
    const stats = await running;
    expect(stats?.upstreamCalls).toBeGreaterThanOrEqual(2);
    expect(await schedule()).toMatchObject({ running_owner: null, running_until: null });
    expect(await b.runNow()).toBeDefined();
  });

  it("a dead holder's lease blocks polling for at most the lease; the app's lease is short", async () => {
    // The app's own poller: its claim's lease is POLL_LEASE_MS (30 s), not 10 minutes.
    const app = adapter.app.get(OrderPollerService);
    const g = newGate();
    const hits = () => proxy.hits.filter((h) => h.path === '/list-orders').length;
    const before = hits();
    const running = app.runNow();
    while (hits() === before) await sleep(20);
    const held = await schedule();
    expect(held.running_owner).toMatch(new RegExp(`:${process.pid}:`));
    expect(Number(held.left_ms)).toBeLessThanOrEqual(POLL_LEASE_MS);
    gate = undefined;
    g.open();
    await running;

    // What a process killed mid-cycle leaves: a lease it will never renew nor release.
    await adapter.dataSource.query(
      `UPDATE poll_schedule SET running_owner = 'gone:1:dead', running_until = now() + $1 * interval '1 millisecond'
        WHERE name = 'upstream-poll'`,
      [LEASE_MS],
    );
    const b = poller();
    const started = Date.now();
    expect(await b.runNow()).toBeUndefined();
    let stats;
    while (!(stats = await b.runNow()) && Date.now() - started < 10_000) await sleep(50);
    expect(stats).toBeDefined();
    expect(Date.now() - started).toBeGreaterThanOrEqual(LEASE_MS - 100);
    expect(Date.now() - started).toBeLessThan(LEASE_MS + 1_000);
  });

  it('a cycle whose lease was taken over neither renews nor releases the new holder’s lease', async () => {
    const a = poller();
    const g = newGate();
    const hits = () => proxy.hits.filter((h) => h.path === '/list-orders').length;
    const before = hits();
    const running = a.runNow().catch((err: Error) => err);
    while (hits() === before) await sleep(20);
    // As if A had stalled past its lease and another replica had claimed the cycle.
    await adapter.dataSource.query(
      `UPDATE poll_schedule SET running_owner = 'other:2:abcd', running_until = now() + interval '1 hour'
        WHERE name = 'upstream-poll'`,
    );
    await sleep(2 * LEASE_MS);
    gate = undefined;
    g.open();
    await running;
    const after = await schedule();
    expect(after.running_owner).toBe('other:2:abcd');
    expect(Number(after.left_ms)).toBeGreaterThan(3500_000);
    await adapter.dataSource.query(
      `UPDATE poll_schedule SET running_owner = NULL, running_until = NULL WHERE name = 'upstream-poll'`,
    );
  });
});
