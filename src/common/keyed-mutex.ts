/**
 * In-process mutual exclusion per key: `run(keys, fn)` runs `fn` once no other run holding
 * any of those keys is under way. Keys are taken in sorted order, so two runs with
 * overlapping keys never wait on each other in a circle. A key's entry is dropped once its
 * last holder ends (the map does not grow with the keys ever seen).
 */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>();

  async run<T>(keys: readonly string[], fn: () => Promise<T>): Promise<T> {
    const releases: Array<() => void> = [];
    try {
      for (const key of [...new Set(keys)].sort()) releases.push(await this.acquire(key));
      return await fn();
    } finally {
      for (const release of releases.reverse()) release();
    }
  }

  private async acquire(key: string): Promise<() => void> {
    const before = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => {
      release = resolve;
    });
    const tail = before.then(() => mine);
    this.tails.set(key, tail);
    await before;
    return () => {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    };
  }
}
