import { firstLoneSurrogate, holdsLoneSurrogate } from './json-unicode';

describe('firstLoneSurrogate', () => {
  const parse = (text: string): unknown => JSON.parse(text);

  it('finds half a pair in a value, an array item or a key, in document order', () => {
    expect(firstLoneSurrogate(parse('{"a":{"b":"x\\ud800"}}'), 'R')).toBe('R.a.b');
    expect(firstLoneSurrogate(parse('{"a":["ok","\\udc00"]}'), 'R')).toBe('R.a[1]');
    expect(firstLoneSurrogate(parse('{"a":"\\udc00\\ud800"}'), 'R')).toBe('R.a');
    expect(firstLoneSurrogate(parse('{"a":{"k\\ud800":1}}'), 'R')).toBe('R.a');
    expect(firstLoneSurrogate(parse('{"a":"\\ud800","b":"\\ud800"}'), 'R')).toBe('R.a');
    expect(firstLoneSurrogate(parse('[[["\\ud800"]]]'), 'R')).toBe('R[0][0][0]');
  });

  it('passes whole pairs and plain text', () => {
    expect(firstLoneSurrogate(parse('{"a":"\\ud83d\\ude00","b":[1,null,true]}'), 'R')).toBe(
      undefined,
    );
    expect(holdsLoneSurrogate('Chest CT 😀')).toBe(false);
    expect(holdsLoneSurrogate('\ud83d')).toBe(true);
  });

  it('walks deep nesting without recursion', () => {
    const deep = '['.repeat(20_000) + '"\\ud800"' + ']'.repeat(20_000);
    expect(firstLoneSurrogate(parse(deep), '')).toMatch(/^\[0\]/);
  });
});
