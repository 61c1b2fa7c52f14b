/**
 * The sandbox's notion of time. Token expiry, presigned URL expiry, rate-limit windows,
 * the 5-minute overwrite and 1-minute instance-join windows and every pipeline step read
 * it, so a test can move all of them at once with `advance()` instead of sleeping.
 *
 * 'real': wall clock plus an offset that `advance()` grows. 'manual': frozen until advanced.
 */
export class SandboxClock {
  private offsetMs = 0;
  private readonly frozenAt: number;

  constructor(readonly mode: 'real' | 'manual') {
    this.frozenAt = Date.now();
  }

  now(): number {
    return (this.mode === 'real' ? Date.now() : this.frozenAt) + this.offsetMs;
  }

  advance(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0)
      throw new RangeError('advance() takes a non-negative number of milliseconds');
    this.offsetMs += ms;
  }

  iso(at: number = this.now()): string {
    return new Date(at).toISOString();
  }
}
