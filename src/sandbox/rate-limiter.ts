import type { SandboxClock } from './sandbox-clock';

const WINDOW_MS = 60_000;

interface Window {
  startedAt: number;
  count: number;
}

/**
 * Fixed one-minute windows per key ("Limits": 600 per endpoint, 2,000 per IP per minute).
 * The contract does not show reset timing; a window starts with the first request of a key
 * and `Retry-After` tells the seconds until it ends (docs/upstream-assumptions.md).
 */
export class RateLimiter {
  private readonly windows = new Map<string, Window>();

  constructor(private readonly clock: SandboxClock) {}

  /** Counts one request; returns null when allowed, else the seconds to wait. */
  hit(key: string, limit: number): number | null {
    const now = this.clock.now();
    let w = this.windows.get(key);
    if (!w || now - w.startedAt >= WINDOW_MS) {
      w = { startedAt: now, count: 0 };
      this.windows.set(key, w);
    }
    if (w.count >= limit) {
      return Math.max(1, Math.ceil((w.startedAt + WINDOW_MS - now) / 1000));
    }
    w.count += 1;
    return null;
  }

  /** Drops finished windows so the map does not grow without bound. */
  prune(): void {
    const now = this.clock.now();
    for (const [key, w] of this.windows)
      if (now - w.startedAt >= WINDOW_MS) this.windows.delete(key);
  }
}
