import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { parseHl7 } from '../../src/hl7/hl7-message';
import { MllpClient } from '../../src/hl7/mllp-client';
import { encodeMllpFrame, MllpDecoder } from '../../src/hl7/mllp-framing';
import { MllpHandler, MllpServer, MllpServerEvent } from '../../src/hl7/mllp-server';
import { evaluateInboundHl7 } from '../../src/mappings/hl7-inbound.evaluator';

const FIXTURE = readFileSync(path.join(__dirname, '../fixtures/hl7/orm-o01-v231-ihe-swf-zds.hl7'));

/** The fixture with its own MSH-10, so every reply can be matched to its message. */
function order(controlId: string): Buffer {
  return Buffer.from(
    FIXTURE.toString('latin1').replace('MSGID20240318144217', controlId),
    'latin1',
  );
}

let ackCounter = 0;
/** A real handler: parse, check, map, ACK (no persistence here). */
const ackHandler: MllpHandler = async (message) => {
  const result = evaluateInboundHl7({
    bytes: message,
    ackControlId: `ACK-${(ackCounter += 1)}`,
    now: new Date('2026-01-01T00:00:00Z'),
  });
  if (result.kind !== 'evaluated') throw result.error;
  return result.ack.bytes;
};

function msa(reply: Buffer): { code?: string; controlId?: string } {
  const m = parseHl7(reply);
  return { code: m.get('MSA-1'), controlId: m.get('MSA-2') };
}

/** A raw loopback socket that collects decoded reply frames. */
async function rawConnection(port: number) {
  const socket = net.connect({ host: '127.0.0.1', port });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('error', reject);
  });
  const decoder = new MllpDecoder();
  const replies: Buffer[] = [];
  const waiters: (() => void)[] = [];
  socket.on('data', (chunk: Buffer) => {
    replies.push(...decoder.push(chunk).messages);
    waiters.splice(0).forEach((w) => w());
  });
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return {
    socket,
    replies,
    closed,
    async waitFor(count: number): Promise<Buffer[]> {
      while (replies.length < count) await new Promise<void>((r) => waiters.push(r));
      return replies.slice(0, count);
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('MllpServer and MllpClient over loopback', () => {
  let server: MllpServer;
  let port: number;
  let events: MllpServerEvent[];
  let handler: MllpHandler;

  beforeEach(async () => {
    events = [];
    handler = ackHandler;
    server = new MllpServer({
      port: 0,
      handler: (message, meta) => handler(message, meta),
      maxMessageBytes: 64 * 1024,
      onEvent: (e) => events.push(e),
    });
    ({ port } = await server.listen());
  });

  afterEach(async () => {
    await server.close(2000);
  });

  it('binds to loopback by default', async () => {
    const other = new MllpServer({ port: 0, handler: ackHandler });
    const address = await other.listen();
    expect(address.address).toBe('127.0.0.1');
    await other.close();
  });

  it('answers a frame split into many small TCP writes', async () => {
    const conn = await rawConnection(port);
    const frame = encodeMllpFrame(order('SPLIT-1'));
    for (let i = 0; i < frame.length; i += 37) {
      conn.socket.write(frame.subarray(i, i + 37));
      await sleep(1);
    }
    const [reply] = await conn.waitFor(1);
    expect(msa(reply)).toEqual({ code: 'AA', controlId: 'SPLIT-1' });
    conn.socket.destroy();
  });

  it('handles pipelined frames on one connection exactly once each, one at a time, in order', async () => {
    const seen: string[] = [];
    let running = 0;
    let maxRunning = 0;
    handler = async (message, meta) => {
      running += 1;
      maxRunning = Math.max(maxRunning, running);
      seen.push(`${parseHl7(message).controlId}@${meta.connectionId}`);
      await sleep(2);
      running -= 1;
      return ackHandler(message, meta);
    };
    const conn = await rawConnection(port);
    const ids = Array.from({ length: 25 }, (_, i) => `PIPE-${i}`);
    conn.socket.write(Buffer.concat(ids.map((id) => encodeMllpFrame(order(id)))));
    const replies = await conn.waitFor(ids.length);
    expect(replies.map((r) => msa(r).controlId)).toEqual(ids);
    expect(seen.map((s) => s.split('@')[0])).toEqual(ids);
    expect(new Set(seen.map((s) => s.split('@')[1])).size).toBe(1);
    expect(maxRunning).toBe(1);
    await sleep(20);
    expect(conn.replies).toHaveLength(ids.length);
    conn.socket.destroy();
  });

  it('answers every message of a sender that half-closes right after writing', async () => {
    const conn = await rawConnection(port);
    conn.socket.end(
      Buffer.concat(['HC-1', 'HC-2', 'HC-3'].map((id) => encodeMllpFrame(order(id)))),
    );
    await conn.closed;
    expect(conn.replies.map((r) => msa(r).controlId)).toEqual(['HC-1', 'HC-2', 'HC-3']);
  });

  it('answers a sender that ends its last frame with FS alone and half-closes right after', async () => {
    // The frame waits 200 ms for its CR; the half-close ended the connection first, and the
    // frame taken without CR found the socket gone: never handled, never stored, no answer.
    const conn = await rawConnection(port);
    const frames = ['HC-FS-1', 'HC-FS-2'].map((id) => encodeMllpFrame(order(id)));
    const last = frames[1]!;
    conn.socket.end(Buffer.concat([frames[0]!, last.subarray(0, last.length - 1)]));
    await conn.closed;
    expect(conn.replies.map((r) => msa(r).controlId)).toEqual(['HC-FS-1', 'HC-FS-2']);
  });

  it('serves 50 concurrent kept-alive connections', async () => {
    const clients = Array.from(
      { length: 50 },
      () => new MllpClient({ host: '127.0.0.1', port, responseTimeoutMs: 10_000 }),
    );
    const results = await Promise.all(
      clients.map(async (client, c) => {
        const out: (string | undefined)[] = [];
        for (let i = 0; i < 3; i += 1)
          out.push(msa(await client.send(order(`C${c}-M${i}`))).controlId);
        return out;
      }),
    );
    results.forEach((ids, c) => expect(ids).toEqual([`C${c}-M0`, `C${c}-M1`, `C${c}-M2`]));
    const opened = events.filter((e) => e.type === 'connection-open');
    expect(opened).toHaveLength(50);
    await Promise.all(clients.map((client) => client.close()));
  });

  it('answers AR 207 when the handler throws, and keeps serving the connection', async () => {
    handler = async (message, meta) => {
      if (parseHl7(message).controlId === 'BOOM') throw new Error('database down');
      return ackHandler(message, meta);
    };
    const client = new MllpClient({ host: '127.0.0.1', port });
    const failed = parseHl7(await client.send(order('BOOM')));
    expect(failed.get('MSA-1')).toBe('AR');
    expect(failed.get('MSA-2')).toBe('BOOM');
    expect(failed.get('ERR-1.4')).toBe('207');
    // its own control ID fits the v2.3.1 MSH-10 (ST 20); a whole UUID (36) went out before
    expect(failed.controlId).toMatch(/^[0-9a-f]{20}$/);
    expect(msa(await client.send(order('AFTER-BOOM')))).toEqual({
      code: 'AA',
      controlId: 'AFTER-BOOM',
    });
    expect(events.filter((e) => e.type === 'handler-error')).toHaveLength(1);
    await client.close();
  });

  it('closes a connection that sends an oversize frame, and still serves others', async () => {
    const conn = await rawConnection(port);
    conn.socket.write(encodeMllpFrame(Buffer.alloc(100 * 1024, 'A')));
    await conn.closed;
    expect(events).toContainEqual(expect.objectContaining({ type: 'oversize-frame' }));
    const client = new MllpClient({ host: '127.0.0.1', port });
    expect(msa(await client.send(order('AFTER-BIG'))).code).toBe('AA');
    await client.close();
  });

  it('drops garbage before a frame, reports it, and answers the frame', async () => {
    const conn = await rawConnection(port);
    conn.socket.write(Buffer.concat([Buffer.from('\r\nhello\r\n'), encodeMllpFrame(order('G-1'))]));
    const [reply] = await conn.waitFor(1);
    expect(msa(reply).controlId).toBe('G-1');
    expect(events).toContainEqual(expect.objectContaining({ type: 'discarded-bytes', bytes: 9 }));
    conn.socket.destroy();
  });

  it('drains on close: the message in progress is answered before the connection ends', async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    handler = async (message, meta) => {
      await gate;
      return ackHandler(message, meta);
    };
    const conn = await rawConnection(port);
    conn.socket.write(encodeMllpFrame(order('DRAIN-1')));
    await sleep(20);
    const closing = server.close(5000);
    await sleep(20);
    release();
    await closing;
    await conn.closed;
    expect(conn.replies.map((r) => msa(r).controlId)).toEqual(['DRAIN-1']);
    // A new server for afterEach to close.
    server = new MllpServer({ port: 0, handler: ackHandler });
    await server.listen();
  });

  it('times out a reply, drops the connection and works again on the next send', async () => {
    handler = async (message, meta) => {
      if (parseHl7(message).controlId === 'SLOW') await sleep(500);
      return ackHandler(message, meta);
    };
    const client = new MllpClient({ host: '127.0.0.1', port, responseTimeoutMs: 100 });
    await expect(client.send(order('SLOW'))).rejects.toMatchObject({ code: 'MLLP_TIMEOUT' });
    expect(msa(await client.send(order('NEXT'))).controlId).toBe('NEXT');
    await client.close();
  });

  it('reports a refused connection as an error, not a crash', async () => {
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
    const freePort = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const client = new MllpClient({ host: '127.0.0.1', port: freePort, connectTimeoutMs: 1000 });
    await expect(client.send(order('X'))).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    // The queue is not wedged by the failure: the next send tries again.
    await expect(client.send(order('Y'))).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });
});

describe('MLLP over TLS', () => {
  let dir: string;
  let key: Buffer;
  let cert: Buffer;

  beforeAll(() => {
    // A throw-away self-signed certificate for 127.0.0.1, made with the system openssl.
    dir = mkdtempSync(path.join(tmpdir(), 'mllp-tls-'));
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        path.join(dir, 'key.pem'),
        '-out',
        path.join(dir, 'cert.pem'),
        '-days',
        '1',
        '-subj',
        '/CN=127.0.0.1',
        '-addext',
        'subjectAltName=IP:127.0.0.1',
      ],
      { stdio: 'ignore' },
    );
    key = readFileSync(path.join(dir, 'key.pem'));
    cert = readFileSync(path.join(dir, 'cert.pem'));
  });

  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('exchanges a message and its ACK with a verified certificate', async () => {
    const server = new MllpServer({ port: 0, handler: ackHandler, tls: { key, cert } });
    const { port } = await server.listen();
    const client = new MllpClient({ host: '127.0.0.1', port, tls: { ca: cert } });
    try {
      expect(msa(await client.send(order('TLS-1')))).toEqual({ code: 'AA', controlId: 'TLS-1' });
      expect(msa(await client.send(order('TLS-2')))).toEqual({ code: 'AA', controlId: 'TLS-2' });
    } finally {
      await client.close();
      await server.close(2000);
    }
  });

  it('a TCP connection that never starts its TLS handshake is closed after MLLP_FRAME_TIMEOUT and counts toward MLLP_MAX_CONNECTIONS', async () => {
    // Node's TLS server waits 120 s for a handshake, and sockets in their handshake were not
    // counted: any number of silent TCP connections to the TLS port held a descriptor each.
    const server = new MllpServer({
      port: 0,
      handler: ackHandler,
      tls: { key, cert },
      frameTimeoutMs: 300,
      maxConnections: 2,
    });
    const { port } = await server.listen();
    const open = () =>
      new Promise<{ socket: net.Socket; closed: Promise<number> }>((resolve) => {
        const socket = net.connect(port, '127.0.0.1', () => {
          const started = Date.now();
          resolve({
            socket,
            closed: new Promise((r) => socket.once('close', () => r(Date.now() - started))),
          });
        });
        socket.on('error', () => undefined);
      });
    try {
      const silent = [await open(), await open()];
      const third = await open();
      // the limit is full of handshakes: the third is closed at once
      expect(await third.closed).toBeLessThan(250);
      for (const s of silent) expect(await s.closed).toBeLessThan(10_000);
    } finally {
      await server.close(2000);
    }
  });

  it('one address holding TLS handshakes takes at most maxConnectionsPerClient; a sender elsewhere still gets AA', async () => {
    // Before: 6 silent TCP connections from one address held all 6 places (handshakes are
    // counted before the per-address bound was looked at) and the real sender was refused.
    const server = new MllpServer({
      port: 0,
      handler: ackHandler,
      tls: { key, cert },
      frameTimeoutMs: 30_000,
      maxConnections: 6,
      maxConnectionsPerClient: 2,
    });
    const { port } = await server.listen();
    const flood: Array<{ socket: net.Socket; closed: boolean }> = [];
    try {
      for (let i = 0; i < 6; i += 1) {
        const entry = {
          socket: net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' }),
          closed: false,
        };
        entry.socket.on('error', () => undefined);
        entry.socket.on('close', () => (entry.closed = true));
        await new Promise((r) => entry.socket.once('connect', r).once('close', r));
        flood.push(entry);
      }
      await new Promise((r) => setTimeout(r, 200));
      expect(flood.filter((f) => !f.closed)).toHaveLength(2);
      const client = new MllpClient({ host: '127.0.0.1', port, tls: { ca: cert } });
      try {
        expect(msa(await client.send(order('TLS-PC')))).toEqual({
          code: 'AA',
          controlId: 'TLS-PC',
        });
      } finally {
        await client.close();
      }
    } finally {
      for (const f of flood) f.socket.destroy();
      await server.close(2000);
    }
  });

  it('refuses a server whose certificate the client does not trust', async () => {
    const server = new MllpServer({ port: 0, handler: ackHandler, tls: { key, cert } });
    const { port } = await server.listen();
    const client = new MllpClient({ host: '127.0.0.1', port, tls: {} });
    try {
      await expect(client.send(order('TLS-X'))).rejects.toMatchObject({
        code: 'DEPTH_ZERO_SELF_SIGNED_CERT',
      });
    } finally {
      await client.close();
      await server.close(2000);
    }
  });
});
