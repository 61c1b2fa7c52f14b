/**
 * One run at a time of a piece of work that any number of callers ask for, each caller
 * answered by a run that started after it asked. A caller that arrives while a run is under
 * way waits for it, then for the one run started next on behalf of every caller that arrived
 * meanwhile: a flood of N requests costs at most two runs, not N. Every caller of a run gets
 * its outcome, its value or its error (during an outage a flood costs two failed runs, not N
 * one after another).
 */
export class CoalescedRuns<T> {
  private arrived = 0;
  /** The latest run to end: the callers up to `upTo` asked before it started. */
  private last: { upTo: number; value?: T; error?: unknown; failed: boolean } = {
    upTo: 0,
    failed: false,
  };
  private running: Promise<unknown> | undefined;

  /**
   * `ran`: this caller started the run; `covered`: another caller's run, started after this
   * one asked, answers it.
   */
  async run(work: () => Promise<T>): Promise<{ kind: 'ran' | 'covered'; value: T }> {
    const ticket = ++this.arrived;
    for (;;) {
      if (this.last.upTo >= ticket) {
        if (this.last.failed) throw this.last.error;
        return { kind: 'covered', value: this.last.value as T };
      }
      if (!this.running) {
        const upTo = this.arrived;
        const run = work();
        this.running = run;
        try {
          const value = await run;
          this.last = { upTo, value, failed: false };
          return { kind: 'ran', value };
        } catch (error) {
          this.last = { upTo, error, failed: true };
          throw error;
        } finally {
          this.running = undefined;
        }
      }
      await this.running.catch(() => undefined);
    }
  }
}

/**
 * CoalescedRuns per key (e.g. per Subscription): runs of one key coalesce, runs of different
 * keys do not wait for each other. A key's entry lives only while a caller of it waits, so
 * keys a sender makes up do not pile up in memory.
 */
export class KeyedCoalescedRuns<T> {
  private readonly runs = new Map<string, { runs: CoalescedRuns<T>; callers: number }>();

  async run(key: string, work: () => Promise<T>): Promise<{ kind: 'ran' | 'covered'; value: T }> {
    let entry = this.runs.get(key);
    if (!entry) {
      entry = { runs: new CoalescedRuns<T>(), callers: 0 };
      this.runs.set(key, entry);
    }
    entry.callers++;
    try {
      return await entry.runs.run(work);
    } finally {
      if (--entry.callers === 0) this.runs.delete(key);
    }
  }

  /** Keys with a caller waiting (for tests and metrics). */
  get size(): number {
    return this.runs.size;
  }
}
