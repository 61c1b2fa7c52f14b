import { TokenProvider } from './token-provider';

class ManualClock {
  t = 1_000_000;
  now = () => this.t;
  sleep = async () => undefined;
}

/** Renewal starts this long before expiry (5 minutes). */
const RENEW_BEFORE_MS = 300_000;

/** A provider on a manual clock whose n-th token issued is `t<n>`, each valid `expiresInSeconds`. */
function numberedTokens(expiresInSeconds: number) {
  const clock = new ManualClock();
  let issued = 0;
  const provider = new TokenProvider(
    async () => ({ accessToken: `t${++issued}`, expiresInSeconds }),
    clock,
    RENEW_BEFORE_MS,
  );
  return { clock, provider, issued: () => issued };
}

describe('TokenProvider', () => {
  it('issues one token for many concurrent callers and caches it', async () => {
    const clock = new ManualClock();
    let issued = 0;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const provider = new TokenProvider(
      async () => {
        issued++;
        await gate;
        return { accessToken: `t${issued}`, expiresInSeconds: 3600 };
      },
      clock,
      RENEW_BEFORE_MS,
    );
    const waiting = Promise.all(Array.from({ length: 50 }, () => provider.get()));
    release();
    expect(new Set(await waiting)).toEqual(new Set(['t1']));
    expect(await provider.get()).toBe('t1');
    expect(issued).toBe(1);
  });

  it('renews before expiry while still serving the valid token, then switches', async () => {
    const { clock, provider, issued } = numberedTokens(3600);
    expect(await provider.get()).toBe('t1');
    clock.t += 3_300_000; // 55 min: inside the 5-minute renewal lead
    expect(await provider.get()).toBe('t1'); // renewal started in the background
    await new Promise((resolve) => setImmediate(resolve));
    expect(await provider.get()).toBe('t2');
    expect(issued()).toBe(2);
  });

  it('waits for a new token once the old one is expired, and drops an invalidated one', async () => {
    const { clock, provider } = numberedTokens(60);
    expect(await provider.get()).toBe('t1');
    clock.t += 61_000;
    expect(await provider.get()).toBe('t2');
    provider.invalidate('t1'); // stale: ignored
    expect(await provider.get()).toBe('t2');
    provider.invalidate('t2');
    expect(await provider.get()).toBe('t3');
  });

  it('lets the next caller retry after a failed issue', async () => {
    const clock = new ManualClock();
    let calls = 0;
    const provider = new TokenProvider(
      async () => {
        if (++calls === 1) throw new Error('boom');
        return { accessToken: 'ok', expiresInSeconds: 3600 };
      },
      clock,
      RENEW_BEFORE_MS,
    );
    await expect(provider.get()).rejects.toThrow('boom');
    expect(await provider.get()).toBe('ok');
  });
});
