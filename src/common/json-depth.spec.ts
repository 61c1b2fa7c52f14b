import { jsonDepth } from './json-depth';

describe('jsonDepth', () => {
  it('counts nesting of objects and arrays, not brackets inside strings', () => {
    expect(jsonDepth('"x"')).toBe(0);
    expect(jsonDepth('{"checks":[{"name":"motion"}]}')).toBe(3);
    expect(jsonDepth('{"note":"[[[{{{\\"]]]"}')).toBe(1);
    expect(jsonDepth(`${'['.repeat(20_000)}${']'.repeat(20_000)}`)).toBe(20_000);
  });
});
