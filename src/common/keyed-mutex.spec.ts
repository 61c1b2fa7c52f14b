import { KeyedMutex } from './keyed-mutex';

const tick = () => new Promise((r) => setImmediate(r));

describe('KeyedMutex', () => {
  it('runs one holder of a key at a time, in arrival order; other keys run alongside', async () => {
    const mutex = new KeyedMutex();
    const log: string[] = [];
    let endFirst!: () => void;
    const first = mutex.run(['a'], async () => {
      log.push('a1 start');
      await new Promise<void>((r) => (endFirst = r));
      log.push('a1 end');
    });
    const second = mutex.run(['a', 'b'], async () => {
      log.push('a2');
    });
    const other = mutex.run(['c'], async () => {
      log.push('c');
    });
    await other;
    await tick();
    expect(log).toEqual(['a1 start', 'c']);
    endFirst();
    await Promise.all([first, second]);
    expect(log).toEqual(['a1 start', 'c', 'a1 end', 'a2']);
  });

  it('a failed holder releases its keys', async () => {
    const mutex = new KeyedMutex();
    await expect(mutex.run(['k'], () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await expect(mutex.run(['k'], () => Promise.resolve(7))).resolves.toBe(7);
    expect((mutex as unknown as { tails: Map<string, unknown> }).tails.size).toBe(0);
  });
});
