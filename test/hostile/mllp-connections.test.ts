import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { MllpClient } from '../../src/hl7';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { ackSummary, hl7Fixture, withControlId } from '../helpers/hl7-fixtures';

jest.setTimeout(120_000);

/**
 * Issue #15 items 3 and 7 on a running adapter over real sockets: idle connections cannot
 * lock real senders out (idle timeout; at the limit the longest-idle connection gives way),
 * and many large messages at once are read within a global byte budget instead of buffered.
 */
function ormFixture(controlId: string, padTo = 0): Buffer {
  let text = withControlId(hl7Fixture('orm-o01-v231-ihe-swf-zds'), controlId)
    .toString('latin1')
    .replace(/PLC-100234/g, `PLC-${controlId}`)
    .replace(/ACC-20240318-0042/g, `ACC-${controlId}`);
  if (padTo > text.length) {
    // A long report-style note, as some RIS attach to the order.
    // (about 1 KB a segment: well within HL7_MAX_SEGMENTS)
    const line = `NTE|1||${'Clinical history and prior imaging findings, dictated. '.repeat(18)}`;
    const count = Math.ceil((padTo - text.length) / (line.length + 1));
    text = `${text.replace(/[\r\n]+$/, '')}\r${Array.from({ length: count }, () => line).join('\r')}\r`;
  }
  return Buffer.from(text, 'latin1');
}

function openSocket(port: number): Promise<{ socket: net.Socket; closed: Promise<void> }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const closed = new Promise<void>((r) => socket.once('close', () => r()));
    socket.on('error', () => undefined);
    socket.once('connect', () => resolve({ socket, closed }));
    socket.once('error', reject);
  });
}

async function sendOne(adapter: TestAdapter, message: Buffer) {
  const client = new MllpClient({
    host: '127.0.0.1',
    port: adapter.mllpPort,
    responseTimeoutMs: 60_000,
  });
  try {
    return ackSummary(await client.send(message));
  } finally {
    await client.close();
  }
}

describe('hostile MLLP: idle sockets never lock out a real sender', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter({
      JOBS_ENABLED: 'false',
      MLLP_MAX_CONNECTIONS: '20',
      MLLP_IDLE_TIMEOUT_SECONDS: '3',
    });
  });
  afterAll(async () => adapter?.close());

  it('with the listener full of silent sockets, a sender is still served (AA) and the idlest socket gives way', async () => {
    const idle = [];
    for (let i = 0; i < 20; i += 1) {
      idle.push(await openSocket(adapter.mllpPort));
      await sleep(5); // distinct ages
    }
    const ack = await sendOne(adapter, ormFixture('FULL-1'));
    expect(ack).toMatchObject({ code: 'AA', controlIdEchoed: 'FULL-1' });
    // The oldest silent socket was closed to make room; the newest is still open.
    await Promise.race([idle[0]!.closed, sleep(2_000)]);
    expect(idle[0]!.socket.destroyed || idle[0]!.socket.readableEnded).toBe(true);
    expect(idle[19]!.socket.destroyed).toBe(false);
    for (const s of idle) s.socket.destroy();
  });

  it('a connection silent for MLLP_IDLE_TIMEOUT_SECONDS is closed; one in the middle of its conversation is not', async () => {
    await sleep(500); // the previous test's sockets are gone
    const silent = await openSocket(adapter.mllpPort);
    const started = Date.now();
    await Promise.race([silent.closed, sleep(10_000)]);
    const waited = Date.now() - started;
    expect(silent.socket.destroyed).toBe(true);
    expect(waited).toBeGreaterThanOrEqual(2_500);
    expect(waited).toBeLessThan(9_000);

    // A sender that sends, waits less than the timeout, sends again: served both times.
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      expect(ackSummary(await client.send(ormFixture('KEEP-1')))).toMatchObject({ code: 'AA' });
      await sleep(1_500);
      expect(ackSummary(await client.send(ormFixture('KEEP-2')))).toMatchObject({ code: 'AA' });
    } finally {
      await client.close();
    }
  });
});

describe('hostile MLLP: a global byte budget instead of unbounded buffering', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter({
      JOBS_ENABLED: 'false',
      // Room for about two of the messages below at once.
      MLLP_MAX_INFLIGHT_BYTES: String(3 * 1024 * 1024),
    });
  });
  afterAll(async () => adapter?.close());

  it('12 parallel 1.5 MB orders over 12 connections: every one answered AA, none lost to the budget', async () => {
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => sendOne(adapter, ormFixture(`BIG-${i}`, 1_500_000))),
    );
    expect(results.map((r) => r.code)).toEqual(Array.from({ length: 12 }, () => 'AA'));
    expect(new Set(results.map((r) => r.controlIdEchoed)).size).toBe(12);
  });
});

describe('hostile MLLP: one address cannot take every connection (MLLP_MAX_CONNECTIONS_PER_CLIENT)', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter({
      JOBS_ENABLED: 'false',
      MLLP_MAX_CONNECTIONS: '20',
      MLLP_MAX_CONNECTIONS_PER_CLIENT: '5',
    });
  });
  afterAll(async () => adapter?.close());

  it('20 connections from one address, each with a frame under way: 5 held, and a sender elsewhere is served (AA)', async () => {
    // Before: all 20 held (a frame under way is never idle) and the real sender was refused,
    // again after every frame timeout since the flooder simply reconnects.
    const flood: Array<{ socket: net.Socket; closed: boolean }> = [];
    for (let i = 0; i < 20; i += 1) {
      const entry = {
        socket: net.connect({
          port: adapter.mllpPort,
          host: '127.0.0.1',
          localAddress: '127.0.0.2',
        }),
        closed: false,
      };
      entry.socket.on('error', () => undefined);
      entry.socket.on('close', () => (entry.closed = true));
      await new Promise((r) => entry.socket.once('connect', r).once('close', r));
      if (!entry.closed) entry.socket.write('\x0bMSH|^~\\&|FLOOD|');
      flood.push(entry);
    }
    await sleep(300);
    try {
      expect(flood.filter((f) => !f.closed)).toHaveLength(5);
      const ack = await sendOne(adapter, ormFixture('PERCLIENT-1'));
      expect(ack).toMatchObject({ code: 'AA', controlIdEchoed: 'PERCLIENT-1' });
    } finally {
      for (const f of flood) f.socket.destroy();
    }
  });
});
