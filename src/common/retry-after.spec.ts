import { parseRetryAfter } from './retry-after';

describe('parseRetryAfter', () => {
  const now = Date.parse('2026-11-21T10:00:00Z');
  it('reads delta-seconds and HTTP-dates, ignores garbage', () => {
    expect(parseRetryAfter('7', now)).toBe(7_000);
    expect(parseRetryAfter(' 120 ', now)).toBe(120_000);
    expect(parseRetryAfter(['3', '9'], now)).toBe(3_000);
    expect(parseRetryAfter('Sat, 21 Nov 2026 10:00:30 GMT', now)).toBe(30_000);
    expect(parseRetryAfter('Sat, 21 Nov 2026 09:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('Saturday, 21-Nov-26 10:01:00 GMT', now)).toBe(60_000);
    expect(parseRetryAfter('Sat Nov 21 10:00:05 2026', now)).toBe(5_000);
    expect(parseRetryAfter('2026-11-21T10:00:30Z', now)).toBeUndefined(); // not an HTTP-date
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter('-5', now)).toBeUndefined();
    expect(parseRetryAfter('1.5', now)).toBeUndefined();
    expect(parseRetryAfter(undefined, now)).toBeUndefined();
    expect(parseRetryAfter(null, now)).toBeUndefined();
  });

  it('ignores values no peer means (a number beyond 9 digits would overflow a timer)', () => {
    expect(parseRetryAfter('9'.repeat(400), now)).toBeUndefined();
    expect(parseRetryAfter('1234567890', now)).toBeUndefined();
    expect(
      parseRetryAfter(`Sat, 21 Nov 2026 10:00:30 GMT${' '.repeat(100)}x`, now),
    ).toBeUndefined();
  });
});
