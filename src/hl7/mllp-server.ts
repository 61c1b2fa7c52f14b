import net from 'node:net';
import tls from 'node:tls';

import { buildAck, newAckControlId } from './hl7-ack.builder';
import { parseHl7 } from './hl7-message';
import { MllpByteBudget } from './mllp-byte-budget';
import {
  endIfIdle,
  isIdle,
  MllpConnection,
  openConnection,
  watchPartialFrame,
} from './mllp-connection';
import {
  DEFAULT_MAX_MLLP_MESSAGE_BYTES,
  encodeMllpFrame,
  MISSING_CR_WAIT_MS,
} from './mllp-framing';
import { MllpServerEvent, MllpServerOptions } from './mllp-server.options';

// The options and events, the connection state and the byte budget live in their own files;
// the types are re-exported here so that callers keep importing them from the server.
export type {
  MllpHandler,
  MllpMessageMeta,
  MllpServerEvent,
  MllpServerOptions,
} from './mllp-server.options';

/**
 * MLLP listener (HL7 v2.5.1 Implementation Guide Appendix C.4) over node:net or node:tls.
 * Connections are long-lived; on each one, messages are handled strictly one at a time: the
 * next frame is handed to the handler only after the previous reply has been written, as the
 * original acknowledgment rules require (v2.5.1 section 2.9.2). A throwing handler is answered
 * with AR / ERR 207 and never stops the server.
 */
export class MllpServer {
  private readonly server: net.Server;
  private readonly connections = new Map<string, MllpConnection>();
  private readonly rawSockets = new Set<net.Socket>();
  private readonly maxMessageBytes: number;
  private readonly maxConnections: number;
  private readonly maxPerClient: number;
  private readonly budget: MllpByteBudget;
  private closing = false;
  private drained?: () => void;

  constructor(private readonly options: MllpServerOptions) {
    this.maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MLLP_MESSAGE_BYTES;
    this.maxConnections = options.maxConnections ?? 1000;
    this.maxPerClient = options.maxConnectionsPerClient ?? this.maxConnections;
    this.budget = new MllpByteBudget(
      options.maxInflightBytes ?? 4 * 1024 * 1024,
      this.connections,
      () => this.closing,
    );
    const onSocket = (socket: net.Socket): void => this.accept(socket);
    // allowHalfOpen: a sender may write its messages and half-close at once; it still gets
    // every answer, and we close after the last one.
    this.server = options.tls
      ? tls.createServer(
          {
            ...options.tls,
            allowHalfOpen: true,
            // a handshake is held to the frame timeout, not Node's 120 s
            handshakeTimeout: (options.frameTimeoutMs ?? 30_000) || 120_000,
          },
          onSocket,
        )
      : net.createServer({ allowHalfOpen: true }, onSocket);
    // The limit is ours (accept()), not the kernel's: at the limit an idle connection gives
    // way to the new one instead of the new one being reset.
    // Every TCP socket, including TLS ones still in their handshake, so close() can end them.
    this.server.on('connection', (raw: net.Socket) => {
      // A TLS socket reaches accept() after its handshake: until then it is counted here, so
      // silent TCP connections to the TLS port cannot hold descriptors past the limit.
      if (options.tls && this.rawSockets.size >= this.maxConnections && !this.evictIdlest()) {
        this.emit({
          type: 'connection-refused',
          remoteAddress: raw.remoteAddress ?? 'unknown',
          reason: `all ${this.maxConnections} connections are busy (TLS handshakes included)`,
        });
        raw.destroy();
        return;
      }
      // Handshakes count against their address too: one address holding silent TCP
      // connections to the TLS port took every place before its per-address bound applied.
      if (options.tls && !this.admitFromAddress(raw, [...this.rawSockets])) return;
      this.rawSockets.add(raw);
      raw.once('close', () => this.rawSockets.delete(raw));
    });
    if (options.tls) {
      // A failed handshake (untrusted client, plain TCP on a TLS port) just ends that socket.
      this.server.on('tlsClientError', (error: Error, socket: tls.TLSSocket) => {
        this.emit({ type: 'socket-error', connectionId: 'handshake', error });
        socket.destroy();
      });
    }
    // Errors on the listening socket after start are reported, never thrown.
    this.server.on('error', (error) =>
      this.emit({ type: 'socket-error', connectionId: 'listener', error }),
    );
  }

  /** Starts listening; resolves with the bound address (useful with port 0). */
  listen(): Promise<net.AddressInfo> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.server.once('error', onError);
      this.server.listen(this.options.port, this.options.host ?? '127.0.0.1', () => {
        this.server.off('error', onError);
        resolve(this.server.address() as net.AddressInfo);
      });
    });
  }

  get connectionCount(): number {
    return this.connections.size;
  }

  /** Bytes of inbound messages held now over all connections (for tests and metrics). */
  get inflightBytes(): number {
    return this.budget.bytes;
  }

  /** Messages received and not yet handed to the handler, over all connections. */
  get queuedMessages(): number {
    let n = 0;
    for (const conn of this.connections.values()) n += conn.queue.length;
    return n;
  }

  /**
   * Stops accepting connections, lets every connection finish the messages it has already
   * received (replies written), then closes them. After `timeoutMs` the rest are destroyed.
   */
  async close(timeoutMs = 10_000): Promise<void> {
    this.closing = true;
    const serverClosed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    const allDrained = new Promise<void>((resolve) => {
      this.drained = resolve;
    });
    for (const conn of this.connections.values()) {
      conn.closing = true;
      conn.socket.pause();
      endIfIdle(conn);
    }
    this.checkDrained();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        for (const conn of this.connections.values()) conn.socket.destroy();
        resolve();
      }, timeoutMs);
    });
    await Promise.race([allDrained, timeout]);
    clearTimeout(timer);
    // Anything left (a TLS handshake in progress, a half-open peer) would keep the listener open.
    for (const raw of this.rawSockets) raw.destroy();
    await serverClosed;
  }

  private accept(socket: net.Socket): void {
    if (this.closing) {
      socket.destroy();
      return;
    }
    // (TLS: counted with the handshakes, in the 'connection' listener.)
    if (!this.options.tls && !this.admitFromAddress(socket, [...this.connections.values()])) return;
    if (this.connections.size >= this.maxConnections && !this.evictIdlest()) {
      this.emit({
        type: 'connection-refused',
        remoteAddress: socket.remoteAddress ?? 'unknown',
        reason: `all ${this.maxConnections} connections are busy`,
      });
      socket.destroy();
      return;
    }
    const conn = openConnection(socket, this.maxMessageBytes);
    this.connections.set(conn.id, conn);
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 60_000);
    if (this.options.idleTimeoutMs) {
      // Idle between frames only: a frame under way has its own timer (frameTimeoutMs), and
      // a message being handled keeps its connection however long that takes.
      socket.setTimeout(this.options.idleTimeoutMs, () => {
        // An answer the peer has not taken for as long (it sends and never reads: its
        // receive window is full) held the connection busy for ever, never idle, never
        // evicted. The message is stored; the peer that resends it gets its answer again.
        if (socket.writableLength > 0) {
          this.emit({
            type: 'write-stalled',
            connectionId: conn.id,
            ms: this.options.idleTimeoutMs!,
            pendingBytes: socket.writableLength,
          });
          socket.destroy();
        } else if (isIdle(conn)) {
          this.emit({
            type: 'idle-timeout',
            connectionId: conn.id,
            ms: this.options.idleTimeoutMs!,
          });
          socket.destroy();
        }
      });
    }
    this.emit({
      type: 'connection-open',
      connectionId: conn.id,
      remoteAddress: conn.remoteAddress,
    });
    socket.on('data', (chunk: Buffer) => this.onData(conn, chunk));
    socket.on('error', (error) =>
      this.emit({ type: 'socket-error', connectionId: conn.id, error }),
    );
    socket.on('end', () => {
      conn.closing = true;
      // Nothing more comes: a frame that ended with FS waits for no CR. Left to its timer, it
      // found the connection ended and was dropped unanswered, never stored.
      if (conn.decoder.awaitingCr) this.takeWithoutCr(conn);
      endIfIdle(conn);
    });
    socket.on('close', () => {
      if (conn.frameTimer) clearTimeout(conn.frameTimer);
      if (conn.crTimer) clearTimeout(conn.crTimer);
      this.connections.delete(conn.id);
      conn.queue.length = 0;
      conn.handling = 0;
      this.budget.account(conn, true);
      this.emit({
        type: 'connection-closed',
        connectionId: conn.id,
        remoteAddress: conn.remoteAddress,
      });
      this.checkDrained();
    });
  }

  private onData(conn: MllpConnection, chunk: Buffer): void {
    if (conn.closing && !this.closing) return;
    conn.lastActivity = Date.now();
    const wasInFrame = conn.decoder.hasPartialFrame;
    const result = conn.decoder.push(chunk);
    if (!conn.decoder.hasPartialFrame) conn.frameStartedAt = undefined;
    else if (!wasInFrame || result.messages.length > 0) conn.frameStartedAt = Date.now();
    if (result.discardedBytes > 0) {
      this.emit({ type: 'discarded-bytes', connectionId: conn.id, bytes: result.discardedBytes });
    }
    conn.queue.push(...result.messages);
    for (const m of result.missingCr) this.noteMissingCr(conn, m);
    this.awaitCr(conn);
    const frameTimeoutMs = this.options.frameTimeoutMs ?? 30_000;
    if (frameTimeoutMs) {
      watchPartialFrame(conn, frameTimeoutMs, () =>
        this.emit({ type: 'frame-timeout', connectionId: conn.id, ms: frameTimeoutMs }),
      );
    }
    if (conn.queue.length >= (this.options.maxQueuedMessages ?? 8) && !conn.paused) {
      conn.paused = true;
      conn.socket.pause();
    }
    if (result.errors.length > 0) {
      for (const error of result.errors) {
        this.emit({ type: 'oversize-frame', connectionId: conn.id, detail: error.message });
      }
      // The peer is sending more than we accept; replying is impossible (no header was read
      // in full) and waiting would only make it time out. Finish what is queued, then close.
      conn.closing = true;
      conn.socket.pause();
    }
    this.budget.account(conn);
    void this.pump(conn);
  }

  private noteMissingCr(conn: MllpConnection, message: Buffer): void {
    conn.missingCr.add(message);
    this.emit({ type: 'missing-cr', connectionId: conn.id });
  }

  /**
   * The data so far ends with an FS: its CR normally follows in the same packet. A sender that
   * leaves the CR out waits for our answer and sends nothing more, so after MISSING_CR_WAIT_MS
   * the frame is taken as it is (a CR arriving later is taken as its trailer).
   */
  private awaitCr(conn: MllpConnection): void {
    if (conn.crTimer) clearTimeout(conn.crTimer);
    conn.crTimer = undefined;
    if (!conn.decoder.awaitingCr) return;
    conn.crTimer = setTimeout(() => this.takeWithoutCr(conn), MISSING_CR_WAIT_MS);
    conn.crTimer.unref();
  }

  /** Takes the frame whose FS ended the data received so far, without its CR. */
  private takeWithoutCr(conn: MllpConnection): void {
    if (conn.crTimer) clearTimeout(conn.crTimer);
    conn.crTimer = undefined;
    const message = conn.decoder.flushMissingCr();
    if (!message || conn.socket.destroyed) return;
    conn.frameStartedAt = undefined;
    if (conn.frameTimer) clearTimeout(conn.frameTimer);
    conn.frameTimer = undefined;
    conn.queue.push(message);
    this.noteMissingCr(conn, message);
    this.budget.account(conn);
    void this.pump(conn);
  }

  /** Closes the connection idle longest to make room; false when every connection is busy. */
  /**
   * False (the socket refused) when its address already holds `maxPerClient` of `held` (open
   * connections, or TCP sockets including TLS handshakes) and none of its connections is idle.
   */
  private admitFromAddress(
    socket: net.Socket,
    held: ReadonlyArray<net.Socket | MllpConnection>,
  ): boolean {
    const address = socket.remoteAddress ?? 'unknown';
    const fromAddress = held.filter((h) => h.remoteAddress === address).length;
    if (fromAddress < this.maxPerClient) return true;
    const own = [...this.connections.values()].filter((c) => c.remoteAddress === address);
    if (this.evictIdlest(own)) return true;
    this.emit({
      type: 'connection-refused',
      remoteAddress: address,
      reason: `all ${this.maxPerClient} connections of this address are busy (MLLP_MAX_CONNECTIONS_PER_CLIENT)`,
    });
    socket.destroy();
    return false;
  }

  /** Closes the idlest of `among` (every connection by default); false when none is idle. */
  private evictIdlest(among: Iterable<MllpConnection> = this.connections.values()): boolean {
    let idlest: MllpConnection | undefined;
    for (const c of among) {
      if (!isIdle(c) || c.closing) continue;
      if (!idlest || c.lastActivity < idlest.lastActivity) idlest = c;
    }
    if (!idlest) return false;
    this.emit({
      type: 'connection-evicted',
      connectionId: idlest.id,
      idleMs: Date.now() - idlest.lastActivity,
    });
    idlest.closing = true;
    idlest.socket.destroy();
    // Counted as gone now (its 'close' event comes later).
    this.connections.delete(idlest.id);
    return true;
  }

  private async pump(conn: MllpConnection): Promise<void> {
    if (conn.busy) return;
    conn.busy = true;
    try {
      while (conn.queue.length > 0 && !conn.socket.destroyed) {
        const message = conn.queue.shift() as Buffer;
        conn.handling = message.length;
        if (conn.paused && !conn.closing && conn.queue.length < 2) {
          conn.paused = false;
          if (!conn.budgetPaused) conn.socket.resume();
        }
        const reply = await this.handle(conn, message);
        if (reply.length > 0 && !conn.socket.destroyed) {
          await new Promise<void>((resolve) => {
            conn.socket.write(encodeMllpFrame(reply), () => resolve());
          });
        }
        conn.lastActivity = Date.now();
        conn.handling = 0;
        this.budget.account(conn);
      }
    } finally {
      conn.busy = false;
    }
    endIfIdle(conn);
  }

  private async handle(conn: MllpConnection, message: Buffer): Promise<Buffer> {
    try {
      return await this.options.handler(message, {
        remoteAddress: conn.remoteAddress,
        connectionId: conn.id,
        ...(conn.missingCr.has(message) ? { missingCr: true } : {}),
      });
    } catch (error) {
      this.emit({ type: 'handler-error', connectionId: conn.id, error });
      return this.fallbackReject(message);
    }
  }

  /** AR with ERR 207 (table 0357 "Application internal error"); nothing if unparseable. */
  private fallbackReject(message: Buffer): Buffer {
    try {
      const inbound = parseHl7(message);
      return buildAck({
        inbound,
        outcome: 'reject',
        errors: [{ code: 207, severity: 'E', message: 'Application internal error' }],
        controlId: (this.options.controlIdGenerator ?? newAckControlId)(),
        now: (this.options.clock ?? (() => new Date()))(),
      }).bytes;
    } catch {
      return Buffer.alloc(0);
    }
  }

  private checkDrained(): void {
    if (this.closing && this.connections.size === 0) this.drained?.();
  }

  private emit(event: MllpServerEvent): void {
    try {
      this.options.onEvent?.(event);
    } catch {
      // A failing observer must not take the listener down.
    }
  }
}
