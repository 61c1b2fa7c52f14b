import tls from 'node:tls';

export interface MllpMessageMeta {
  remoteAddress: string;
  connectionId: string;
  /** The frame ended with FS alone (no CR): tolerated, recorded with the message. */
  missingCr?: boolean;
}

/**
 * Processes one inbound payload and returns the reply payload (unframed). An empty Buffer means
 * "send nothing" (e.g. enhanced mode with MSH-15 = NE).
 */
export type MllpHandler = (message: Buffer, meta: MllpMessageMeta) => Promise<Buffer>;

/** Operational events, for logs and metrics. They never carry message content (no PHI). */
export type MllpServerEvent =
  | { type: 'connection-open'; connectionId: string; remoteAddress: string }
  | { type: 'connection-closed'; connectionId: string; remoteAddress: string }
  | { type: 'handler-error'; connectionId: string; error: unknown }
  | { type: 'oversize-frame'; connectionId: string; detail: string }
  | { type: 'discarded-bytes'; connectionId: string; bytes: number }
  | { type: 'missing-cr'; connectionId: string }
  | { type: 'socket-error'; connectionId: string; error: Error }
  | { type: 'frame-timeout'; connectionId: string; ms: number }
  | { type: 'idle-timeout'; connectionId: string; ms: number }
  | { type: 'write-stalled'; connectionId: string; ms: number; pendingBytes: number }
  | { type: 'connection-evicted'; connectionId: string; idleMs: number }
  | { type: 'connection-refused'; remoteAddress: string; reason: string };

export interface MllpServerOptions {
  handler: MllpHandler;
  /** Bind address; loopback unless configured (the app passes its config value). */
  host?: string;
  /** 0 picks a free port (tests). */
  port: number;
  maxMessageBytes?: number;
  /** When set, the listener speaks MLLP over TLS with these options (key, cert, ca...). */
  tls?: tls.TlsOptions;
  /** Close a connection idle for this long; 0 (default) keeps connections open indefinitely. */
  idleTimeoutMs?: number;
  /**
   * A frame that has started (VT) must end (FS CR) within this time, or the connection is
   * closed: a slow-loris sender cannot hold a connection and its buffer forever. Default 30 s;
   * 0 disables it. Idle connections between messages are not affected.
   */
  frameTimeoutMs?: number;
  /**
   * Connections open at once (default 1000). At the limit a new connection is still served:
   * the connection idle longest (no frame under way, nothing queued or being handled) is
   * closed to make room; only when none is idle is the new one refused.
   */
  maxConnections?: number;
  /**
   * Connections open at once from one peer address (default: `maxConnections`). At that bound
   * the address's own idlest connection gives way to its new one; when none of its connections
   * is idle the new one is refused. One address with a frame under way on every connection
   * held the whole table, and reconnected after each frame timeout.
   */
  maxConnectionsPerClient?: number;
  /**
   * Bytes of inbound messages held at once over all connections (received and not yet
   * answered, partial frames included). Above it, reading pauses instead of buffering, except
   * on the connection whose frame started first, so that one message always completes.
   * Default 4 MiB; 0 disables it.
   */
  maxInflightBytes?: number;
  /**
   * Messages received but not yet answered on one connection before reading from it pauses
   * (default 8): a sender pipelining without reading its ACKs cannot fill our memory.
   */
  maxQueuedMessages?: number;
  onEvent?: (event: MllpServerEvent) => void;
  /** Control ID generator for the fallback AR sent when the handler throws. */
  controlIdGenerator?: () => string;
  clock?: () => Date;
}
