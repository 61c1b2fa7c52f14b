import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { encodeMllpFrame, MllpServer, type MllpServerEvent } from '../../src/hl7';

const MSG = (i: number) =>
  `MSH|^~\\&|RIS|HOSP|ADAPTER|HOSP|20240318144217||ORM^O01|MSG-${i}|P|2.3.1\rPID|||PAT-1^^^HOSP^MR||DOE^JANE\r`;

function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => resolve(s));
    s.on('error', reject);
  });
}

describe('MLLP server against hostile peers (real sockets)', () => {
  let server: MllpServer;
  let port: number;
  const events: MllpServerEvent[] = [];
  let inFlight = 0;
  let maxInFlight = 0;

  beforeAll(async () => {
    server = new MllpServer({
      port: 0,
      frameTimeoutMs: 300,
      maxQueuedMessages: 4,
      onEvent: (e) => events.push(e),
      handler: async (message) => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        await sleep(2);
        inFlight--;
        return Buffer.from(
          `MSH|^~\\&|A|B|C|D|||ACK|X|P|2.3.1\rMSA|AA|${/MSG-\d+/.exec(message.toString())![0]}\r`,
        );
      },
    });
    port = (await server.listen()).port;
  });
  afterAll(async () => {
    await server.close(1000);
  });

  it('closes a slow-loris connection whose frame never ends, and keeps serving others', async () => {
    const loris = await connect(port);
    const closed = new Promise((r) => loris.on('close', r));
    loris.write(Buffer.from([0x0b]));
    const drip = setInterval(() => {
      if (!loris.destroyed) loris.write('M');
    }, 50);
    const started = Date.now();
    await closed;
    clearInterval(drip);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(events.some((e) => e.type === 'frame-timeout')).toBe(true);

    // an honest peer is still answered
    const ok = await connect(port);
    const reply = new Promise<string>((r) => ok.once('data', (c) => r(c.toString())));
    ok.write(encodeMllpFrame(Buffer.from(MSG(1))));
    expect(await reply).toContain('MSA|AA|MSG-1');
    ok.destroy();
  });

  it('an idle connection between messages is not a slow loris', async () => {
    const idle = await connect(port);
    await sleep(700);
    expect(idle.destroyed).toBe(false);
    const reply = new Promise<string>((r) => idle.once('data', (c) => r(c.toString())));
    idle.write(encodeMllpFrame(Buffer.from(MSG(2))));
    expect(await reply).toContain('MSA|AA|MSG-2');
    idle.destroy();
  });

  it('a sender pipelining 300 messages without reading its ACKs is answered in order, one at a time', async () => {
    const s = await connect(port);
    s.pause(); // do not read the ACKs for now
    s.write(
      Buffer.concat(
        Array.from({ length: 300 }, (_, i) => encodeMllpFrame(Buffer.from(MSG(1000 + i)))),
      ),
    );
    await sleep(300);
    let text = '';
    s.on('data', (c: Buffer) => (text += c.toString()));
    s.resume();
    const deadline = Date.now() + 10_000;
    while ((text.match(/MSA\|AA\|/g) ?? []).length < 300 && Date.now() < deadline) await sleep(20);
    const ids = [...text.matchAll(/MSA\|AA\|MSG-(\d+)/g)].map((m) => Number(m[1]));
    expect(ids).toEqual(Array.from({ length: 300 }, (_, i) => 1000 + i));
    expect(maxInFlight).toBe(1); // one outstanding message per connection
    s.destroy();
  });

  it('stops reading from a sender that outpaces the handler: the queue stays bounded', async () => {
    const slow = new MllpServer({
      port: 0,
      maxQueuedMessages: 4,
      handler: async () => {
        await sleep(20);
        return Buffer.from('MSH|^~\\&|A|B|C|D|||ACK|X|P|2.3.1\rMSA|AA|X\r');
      },
    });
    const slowPort = (await slow.listen()).port;
    try {
      const big = 'x'.repeat(64 * 1024);
      const s = await connect(slowPort);
      s.on('data', () => undefined);
      // 100 messages of 64 KiB (6.4 MB): far more than socket buffers hold
      for (let i = 0; i < 100; i++)
        s.write(encodeMllpFrame(Buffer.from(`${MSG(i)}NTE|1||${big}\r`)));
      let maxQueued = 0;
      for (let i = 0; i < 40; i++) {
        maxQueued = Math.max(maxQueued, slow.queuedMessages);
        await sleep(10);
      }
      expect(maxQueued).toBeGreaterThan(0);
      // the reading pauses at 4 queued; one more chunk may complete a message or two
      expect(maxQueued).toBeLessThanOrEqual(6);
      s.destroy();
    } finally {
      await slow.close(500);
    }
  });

  it('closes a connection whose peer never reads its answers after the idle timeout, so its slot serves others', async () => {
    // The answer waited for the socket to take it: a peer that sends and never reads (its
    // receive window full) held its connection busy for ever, never idle, never evicted;
    // with MLLP_MAX_CONNECTIONS of them no sender was served again.
    const events: MllpServerEvent[] = [];
    const stalled = new MllpServer({
      port: 0,
      maxConnections: 1,
      idleTimeoutMs: 300,
      onEvent: (e) => events.push(e),
      // answers far larger than socket buffers hold, as a stand-in for many unread ACKs
      handler: async (message) =>
        Buffer.from(
          `MSH|^~\\&|A|B|C|D|||ACK|X|P|2.3.1\rMSA|AA|${/MSG-\d+/.exec(message.toString())![0]}\rZAK|${'y'.repeat(4 * 1024 * 1024)}\r`,
        ),
    });
    const stalledPort = (await stalled.listen()).port;
    try {
      const deaf = await connect(stalledPort);
      deaf.on('error', () => undefined);
      deaf.pause(); // never reads
      for (let i = 0; i < 12; i++) deaf.write(encodeMllpFrame(Buffer.from(MSG(2000 + i))));
      const deadline = Date.now() + 15_000;
      while (stalled.connectionCount > 0 && Date.now() < deadline) await sleep(50);
      expect(stalled.connectionCount).toBe(0);
      expect(events.some((e) => e.type === 'write-stalled')).toBe(true);
      // the slot serves the next sender
      const ok = await connect(stalledPort);
      let text = '';
      ok.on('data', (c: Buffer) => (text += c.toString('latin1')));
      ok.write(encodeMllpFrame(Buffer.from(MSG(3000))));
      const until = Date.now() + 10_000;
      while (!text.includes('MSA|AA|MSG-3000') && Date.now() < until) await sleep(20);
      expect(text).toContain('MSA|AA|MSG-3000');
      ok.destroy();
      deaf.destroy();
    } finally {
      await stalled.close(500);
    }
  });
});
