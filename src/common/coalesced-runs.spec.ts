import { CoalescedRuns, KeyedCoalescedRuns } from './coalesced-runs';

/** A run the test ends when it wants, counting how many were started. */
function controlledWork() {
  const runs: Array<{ resolve: (v: number) => void; reject: (e: Error) => void }> = [];
  const work = () =>
    new Promise<number>((resolve, reject) => {
      runs.push({ resolve, reject });
    });
  return { runs, work };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('CoalescedRuns', () => {
  it('callers arriving during a run are answered by one next run, started after they asked', async () => {
    const runs = new CoalescedRuns<number>();
    const { runs: started, work } = controlledWork();
    const first = runs.run(work);
    await tick();
    const waiting = [runs.run(work), runs.run(work), runs.run(work)];
    await tick();
    expect(started).toHaveLength(1);
    started[0]!.resolve(1);
    expect(await first).toEqual({ kind: 'ran', value: 1 });
    await tick();
    // The first run started before they asked: it does not answer them; one more run does.
    expect(started).toHaveLength(2);
    started[1]!.resolve(2);
    const answers = await Promise.all(waiting);
    expect(answers.map((a) => a.value)).toEqual([2, 2, 2]);
    expect(answers.filter((a) => a.kind === 'ran')).toHaveLength(1);
    expect(started).toHaveLength(2);
  });

  it("a failed run fails every caller it was to answer; the next caller's run starts afresh", async () => {
    const runs = new CoalescedRuns<number>();
    const { runs: started, work } = controlledWork();
    const first = runs.run(work);
    await tick();
    const waiting = [runs.run(work), runs.run(work)];
    await tick();
    started[0]!.reject(new Error('EHR down'));
    await expect(first).rejects.toThrow('EHR down');
    await tick();
    started[1]!.reject(new Error('EHR still down'));
    for (const w of waiting) await expect(w).rejects.toThrow('EHR still down');
    expect(started).toHaveLength(2);
    const later = runs.run(work);
    await tick();
    started[2]!.resolve(3);
    expect(await later).toEqual({ kind: 'ran', value: 3 });
  });
});

describe('KeyedCoalescedRuns', () => {
  it('coalesces runs of one key, not of two, and forgets a key when nobody waits', async () => {
    const runs = new KeyedCoalescedRuns<number>();
    const { runs: started, work } = controlledWork();
    const a = [runs.run('A', work), runs.run('A', work), runs.run('A', work)];
    const b = runs.run('B', work);
    await tick();
    // one run for A (the others wait for the next), one for B at the same time
    expect(started).toHaveLength(2);
    expect(runs.size).toBe(2);
    started[0]!.resolve(1);
    started[1]!.resolve(2);
    await tick();
    await tick();
    expect(started).toHaveLength(3);
    started[2]!.resolve(3);
    const answers = await Promise.all([...a, b]);
    expect(answers.map((x) => x.value)).toEqual([1, 3, 3, 2]);
    expect(runs.size).toBe(0);
  });
});
