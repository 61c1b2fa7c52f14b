import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

interface Held {
  socket: Socket;
  /** Requests whose answer has not finished. */
  underWay: number;
  /** Since when nothing has been under way (opened, or last answer finished). */
  idleSince: number;
}

/**
 * Bounds the connections the sandbox holds: Node counts none and keeps one that never sends a
 * byte for ever. In-process (nothing configured, tests), every such connection was a file handle
 * of the adapter's own process, open to any local client. Here:
 *
 * - at most `maxConnections`; at the bound the connection idle the longest (no request under
 *   way) gives way to the new one, and only when every one has a request under way is the new
 *   one closed at once, so a flood of silent sockets cannot lock the adapter out;
 * - a connection with no request under way for `idleTimeoutMs` (silent from the start, or
 *   between keep-alive requests) is closed.
 *
 * Bodies are bounded elsewhere: JSON and forms at 1 MiB (http-router.ts), uploads by their
 * presigned URL's limit (object-storage.handler.ts), and by Node's request timeout.
 */
export function boundConnections(
  server: Server,
  limits: { maxConnections: number; idleTimeoutMs: number },
): () => void {
  const held = new Map<Socket, Held>();

  const evictIdlest = (): boolean => {
    let idlest: Held | undefined;
    for (const h of held.values())
      if (h.underWay === 0 && (idlest === undefined || h.idleSince < idlest.idleSince)) idlest = h;
    if (!idlest) return false;
    held.delete(idlest.socket);
    idlest.socket.destroy();
    return true;
  };

  server.on('connection', (socket: Socket) => {
    if (held.size >= limits.maxConnections && !evictIdlest()) {
      socket.destroy();
      return;
    }
    held.set(socket, { socket, underWay: 0, idleSince: Date.now() });
    socket.once('close', () => held.delete(socket));
  });
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    const h = held.get(req.socket);
    if (!h) return;
    h.underWay += 1;
    let done = false;
    const finished = (): void => {
      if (done) return;
      done = true;
      h.underWay -= 1;
      if (h.underWay === 0) h.idleSince = Date.now();
    };
    res.once('finish', finished);
    res.once('close', finished);
  });

  const timer = setInterval(
    () => {
      const cutoff = Date.now() - limits.idleTimeoutMs;
      for (const h of [...held.values()]) {
        if (h.underWay > 0 || h.idleSince > cutoff) continue;
        held.delete(h.socket);
        h.socket.destroy();
      }
    },
    Math.min(1_000, limits.idleTimeoutMs),
  );
  timer.unref();
  return () => clearInterval(timer);
}
