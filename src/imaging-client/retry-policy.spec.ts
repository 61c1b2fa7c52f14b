import { backoffDelayMs, isRetryableStatus } from './retry-policy';

describe('backoffDelayMs (full jitter)', () => {
  const config = { baseDelayMs: 100, maxDelayMs: 1_000 };

  it('draws from [0, base * 2^(n-1)) and caps the ceiling', () => {
    expect(backoffDelayMs(1, config, undefined, () => 0)).toBe(0);
    expect(backoffDelayMs(1, config, undefined, () => 0.999)).toBe(99);
    expect(backoffDelayMs(3, config, undefined, () => 0.999)).toBe(399);
    expect(backoffDelayMs(10, config, undefined, () => 0.999)).toBe(999);
  });

  it('never waits less than Retry-After', () => {
    expect(backoffDelayMs(1, config, 5_000, () => 0.5)).toBe(5_000);
    expect(backoffDelayMs(4, config, 10, () => 0.5)).toBe(400);
  });
});

describe('isRetryableStatus', () => {
  it('retries 429 and 5xx only', () => {
    expect([429, 500, 502, 503, 504].every(isRetryableStatus)).toBe(true);
    expect([400, 401, 403, 404, 409, 410, 413].some(isRetryableStatus)).toBe(false);
  });
});
