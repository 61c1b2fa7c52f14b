import { uuidv7 } from './uuid-v7';

describe('uuidv7', () => {
  it('is an RFC 9562 version 7 UUID carrying the time in its first 48 bits', () => {
    const now = Date.UTC(2026, 10, 21, 12, 0, 0);
    const id = uuidv7(now);
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(now);
  });

  it('orders ids of one millisecond and of later ones, and repeats none', () => {
    const ids: string[] = [];
    for (let ms = 0; ms < 20; ms++) {
      for (let i = 0; i < 500; i++) ids.push(uuidv7(1_795_000_000_000 + ms));
    }
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
  });
});
