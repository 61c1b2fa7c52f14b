import { ByteBudgetGate } from './byte-budget-gate';

describe('ByteBudgetGate', () => {
  const deferred = () => {
    let resolve!: () => void;
    const promise = new Promise<void>((r) => (resolve = r));
    return { promise, resolve };
  };

  it('runs inputs together within the budget, in arrival order beyond it; one larger than the budget alone', async () => {
    const gate = new ByteBudgetGate(10);
    const started: string[] = [];
    const ends = { a: deferred(), b: deferred(), c: deferred(), d: deferred() };
    const run = (name: keyof typeof ends, bytes: number) =>
      gate.run(bytes, async () => {
        started.push(name);
        await ends[name].promise;
        return name;
      });
    const a = run('a', 6);
    const b = run('b', 4); // 6 + 4 fits
    const c = run('c', 25); // larger than the budget: waits for all, then runs alone
    const d = run('d', 1); // arrived after c: waits behind it (no overtaking)
    await new Promise((r) => setTimeout(r, 20));
    expect(started).toEqual(['a', 'b']);
    ends.a.resolve();
    await a;
    await new Promise((r) => setTimeout(r, 20));
    expect(started).toEqual(['a', 'b']);
    ends.b.resolve();
    await b;
    await new Promise((r) => setTimeout(r, 20));
    expect(started).toEqual(['a', 'b', 'c']);
    ends.c.resolve();
    await c;
    ends.d.resolve();
    expect(await d).toBe('d');
    expect(started).toEqual(['a', 'b', 'c', 'd']);
  });

  it('releases its bytes when the work throws', async () => {
    const gate = new ByteBudgetGate(5);
    await expect(gate.run(5, () => Promise.reject(new Error('refused')))).rejects.toThrow(
      'refused',
    );
    expect(await gate.run(5, () => Promise.resolve('next'))).toBe('next');
  });
});
