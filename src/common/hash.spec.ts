import { sha256Hex } from './hash';

describe('sha256Hex', () => {
  it('hashes bytes and the UTF-8 bytes of a string alike', () => {
    const empty = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
    expect(sha256Hex('')).toBe(empty);
    expect(sha256Hex(Buffer.alloc(0))).toBe(empty);
    expect(sha256Hex('é')).toBe(sha256Hex(Buffer.from('é', 'utf8')));
  });
});
