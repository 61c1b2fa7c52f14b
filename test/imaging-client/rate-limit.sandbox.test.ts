import type { Clock } from '../../src/imaging-client';
import { PgRateLimiter } from '../../src/imaging-client';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { startFaultyProxy } from './faulty-proxy';
import { buildClient, startTestSandbox } from './sandbox-harness';

/** Real sleeps that all end (rejecting) when the test is over, so waiting callers let go. */
class StoppableClock implements Clock {
  private stopped = false;
  private readonly waiting = new Set<() => void>();
  now = () => Date.now();
  sleep(ms: number): Promise<void> {
    if (this.stopped) return Promise.reject(new Error('clock stopped'));
    return new Promise((resolve, reject) => {
      const stop = () => {
        clearTimeout(timer);
        reject(new Error('clock stopped'));
      };
      const timer = setTimeout(() => {
        this.waiting.delete(stop);
        resolve();
      }, ms);
      this.waiting.add(stop);
    });
  }
  stop(): void {
    this.stopped = true;
    for (const stop of this.waiting) stop();
    this.waiting.clear();
  }
}

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

describe('client-side rate limits shared by replicas through PostgreSQL', () => {
  it('two replicas behind one egress never exceed the per-endpoint or the total budget', async () => {
    const limits = { perEndpointPerMinute: 30, totalPerMinute: 45 };
    const peer = await startTestSandbox({ rateLimitPerEndpoint: 30, rateLimitPerIp: 45 });
    const proxy = await startFaultyProxy(peer.sandbox.baseUrl);
    const clock = new StoppableClock();
    const replicas = [1, 2].map(() =>
      buildClient(proxy.baseUrl, { dataSource: db.dataSource, limits, clock, scope: 'egress-a' }),
    );
    try {
      const calls = replicas.flatMap((r) => [
        ...Array.from({ length: 20 }, () => r.client.getProducts()),
        ...Array.from({ length: 10 }, () => r.client.listOrders()),
      ]);
      const settled = Promise.allSettled(calls);
      // Wait for the budget to go out (slow on a loaded machine), then a little longer: a
      // limiter that let more through would show it in that time.
      const until = Date.now() + 20_000;
      while (proxy.hits.length < 45 && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const count = (path: string) => proxy.hits.filter((h) => h.path === path).length;
      // Exactly the budget went out: 30 on /products, and the total (tokens included) capped at 45.
      expect(count('/products')).toBe(30);
      expect(proxy.hits.length).toBe(45);
      expect(count('/list-orders')).toBe(45 - 30 - count('/auth/token'));
      // So the upstream never had to refuse one.
      expect(proxy.hits.filter((h) => h.status === 429)).toEqual([]);
      clock.stop();
      const results = await settled;
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(
        45 - count('/auth/token'),
      );
    } finally {
      clock.stop();
      await Promise.all(replicas.map((r) => r.close()));
      await proxy.close();
      await peer.close();
    }
  });

  it('another egress scope has its own budget', async () => {
    const clock = new StoppableClock();
    const limits = { perEndpointPerMinute: 2, totalPerMinute: 3 };
    const a = new PgRateLimiter(db.dataSource, { limits, scope: 'egress-b', clock });
    const b = new PgRateLimiter(db.dataSource, { limits, scope: 'egress-c', clock });
    try {
      await a.acquire('/status');
      await a.acquire('/status');
      await b.acquire('/status');
      await b.acquire('/status');
      let third = false;
      const pending = a.acquire('/status').then(() => (third = true));
      await a.acquire('/products'); // total 3 of 3 for egress-b
      let fourth = false;
      const pendingTotal = a.acquire('/metadata').then(() => (fourth = true));
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect([third, fourth]).toEqual([false, false]);
      clock.stop();
      await Promise.allSettled([pending, pendingTotal]);
    } finally {
      clock.stop();
    }
  });
});

describe('waiting for budget is reported', () => {
  it('tells onWait of each wait, per endpoint, before it starts', async () => {
    const clock = new StoppableClock();
    const waits: Array<{ endpoint: string; ms: number }> = [];
    const limiter = new PgRateLimiter(db.dataSource, {
      limits: { perEndpointPerMinute: 1, totalPerMinute: 100 },
      scope: 'egress-waits',
      clock,
      onWait: (endpoint, ms) => waits.push({ endpoint, ms }),
    });
    try {
      await limiter.acquire('/status');
      await limiter.acquire('/products');
      // Within budget: no wait reported.
      expect(waits).toEqual([]);
      const pending = limiter.acquire('/status');
      await new Promise((resolve) => setTimeout(resolve, 300));
      // Over budget: the wait (until the oldest call leaves the minute) is reported at once.
      expect(waits).toHaveLength(1);
      expect(waits[0]!.endpoint).toBe('/status');
      expect(waits[0]!.ms).toBeGreaterThan(55_000);
      clock.stop();
      await pending.catch(() => undefined);
      // Asked without taking: the same wait for /status, none for an endpoint with budget.
      const asked = await limiter.waitMs('/status');
      expect(asked).toBeGreaterThan(55_000);
      expect(asked).toBeLessThanOrEqual(61_000);
      expect(await limiter.waitMs('/metadata')).toBe(0);
      expect(await limiter.waitMs('/metadata')).toBe(0);
      const other = new PgRateLimiter(db.dataSource, {
        limits: { perEndpointPerMinute: 1, totalPerMinute: 100 },
        scope: 'egress-waits',
        clock: new StoppableClock(),
      });
      await other.acquire('/metadata');
      expect(await limiter.waitMs('/metadata')).toBeGreaterThan(55_000);
    } finally {
      clock.stop();
    }
  });
});

describe('the per-endpoint limit holds under injected faults', () => {
  it('retries count against the budget: never more than the limit reaches the upstream', async () => {
    const peer = await startTestSandbox({
      rateLimitPerEndpoint: 20,
      rateLimitPerIp: 1_000,
      faults: { seed: 11, endpoints: { '*': { error5xx: 0.1, rate429: 0.05, drop: 0.05 } } },
    });
    const proxy = await startFaultyProxy(peer.sandbox.baseUrl);
    const clock = new StoppableClock();
    const replicas = [1, 2].map(() =>
      buildClient(proxy.baseUrl, {
        dataSource: db.dataSource,
        limits: { perEndpointPerMinute: 20, totalPerMinute: 1_000 },
        clock,
        scope: 'egress-faults',
        retry: { baseDelayMs: 5, maxDelayMs: 50 },
      }),
    );
    try {
      const settled = Promise.allSettled(
        replicas.flatMap((r) => Array.from({ length: 15 }, () => r.client.getProducts())),
      );
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      const products = proxy.hits.filter((h) => h.path === '/products');
      // Faults made some attempts fail and be retried; still, no more than 20 went out.
      expect(products).toHaveLength(20);
      expect(products.some((h) => h.status !== 200)).toBe(true);
      clock.stop();
      await settled;
    } finally {
      clock.stop();
      await Promise.all(replicas.map((r) => r.close()));
      await proxy.close();
      await peer.close();
    }
  });
});
