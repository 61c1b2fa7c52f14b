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

/** How one send() tells its reply from replies to other messages. */
export interface MllpSendOptions {
  /**
   * Whether a reply answers this message (its MSA-2 names our MSH-10). A reply that does not is
   * set aside and the wait goes on, within the same timeout: a RIS in enhanced mode sends the
   * commit ACK and then the application ACK (HL7 v2.5.1 2.9.3), an interface engine may repeat
   * an ACK, so a second reply about an earlier message comes when the next one is in flight.
   * Without it, the next reply is the answer.
   */
  isAnswer?: (reply: Buffer) => boolean;
  /** Told of each reply set aside (for the delivery's record). */
  onIgnored?: (reply: Buffer) => void;
}

/** Replies about other messages set aside while waiting for one answer; more is a peer out of step. */
export const MAX_IGNORED_REPLIES = 16;

interface Pending {
  resolve: (reply: Buffer) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
  options: MllpSendOptions;
  ignored: number;
}

/**
 * MLLP sender over one kept-alive connection (reconnected lazily when closed). Messages are sent
 * one at a time: send() resolves with the next framed reply (or, with `isAnswer`, the next one
 * that answers it), and concurrent calls are queued, so a reply is always matched to the message
 * it answers. On a reply timeout the connection is
 * dropped, because a late reply would otherwise be taken as the answer to the next message.
 */
/** A peer ending its connection this soon after a reply closes after each reply. */
const CLOSE_AFTER_REPLY_MS = 1_000;

export class MllpClient {
  private socket?: net.Socket;
  private connecting?: Promise<net.Socket>;
  private decoder?: MllpDecoder;
  private pending?: Pending;
  private chain: Promise<unknown> = Promise.resolve();
  private readonly early: Buffer[] = [];
  /** Waits for the CR after an FS that ended the data so far (a peer that leaves it out). */
  private crTimer?: NodeJS.Timeout;
  /** When the last reply came (to tell a peer that closes after each reply). */
  private lastReplyAt = 0;
  /**
   * The peer closes its connection after each reply (a RIS taking one message per connection):
   * learnt from it ending a connection just after a reply, and from then on we end ours after
   * each reply and open a fresh one for the next message.
   */
  private closesAfterReply = false;

  constructor(private readonly options: MllpClientOptions) {}

  /** Sends one message payload (unframed) and resolves with the reply payload. */
  send(payload: Buffer | string, options: MllpSendOptions = {}): Promise<Buffer> {
    const bytes = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
    const run = this.chain.then(() => this.exchange(bytes, options));
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

  private async exchange(payload: Buffer, options: MllpSendOptions): Promise<Buffer> {
    if (this.socket && !this.socket.destroyed) {
      // A kept connection: let a close the peer sent with its last reply be read first, so the
      // next message is not written into a connection the peer is closing.
      await new Promise((resolve) => setImmediate(resolve));
    }
    const socket = await this.connect();
    if (this.early.length > 0) {
      const early = this.early.splice(0);
      if (!options.isAnswer) {
        // A reply nobody asked for (the peer wrote before our message): protocol out of step.
        this.drop();
        throw new Hl7Error('MLLP_NOT_CONNECTED', 'Unsolicited data from MLLP peer; reconnect');
      }
      // Late replies about earlier messages (a second ACK): the peer has not seen this one yet,
      // and the matcher keeps them from being taken for its answer.
      for (const reply of early) options.onIgnored?.(reply);
    }
    return new Promise<Buffer>((resolve, reject) => {
      const timer = setTimeout(() => {
        const ignored = this.pending?.ignored ?? 0;
        this.pending = undefined;
        this.drop();
        reject(
          new Hl7Error(
            'MLLP_TIMEOUT',
            `No MLLP reply within ${this.responseTimeout} ms${ignored ? ` (${ignored} replies about other messages set aside)` : ''}`,
          ),
        );
      }, this.responseTimeout);
      this.pending = { resolve, reject, timer, options, ignored: 0 };
      socket.write(encodeMllpFrame(payload));
    });
  }

  private get responseTimeout(): number {
    return this.options.responseTimeoutMs ?? 30_000;
  }

  private connect(): Promise<net.Socket> {
    // a connection whose peer has ended its side takes no new message
    if (this.socket && !this.socket.destroyed && !this.socket.readableEnded)
      return Promise.resolve(this.socket);
    if (this.socket) this.retire();
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
      socket.on('end', () => {
        // The peer closing right after a reply is a peer that takes one message per connection.
        if (socket === this.socket && Date.now() - this.lastReplyAt < CLOSE_AFTER_REPLY_MS)
          this.closesAfterReply = true;
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
    for (const message of result.messages) {
      if (socket !== this.socket) return; // dropped by take (a flood of unasked frames)
      this.take(message);
    }
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
    if (pending?.options.isAnswer && !pending.options.isAnswer(message)) {
      pending.options.onIgnored?.(message);
      if (++pending.ignored > MAX_IGNORED_REPLIES) {
        this.pending = undefined;
        clearTimeout(pending.timer);
        this.drop();
        pending.reject(
          new Hl7Error(
            'MLLP_NOT_CONNECTED',
            `More than ${MAX_IGNORED_REPLIES} replies about other messages; reconnect`,
          ),
        );
      }
      return;
    }
    if (pending) {
      this.pending = undefined;
      clearTimeout(pending.timer);
      this.lastReplyAt = Date.now();
      // a peer that closes after each reply: end this connection now, the next message opens one
      if (this.closesAfterReply) this.retire();
      pending.resolve(message);
    } else if (this.early.length >= MAX_IGNORED_REPLIES) {
      // Frames nobody asked for, more than a message may set aside: a peer out of step (an
      // engine repeating ACKs, a flood). They were all kept until the next message went out on
      // the connection, however many came; now it is dropped and the next message opens one.
      this.early.length = 0;
      this.drop();
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

  /** Leaves the connection to close gracefully; the next message opens a new one. */
  private retire(): void {
    const socket = this.socket;
    this.socket = undefined;
    socket?.end();
  }

  private drop(): void {
    const socket = this.socket;
    this.socket = undefined;
    socket?.destroy();
  }
}
