import { randomUUID } from 'node:crypto';
import net from 'node:net';

import { MllpDecoder } from './mllp-framing';

/** One MLLP connection's state: its decoder, its queue, and what it holds of the byte budget. */
export interface MllpConnection {
  id: string;
  socket: net.Socket;
  remoteAddress: string;
  decoder: MllpDecoder;
  queue: Buffer[];
  busy: boolean;
  closing: boolean;
  frameTimer?: NodeJS.Timeout;
  /** Waits for the CR after an FS that ended the data so far (MISSING_CR_WAIT_MS). */
  crTimer?: NodeJS.Timeout;
  /** Messages whose frame ended without the CR. */
  missingCr: WeakSet<Buffer>;
  paused: boolean;
  /** Paused because the global in-flight byte budget is spent (see maxInflightBytes). */
  budgetPaused: boolean;
  /** Bytes of this connection counted in the in-flight total. */
  held: number;
  /** The message being handled (its bytes stay held until the reply is written). */
  handling: number;
  /** When the current partial frame started (for the budget's progress guarantee). */
  frameStartedAt?: number;
  lastActivity: number;
}

export function openConnection(socket: net.Socket, maxMessageBytes: number): MllpConnection {
  return {
    id: randomUUID(),
    socket,
    remoteAddress: socket.remoteAddress ?? 'unknown',
    decoder: new MllpDecoder({ maxMessageBytes }),
    queue: [],
    missingCr: new WeakSet(),
    busy: false,
    closing: false,
    paused: false,
    budgetPaused: false,
    held: 0,
    handling: 0,
    lastActivity: Date.now(),
  };
}

/** Nothing under way on the connection: no partial frame, nothing queued or handled. */
export function isIdle(conn: MllpConnection): boolean {
  return !conn.busy && conn.queue.length === 0 && !conn.decoder.hasPartialFrame;
}

/**
 * A frame that has started must end within `limit` ms (see frameTimeoutMs); the timer runs
 * only while a partial frame is buffered.
 */
export function watchPartialFrame(
  conn: MllpConnection,
  limit: number,
  onTimeout: () => void,
): void {
  if (conn.decoder.hasPartialFrame) {
    if (!conn.frameTimer) {
      conn.frameTimer = setTimeout(() => {
        onTimeout();
        conn.socket.destroy();
      }, limit);
      conn.frameTimer.unref();
    }
  } else if (conn.frameTimer) {
    clearTimeout(conn.frameTimer);
    conn.frameTimer = undefined;
  }
}

export function endIfIdle(conn: MllpConnection): void {
  if (conn.closing && !conn.busy && conn.queue.length === 0 && !conn.socket.destroyed) {
    // Flush what was written, then release the socket even if the peer keeps its side open.
    conn.socket.end(() => conn.socket.destroy());
  }
}
