import { jsonDepth, jsonPathText, scanJson } from './json-scan';

const scan = (text: string, limits?: { maxValues?: number; maxDepth?: number }) =>
  scanJson(Buffer.from(text, 'utf8'), limits);
const numberAt = (text: string): string | undefined => {
  const found = scan(text).unfaithfulNumber;
  return found && jsonPathText(found, 'R');
};
const surrogateAt = (text: string, root = 'R'): string | undefined => {
  const found = scan(text).loneSurrogate;
  return found && jsonPathText(found, root);
};

describe('scanJson: cost', () => {
  it('counts values as containers and commas outside strings, plus the root', () => {
    expect(scan('{"a":[1,2,3],"b":"x"}')).toMatchObject({ values: 6, depth: 2 });
    expect(scan('{"a":[1,2,3],"b":"x"}', { maxValues: 5 }).exceeded).toBe('values');
    expect(scan('{"t":"a, b, [c], {d}, \\" ,,","n":"Müller, 田中"}').values).toBe(3);
  });

  it('stops at the first limit passed', () => {
    expect(scan('[[[1]]]', { maxDepth: 2 })).toEqual({ values: 4, depth: 3, exceeded: 'depth' });
    expect(scan('[1,2,3,4', { maxValues: 2 })).toEqual({
      values: 3,
      depth: 1,
      exceeded: 'values',
    });
  });
});

describe('jsonDepth', () => {
  it('counts nesting of objects and arrays, not brackets inside strings', () => {
    expect(jsonDepth('"x"')).toBe(0);
    expect(jsonDepth('{"checks":[{"name":"motion"}]}')).toBe(3);
    expect(jsonDepth('{"note":"[[[{{{\\"]]]"}')).toBe(1);
    expect(jsonDepth(`${'['.repeat(20_000)}${']'.repeat(20_000)}`)).toBe(20_000);
  });
});

describe('scanJson: numbers a double does not hold', () => {
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
    expect(numberAt(text)).toBe(path);
  });

  it.each([
    '{"a":0.1,"b":-0,"c":1.50,"d":2.5E-3,"e":1.0000000000000000000,"f":123456789012345}',
    '{"a":"1e400 in a string","b":[true,false,null],"c":1e22,"d":9007199254740992}',
    '{"a":5e-324,"b":1.7976931348623157e308,"c":3.14159265358979}',
  ])('%s holds', (text) => {
    expect(numberAt(text)).toBeUndefined();
  });
});

describe('scanJson: lone surrogates', () => {
  it('finds half a pair in a value, an array item or a key, in document order', () => {
    expect(surrogateAt('{"a":{"b":"x\\ud800"}}')).toBe('R.a.b');
    expect(surrogateAt('{"a":["ok","\\udc00"]}')).toBe('R.a[1]');
    expect(surrogateAt('{"a":"\\udc00\\ud800"}')).toBe('R.a');
    expect(surrogateAt('{"a":{"k\\ud800":1}}')).toBe('R.a');
    expect(surrogateAt('{"a":"\\ud800","b":"\\ud800"}')).toBe('R.a');
    expect(surrogateAt('[[["\\ud800"]]]')).toBe('R[0][0][0]');
  });

  it('names an object whose key holds one before what it holds, as firstLoneSurrogate does', () => {
    expect(surrogateAt('{"a":"\\ud800","\\ud800":1}')).toBe('R');
    expect(surrogateAt('{"x":{"a":{"b":"\\ud800"},"k\\udc00":1},"\\ud800":2}')).toBe('R');
    expect(surrogateAt('{"x":{"a":{"b":"\\ud800"},"k\\udc00":1}}')).toBe('R.x');
    // An earlier sibling's value comes first.
    expect(surrogateAt('{"x":{"a":"\\ud800"},"y":{"\\ud800":1}}')).toBe('R.x.a');
  });

  it('pairs escaped halves with the characters written as UTF-8 beside them', () => {
    expect(surrogateAt('{"a":"\\ud83d😀"}')).toBe('R.a');
    expect(surrogateAt('{"a":"😀\\ude00"}')).toBe('R.a');
    expect(surrogateAt('{"a":"\\ud83d\\n"}')).toBe('R.a');
    expect(surrogateAt('{"a":"\\ud83d"}')).toBe('R.a');
  });

  it('passes whole pairs and plain text', () => {
    expect(surrogateAt('{"a":"\\ud83d\\ude00","b":[1,null,true]}')).toBeUndefined();
    expect(surrogateAt('{"a":"Chest CT 😀 \\u00e9\\uD83D\\uDE00"}')).toBeUndefined();
  });

  it('walks deep nesting without recursion', () => {
    const deep = '['.repeat(20_000) + '"\\ud800"' + ']'.repeat(20_000);
    expect(surrogateAt(deep, '')).toMatch(/^\[0\]/);
  });
});

describe('scanJson: linear time', () => {
  const MAX_BODY = 5 * 1024 * 1024; // FHIR_MAX_BODY_BYTES' default
  const fill = (head: string, unit: string, tail: string, bytes: number): Buffer =>
    Buffer.from(
      `${head}${unit.repeat(Math.max(1, Math.floor((bytes - head.length - tail.length) / unit.length)))}${tail}`,
      'utf8',
    );
  const shapes: Record<string, (bytes: number) => Buffer> = {
    nested: (b) => fill('{"x":[', `${'['.repeat(98)}1.25${']'.repeat(98)},`, '0]}', b),
    'long string': (b) => fill('{"x":"', 'a', '"}', b),
    escapes: (b) => fill('{"x":"', '\\u00e9\\n\\"\\ud83d\\ude00', '"}', b),
    numbers: (b) => fill('{"x":[', '0.30000000000000004,', '0]}', b),
    'keys with lone surrogates': (b) =>
      fill('{"x":[', `${'{"\\ud800":'.repeat(90)}"\\udc00"${'}'.repeat(90)},`, '0]}', b),
  };
  const timed = (body: Buffer): number => {
    scanJson(body);
    let best = Infinity;
    for (let i = 0; i < 5; i++) {
      const started = process.hrtime.bigint();
      scanJson(body, { maxDepth: 100 });
      best = Math.min(best, Number(process.hrtime.bigint() - started) / 1e6);
    }
    return best;
  };

  it.each(Object.keys(shapes))('%s: ten times the body takes about ten times as long', (name) => {
    const smallBody = shapes[name]!(MAX_BODY / 10);
    const largeBody = shapes[name]!(MAX_BODY);
    // Linear is 10; quadratic would be 100. A busy machine (a collection in the large run, another
    // process taking the core) can push one comparison past 30, never a quadratic one under it:
    // the best of three comparisons is taken.
    let ratio = Infinity;
    let large = Infinity;
    for (let attempt = 0; attempt < 3 && ratio >= 30; attempt++) {
      const small = timed(smallBody);
      large = timed(largeBody);
      ratio = Math.min(ratio, large / Math.max(small, 0.5));
    }
    expect(ratio).toBeLessThan(30);
    expect(large).toBeLessThan(2_000);
  });
});
