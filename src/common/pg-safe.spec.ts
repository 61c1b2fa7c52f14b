import { pgJson, pgSafeDeep, pgText } from './pg-safe';

describe('pg-safe: values derived from input are storable, and valid as text', () => {
  it('replaces NUL in strings, nested strings and keys; leaves bytes as they are', () => {
    const raw = Buffer.from('MSH|^~\\&|\u0000', 'latin1');
    const input = {
      raw,
      sender: 'RIS\u0000A',
      orders: [{ request: { patient: { name: { given: ['AN\u0000NA'] } } }, n: 1 }],
      quirks: [{ code: 'z-segment', detail: { ['Z\u0000S']: true } }],
      at: new Date(0),
    };
    const safe = pgSafeDeep(input);
    expect(safe).toEqual({
      raw,
      sender: 'RIS\uFFFDA',
      orders: [{ request: { patient: { name: { given: ['AN\uFFFDNA'] } } }, n: 1 }],
      quirks: [{ code: 'z-segment', detail: { ['Z\uFFFDS']: true } }],
      at: new Date(0),
    });
    expect(safe.raw).toBe(raw); // the exact bytes, not a copy
    expect(input.sender).toBe('RIS\u0000A'); // the input is not changed in place
  });

  it('returns the value itself when nothing in it holds a NUL (no copy on the hot path)', () => {
    const input = { sender: 'RIS', orders: [{ request: { accessionNumber: 'ACC-1' } }] };
    expect(pgSafeDeep(input)).toBe(input);
  });

  it('keeps functions (ports) and non-string leaves', () => {
    const respond = () => 'ok';
    const safe = pgSafeDeep({ respond, n: 3, flag: false, none: null, s: '\u0000' });
    expect(safe.respond).toBe(respond);
    expect(safe).toMatchObject({ n: 3, flag: false, none: null, s: '\uFFFD' });
  });

  it('replaces a lone surrogate (jsonb refuses its \\ud800 escape), keeps a pair', () => {
    const input = { text: 'Chest \ud800 CT', id: ['P-\udc00'], ok: 'emoji \ud83d\ude00' };
    expect(pgSafeDeep(input)).toEqual({
      text: 'Chest \uFFFD CT',
      id: ['P-\uFFFD'],
      ok: 'emoji \ud83d\ude00',
    });
    expect(pgSafeDeep({ ok: 'emoji \ud83d\ude00' }).ok).toBe('emoji \ud83d\ude00');
    expect(pgText('\udc00\ud800')).toBe('\uFFFD\uFFFD');
    expect(JSON.parse(pgJson({ a: ['x\ud800'], ['k\udc00']: 1 }))).toEqual({
      a: ['x\uFFFD'],
      ['k\uFFFD']: 1,
    });
  });

  it('replaces every other control character too, but keeps TAB, LF and CR', () => {
    expect(pgText('A\u0007B\u000bC\u001cD\u001bE\u007fF')).toBe(
      'A\uFFFDB\uFFFDC\uFFFDD\uFFFDE\uFFFDF',
    );
    expect(pgText('line 1\r\nline\t2\n')).toBe('line 1\r\nline\t2\n');
    const clean = { note: 'tab\tand\nbreaks', name: 'Müller' };
    expect(pgSafeDeep(clean)).toBe(clean);
    expect(pgSafeDeep({ name: ['SCHMIDT\u001c'] })).toEqual({ name: ['SCHMIDT\uFFFD'] });
  });

  it('replaces the C1 controls U+0080-U+009F as C0 ones, keeps the letters and signs around them', () => {
    // Windows-1252's undefined bytes 0x81 0x8D 0x8F 0x90 0x9D decode to these; UTF-8 C2 80-C2 9F too
    expect(pgText('O\u2019NEILL\u0081 \u008d\u008f\u0090\u009d \u0080\u0085\u009f')).toBe(
      'O\u2019NEILL\uFFFD \uFFFD\uFFFD\uFFFD\uFFFD \uFFFD\uFFFD\uFFFD',
    );
    // the characters either side of the range stay: DEL's neighbour ~, NBSP, ¡, é
    const clean = { name: '~\u00a0\u00a1\u00e9\u20ac' };
    expect(pgSafeDeep(clean)).toBe(clean);
    expect(pgSafeDeep({ name: ['GRACE\u0085'] })).toEqual({ name: ['GRACE\uFFFD'] });
  });

  it('pgText and pgJson', () => {
    expect(pgText('a\u0000b\u0000')).toBe('a\uFFFDb\uFFFD');
    expect(pgText(null)).toBeNull();
    expect(JSON.parse(pgJson({ a: ['x\u0000'] }))).toEqual({ a: ['x\uFFFD'] });
  });
});
