import { parseJsonAllowingNonFinite } from './json-non-finite';

describe('parseJsonAllowingNonFinite', () => {
  it('reads Python’s bare NaN, Infinity and -Infinity as those numbers', () => {
    // json.dumps({"a": float("nan"), "b": [float("inf"), float("-inf")]})
    const parsed = parseJsonAllowingNonFinite('{"a": NaN, "b": [Infinity, -Infinity]}') as {
      a: number;
      b: number[];
    };
    expect(parsed.a).toBeNaN();
    expect(parsed.b).toEqual([Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]);
  });

  it('leaves the same words inside strings as they are', () => {
    expect(
      parseJsonAllowingNonFinite('{"x": NaN, "s": "NaN", "t": "to Infinity \\" -Infinity"}'),
    ).toEqual({ x: Number.NaN, s: 'NaN', t: 'to Infinity " -Infinity' });
  });

  it('still refuses what is not JSON otherwise', () => {
    expect(() => parseJsonAllowingNonFinite('{"a": NaNa}')).toThrow(SyntaxError);
    expect(() => parseJsonAllowingNonFinite('<html>Infinity</html>')).toThrow(SyntaxError);
    expect(() => parseJsonAllowingNonFinite('{"a": nan}')).toThrow(SyntaxError);
  });
});
