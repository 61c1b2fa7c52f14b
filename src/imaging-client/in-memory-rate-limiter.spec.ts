import { InMemoryRateLimiter, splitAcrossReplicas } from './in-memory-rate-limiter';

class VirtualClock {
  t = 0;
  now = () => this.t;
  sleep = async (ms: number) => {
    this.t += ms;
  };
}

/** A limiter with these limits on a clock that only moves when told (or when the limiter waits). */
function setup(limits: { perEndpointPerMinute: number; totalPerMinute: number }) {
  const clock = new VirtualClock();
  return { clock, limiter: new InMemoryRateLimiter(limits, clock) };
}

describe('InMemoryRateLimiter', () => {
  it('never lets more than the per-endpoint limit through in any 60-second window', async () => {
    const { clock, limiter } = setup({ perEndpointPerMinute: 5, totalPerMinute: 100 });
    const times: number[] = [];
    for (let i = 0; i < 12; i++) {
      await limiter.acquire('/status');
      times.push(clock.t);
      clock.t += 1_000;
    }
    for (let i = 5; i < times.length; i++)
      expect(times[i] - times[i - 5]).toBeGreaterThanOrEqual(60_000);
    // Another endpoint is not held back by /status's budget.
    const before = clock.t;
    await limiter.acquire('/list-orders');
    expect(clock.t).toBe(before);
  });

  it('applies the overall limit across endpoints', async () => {
    const { clock, limiter } = setup({ perEndpointPerMinute: 100, totalPerMinute: 3 });
    await limiter.acquire('/a');
    await limiter.acquire('/b');
    await limiter.acquire('/c');
    expect(clock.t).toBe(0);
    await limiter.acquire('/d');
    expect(clock.t).toBe(60_000);
  });

  it('serves concurrent waiters in order without exceeding the limit', async () => {
    const { clock, limiter } = setup({ perEndpointPerMinute: 2, totalPerMinute: 100 });
    const order: number[] = [];
    await Promise.all([0, 1, 2, 3, 4].map((i) => limiter.acquire('/x').then(() => order.push(i))));
    expect(order).toEqual([0, 1, 2, 3, 4]);
    expect(clock.t).toBe(120_000);
  });

  it('tells how long a call would wait, without taking budget', async () => {
    const { clock, limiter } = setup({ perEndpointPerMinute: 2, totalPerMinute: 3 });
    expect(await limiter.waitMs('/x')).toBe(0);
    await limiter.acquire('/x');
    clock.t = 10_000;
    expect(await limiter.waitMs('/x')).toBe(0);
    await limiter.acquire('/x');
    // /x is used up until the first call leaves the minute; /y is not (asking took nothing).
    expect(await limiter.waitMs('/x')).toBe(50_000);
    expect(await limiter.waitMs('/y')).toBe(0);
    await limiter.acquire('/y');
    expect(clock.t).toBe(10_000);
    // Now the total is used up too.
    expect(await limiter.waitMs('/z')).toBe(50_000);
  });

  it('splits a budget across replicas, rounding down', () => {
    expect(splitAcrossReplicas({ perEndpointPerMinute: 600, totalPerMinute: 2000 }, 3)).toEqual({
      perEndpointPerMinute: 200,
      totalPerMinute: 666,
    });
  });
});
