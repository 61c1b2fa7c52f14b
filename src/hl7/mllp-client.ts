import net from 'node:net';
import tls from 'node:tls';

import { Hl7Error } from './hl7.error';
import {
  DEFAULT_MAX_MLLP_MESSAGE_BYTES,
  encodeMllpFrame,
  MISSING_CR_WAIT_MS,
  MllpDecoder,
} from './mllp-framing';

export interface MllpClientOptions {
  host: string;
  port: number;
  /** When set, connect with node:tls using these options (ca, cert, key, servername...). */
  tls?: tls.ConnectionOptions;
  connectTimeoutMs?: number;
  /** How long to wait for the framed reply to one message. */
  responseTimeoutMs?: number;
  maxMessageBytes?: number;
}

interface Pending {
  resolve: (reply: Buffer) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * MLLP sender over one kept-alive connection (reconnected lazily when closed). Messages are sent
 * one at a time: send() resolves with the next framed reply, and concurrent calls are queued, so
 * a reply is always matched to the message it answers. On a reply timeout the connection is
 * dropped, because a late reply would otherwise be taken as the answer to the next message.
 */
export class MllpClient {
  private socket?: net.Socket;
  private connecting?: Promise<net.Socket>;
  private decoder?: MllpDecoder;
  private pending?: Pending;
  private chain: Promise<unknown> = Promise.resolve();
  private readonly early: Buffer[] = [];
  /** Waits for the CR after an FS that ended the data so far (a peer that leaves it out). */
  private crTimer?: NodeJS.Timeout;

  constructor(private readonly options: MllpClientOptions) {}

  /** Sends one message payload (unframed) and resolves with the reply payload. */
  send(payload: Buffer | string): Promise<Buffer> {
    const bytes = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
    const run = this.chain.then(() => this.exchange(bytes));
    this.chain = run.catch(() => undefined);
    return run;
  }

  async close(): Promise<void> {
    const socket = this.socket;
    this.socket = undefined;
    if (!socket || socket.destroyed) return;
    await new Promise<void>((resolve) => {
      socket.once('close', () => resolve());
      socket.end(() => socket.destroy());
    });
  }

  private async exchange(payload: Buffer): Promise<Buffer> {
    const socket = await this.connect();
    const early = this.early.shift();
    if (early) {
      // A reply nobody asked for (the peer wrote before our message): protocol out of step.
      this.drop();
      throw new Hl7Error('MLLP_NOT_CONNECTED', 'Unsolicited data from MLLP peer; reconnect');
    }
    return new Promise<Buffer>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending = undefined;
        this.drop();
        reject(new Hl7Error('MLLP_TIMEOUT', `No MLLP reply within ${this.responseTimeout} ms`));
      }, this.responseTimeout);
      this.pending = { resolve, reject, timer };
      socket.write(encodeMllpFrame(payload));
    });
  }

  private get responseTimeout(): number {
    return this.options.responseTimeoutMs ?? 30_000;
  }

  private connect(): Promise<net.Socket> {
    if (this.socket && !this.socket.destroyed) return Promise.resolve(this.socket);
    if (this.connecting) return this.connecting;
    this.connecting = new Promise<net.Socket>((resolve, reject) => {
      const { host, port } = this.options;
      const socket = this.options.tls
        ? tls.connect({ host, port, ...this.options.tls })
        : net.connect({ host, port });
      const readyEvent = this.options.tls ? 'secureConnect' : 'connect';
      const timer = setTimeout(() => {
        socket.destroy(new Hl7Error('MLLP_TIMEOUT', `MLLP connect to ${host}:${port} timed out`));
      }, this.options.connectTimeoutMs ?? 10_000);
      const decoder = new MllpDecoder({
        maxMessageBytes: this.options.maxMessageBytes ?? DEFAULT_MAX_MLLP_MESSAGE_BYTES,
      });
      socket.once(readyEvent, () => {
        clearTimeout(timer);
        socket.setNoDelay(true);
        socket.setKeepAlive(true, 60_000);
        this.socket = socket;
        this.decoder = decoder;
        this.early.length = 0;
        this.connecting = undefined;
        resolve(socket);
      });
      socket.on('data', (chunk: Buffer) => this.onData(socket, chunk));
      socket.on('error', (error) => {
        clearTimeout(timer);
        if (this.connecting && this.socket !== socket) {
          this.connecting = undefined;
          reject(error);
        }
        this.fail(socket, error);
      });
      socket.on('close', () => {
        clearTimeout(timer);
        this.fail(socket, new Hl7Error('MLLP_CONNECTION_CLOSED', 'MLLP connection closed'));
      });
    });
    return this.connecting;
  }

  private onData(socket: net.Socket, chunk: Buffer): void {
    if (socket !== this.socket || !this.decoder) return;
    const result = this.decoder.push(chunk);
    if (result.errors.length > 0) {
      this.fail(socket, result.errors[0]);
      socket.destroy();
      return;
    }
    for (const message of result.messages) this.take(message);
    // An ACK whose frame ends with FS alone (a RIS that leaves the CR out, as the listener
    // tolerates from senders): nothing more comes until we write, so after a moment the frame
    // is taken as it is. Without this the ACK was never read, the ORU timed out, was sent again
    // on every attempt (each accepted by the RIS) and ended a dead letter.
    clearTimeout(this.crTimer);
    this.crTimer = undefined;
    if (this.decoder.awaitingCr) {
      const decoder = this.decoder;
      this.crTimer = setTimeout(() => {
        this.crTimer = undefined;
        if (socket !== this.socket || decoder !== this.decoder) return;
        const message = decoder.flushMissingCr();
        if (message) this.take(message);
      }, MISSING_CR_WAIT_MS);
      this.crTimer.unref();
    }
  }

  private take(message: Buffer): void {
    const pending = this.pending;
    if (pending) {
      this.pending = undefined;
      clearTimeout(pending.timer);
      pending.resolve(message);
    } else {
      this.early.push(message);
    }
  }

  private fail(socket: net.Socket, error: Error): void {
    if (socket !== this.socket) return;
    this.socket = undefined;
    const pending = this.pending;
    if (pending) {
      this.pending = undefined;
      clearTimeout(pending.timer);
      pending.reject(error);
    }
  }

  private drop(): void {
    const socket = this.socket;
    this.socket = undefined;
    socket?.destroy();
  }
}
