import { sha256Hex, storableKey } from './hash';

describe('sha256Hex', () => {
  it('hashes bytes and the UTF-8 bytes of a string alike', () => {
    const empty = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
    expect(sha256Hex('')).toBe(empty);
    expect(sha256Hex(Buffer.alloc(0))).toBe(empty);
    expect(sha256Hex('é')).toBe(sha256Hex(Buffer.from('é', 'utf8')));
  });
});

describe('storableKey', () => {
  it('keeps a key up to 512 characters; a longer one becomes its start and a digest of the whole', () => {
    const short = `fhir-subscription|Subscription/1|events:${'1,'.repeat(200)}`;
    expect(storableKey(short)).toBe(short);
    const long = `fhir-subscription|Subscription/1|events:${Array.from({ length: 3000 }, (_, i) => i).join(',')}`;
    const stored = storableKey(long);
    expect(stored.length).toBeLessThan(300);
    expect(stored).toBe(`${long.slice(0, 200)}…sha256:${sha256Hex(long)}`);
    expect(storableKey(stored)).toBe(stored); // idempotent (reprocess passes stored keys back)
    expect(storableKey(`${long}9`)).not.toBe(stored);
  });

  it('never cuts a surrogate pair in two', () => {
    const key = `${'a'.repeat(199)}\ud83d\ude00${'b'.repeat(600)}`;
    expect(storableKey(key).startsWith(`${'a'.repeat(199)}…`)).toBe(true);
  });
});
