import { firstUnfaithfulNumber } from './json-numbers';

describe('firstUnfaithfulNumber', () => {
  it.each([
    ['{"a":{"b":1e400}}', 'R.a.b'],
    ['{"a":[1,2,-1e400]}', 'R.a[2]'],
    ['{"a":1e-400}', 'R.a'],
    ['{"a":[{"x":"1e-400"},{"v":12345678901234567890.123}]}', 'R.a[1].v'],
    ['{"a":0.12345678901234567891}', 'R.a'],
    ['{"a":9007199254740993}', 'R.a'],
    [`{"a":0.${'0'.repeat(400)}1}`, 'R.a'],
    ['{"k\\"ey":[0,[1,1e999]]}', 'R.k"ey[1][1]'],
  ])('%s is not held: %s', (text, path) => {
    expect(firstUnfaithfulNumber(text, 'R')).toBe(path);
  });

  it.each([
    '{"a":0.1,"b":-0,"c":1.50,"d":2.5E-3,"e":1.0000000000000000000,"f":123456789012345}',
    '{"a":"1e400 in a string","b":[true,false,null],"c":1e22,"d":9007199254740992}',
    '{"a":5e-324,"b":1.7976931348623157e308,"c":3.14159265358979}',
  ])('%s holds', (text) => {
    expect(firstUnfaithfulNumber(text, 'R')).toBeUndefined();
  });
});
