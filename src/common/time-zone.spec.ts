import { isTimeZone, offsetInZone } from './time-zone';

describe('offsetInZone', () => {
  it.each([
    // EU summer time 2026: from 29 March 01:00 UTC to 25 October 01:00 UTC
    ['Europe/Berlin', [2026, 3, 28, 9, 15, 0], '+01:00'],
    ['Europe/Berlin', [2026, 3, 30, 9, 15, 0], '+02:00'],
    ['Europe/Amsterdam', [2026, 10, 26, 9, 15, 0], '+01:00'],
    // US: from 8 March to 1 November 2026
    ['America/New_York', [2026, 7, 1, 12, 0, 0], '-04:00'],
    ['America/New_York', [2026, 12, 1, 12, 0, 0], '-05:00'],
    // no summer time, and not whole hours
    ['Asia/Kolkata', [2026, 7, 1, 12, 0, 0], '+05:30'],
    ['Asia/Kathmandu', [2026, 1, 1, 0, 0, 0], '+05:45'],
    // southern hemisphere: summer in January; Lord Howe moves by half an hour
    ['Australia/Sydney', [2026, 1, 15, 8, 0, 0], '+11:00'],
    ['Australia/Sydney', [2026, 7, 15, 8, 0, 0], '+10:00'],
    ['Australia/Lord_Howe', [2026, 1, 15, 8, 0, 0], '+11:00'],
    ['Australia/Lord_Howe', [2026, 7, 15, 8, 0, 0], '+10:30'],
    ['UTC', [2026, 7, 1, 12, 0, 0], '+00:00'],
  ] as const)('%s at %j is %s', (zone, [y, mo, d, h, mi, s], offset) => {
    expect(offsetInZone(zone, y, mo, d, h, mi, s)).toBe(offset);
  });

  it('a time the clocks skip takes the offset before the change, one that happens twice the first', () => {
    // Berlin 29 March 2026 02:30 does not exist (02:00 → 03:00): 02:30+01:00 = 03:30 summer time
    expect(offsetInZone('Europe/Berlin', 2026, 3, 29, 2, 30, 0)).toBe('+01:00');
    // Berlin 25 October 2026 02:30 happens twice: the first, still in summer time
    expect(offsetInZone('Europe/Berlin', 2026, 10, 25, 2, 30, 0)).toBe('+02:00');
    // and the hours either side are plain
    expect(offsetInZone('Europe/Berlin', 2026, 10, 25, 3, 30, 0)).toBe('+01:00');
    expect(offsetInZone('Europe/Berlin', 2026, 3, 29, 3, 30, 0)).toBe('+02:00');
  });
});

describe('isTimeZone', () => {
  it('knows IANA names and nothing else', () => {
    expect(isTimeZone('Europe/Berlin')).toBe(true);
    expect(isTimeZone('America/Argentina/Buenos_Aires')).toBe(true);
    expect(isTimeZone('Europe/Atlantis')).toBe(false);
    expect(isTimeZone('+01:00')).toBe(false);
    expect(isTimeZone('')).toBe(false);
    expect(isTimeZone(1)).toBe(false);
    expect(isTimeZone('Europe/Berlin\u0000')).toBe(false);
  });
});
