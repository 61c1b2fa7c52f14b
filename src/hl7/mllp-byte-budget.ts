import { MllpConnection } from './mllp-connection';

/**
 * The global in-flight byte budget (see maxInflightBytes): bytes of inbound messages held
 * over all connections, partial frames, queued and in-handling messages included.
 */
export class MllpByteBudget {
  /** Bytes held over all connections (partial frames, queued and in-handling messages). */
  private inflight = 0;

  constructor(
    /** 0 disables the budget (bytes are still counted). */
    private readonly maxInflightBytes: number,
    private readonly connections: ReadonlyMap<string, MllpConnection>,
    /** True once the server is closing (a closing connection then still reads to drain). */
    private readonly serverClosing: () => boolean,
  ) {}

  get bytes(): number {
    return this.inflight;
  }

  /**
   * Recounts what a connection holds and applies the global byte budget: over it, reading
   * pauses on every connection but the one whose frame started first (it must be able to
   * finish, or nothing would ever be released); under it, paused connections resume.
   */
  account(conn: MllpConnection, closed = false): void {
    const held = closed
      ? 0
      : conn.decoder.bufferedBytes + conn.handling + conn.queue.reduce((n, m) => n + m.length, 0);
    this.inflight += held - conn.held;
    conn.held = held;
    if (!this.maxInflightBytes) return;
    if (this.inflight > this.maxInflightBytes) {
      // Progress is guaranteed either way: a message being handled releases its bytes when
      // answered; with none in hand, the oldest partial frame keeps reading until it is whole.
      const handling = [...this.connections.values()].some((c) => c.handling > 0);
      const first = handling ? undefined : this.oldestFrame();
      for (const c of this.connections.values()) {
        if (c === first || c.budgetPaused || c.socket.destroyed) continue;
        c.budgetPaused = true;
        c.socket.pause();
      }
      if (first?.budgetPaused) this.resume(first);
    } else {
      for (const c of this.connections.values()) if (c.budgetPaused) this.resume(c);
    }
  }

  private resume(conn: MllpConnection): void {
    conn.budgetPaused = false;
    if (!conn.paused && !(conn.closing && !this.serverClosing())) conn.socket.resume();
  }

  private oldestFrame(): MllpConnection | undefined {
    let best: MllpConnection | undefined;
    for (const c of this.connections.values()) {
      if (c.frameStartedAt === undefined || c.socket.destroyed) continue;
      if (!best || c.frameStartedAt < (best.frameStartedAt ?? Infinity)) best = c;
    }
    return best;
  }
}
