import { firstDuplicateKey } from './json-duplicate-keys';

describe('firstDuplicateKey: a JSON object that names a key twice has no one meaning', () => {
  it.each([
    ['{"status":"active","intent":"order","status":"revoked"}', 'SR.status'],
    [
      '{"code":{"coding":[{"system":"a","code":"1"},{"system":"b","system":"c"}]}}',
      'SR.code.coding[1].system',
    ],
    ['{"a":[1,[2,3],{"x":1,"x":2}]}', 'SR.a[2].x'],
    // the same name after decoding its escapes
    ['{"status":"active","st\\u0061tus":"revoked"}', 'SR.status'],
    ['{"contained":[{"id":"p"},{"id":"q"}],"meta":{"tag":[]},"meta":{}}', 'SR.meta'],
  ])('%s → %s', (text, path) => {
    expect(firstDuplicateKey(text, 'SR')).toBe(path);
  });

  it.each([
    '{"status":"active","intent":"order"}',
    // equal keys in different objects, and key-like text inside strings and arrays
    '{"a":{"id":"1"},"b":{"id":"2"},"c":[{"id":"3"},{"id":"4"}]}',
    '{"note":[{"text":"\\"status\\":1, \\"status\\":2"}],"status":"active"}',
    '["status","status"]',
    '{"a":"}","b":"{","c":"\\\\","d":"]"}',
  ])('finds none in %s', (text) => {
    expect(firstDuplicateKey(text, 'SR')).toBeUndefined();
  });

  it('is linear: 200,000 keys and 100,000 levels of nesting in well under a second', () => {
    const wide = `{${Array.from({ length: 200_000 }, (_, i) => `"k${i}":${i}`).join(',')}}`;
    const deep = `${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}`;
    // The best of three in CPU time, so other processes of a busy machine are not read as the
    // scan's cost (wall time read 1,171 ms at load average 10; a quadratic scan of 200,000 keys
    // takes hours).
    let best = Infinity;
    for (let i = 0; i < 3; i++) {
      const started = process.cpuUsage();
      expect(firstDuplicateKey(wide)).toBeUndefined();
      expect(firstDuplicateKey(deep)).toBeUndefined();
      const used = process.cpuUsage(started);
      best = Math.min(best, (used.user + used.system) / 1000);
    }
    expect(best).toBeLessThan(1000);
  });
});
