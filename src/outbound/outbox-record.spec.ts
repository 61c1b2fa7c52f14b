import { decideAttempt } from './outbox-record';

describe('decideAttempt: what a delivery attempt leads to', () => {
  const settings = { maxAttempts: 5, backoffBaseMs: 2_000, backoffMaxMs: 600_000 };
  const retry = (retryAfterMs?: number) => ({
    outcome: 'retry' as const,
    answer: 'HTTP 503',
    detail: {},
    ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
  });

  it('a retry waits its backoff (attempt 1: 1-2 s)', () => {
    const { outcome, delay } = decideAttempt(settings, { attempts: 1 }, retry());
    expect(outcome).toBe('retry');
    expect(delay).toBeGreaterThanOrEqual(1_000);
    expect(delay).toBeLessThanOrEqual(2_000);
  });

  it("the peer's Retry-After is a floor: never back sooner than asked", () => {
    expect(decideAttempt(settings, { attempts: 1 }, retry(120_000)).delay).toBe(120_000);
    // a shorter Retry-After does not shorten the backoff
    expect(decideAttempt(settings, { attempts: 1 }, retry(10)).delay).toBeGreaterThanOrEqual(1_000);
  });

  it("a Retry-After beyond the backoff's ceiling waits the ceiling", () => {
    expect(decideAttempt(settings, { attempts: 1 }, retry(86_400_000)).delay).toBe(600_000);
  });

  it('the last attempt is a dead letter whatever the peer asked', () => {
    const d = decideAttempt(settings, { attempts: 5 }, retry(120_000));
    expect(d.outcome).toBe('dead');
    expect(d.delay).toBe(0);
    expect(d.reason).toMatch(/gave up after 5 attempts/);
  });
});
