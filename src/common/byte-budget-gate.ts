import { setImmediate as nextTurn } from 'node:timers/promises';

/**
 * Runs work on inputs of known size with at most `budget` bytes of them under way at once
 * (first come, first served); an input larger than the budget runs alone. Each run starts in
 * a turn of the event loop of its own, so what waits (a `/health` check) is served between
 * two runs. Parsing, validating and mapping a body of several MB is work that cannot be split:
 * bodies that arrive together ran back to back in one turn and held the event loop for all of
 * them.
 */
export class ByteBudgetGate {
  private inUse = 0;
  private running = 0;
  private readonly waiting: Array<{ bytes: number; admit: () => void }> = [];

  constructor(private readonly budget: number) {}

  async run<T>(bytes: number, fn: () => Promise<T>): Promise<T> {
    if (!this.fits(bytes) || this.waiting.length > 0) {
      await new Promise<void>((admit) => this.waiting.push({ bytes, admit }));
    } else {
      this.take(bytes);
    }
    try {
      await nextTurn();
      return await fn();
    } finally {
      this.inUse -= bytes;
      this.running -= 1;
      this.admitWaiting();
    }
  }

  private fits(bytes: number): boolean {
    return this.running === 0 || this.inUse + bytes <= this.budget;
  }

  private take(bytes: number): void {
    this.inUse += bytes;
    this.running += 1;
  }

  private admitWaiting(): void {
    while (this.waiting.length > 0 && this.fits(this.waiting[0]!.bytes)) {
      const next = this.waiting.shift()!;
      this.take(next.bytes);
      next.admit();
    }
  }
}
