import net, { type AddressInfo } from 'node:net';
import { MllpClient } from '../../src/hl7/mllp-client';
import { encodeMllpFrame, MllpDecoder } from '../../src/hl7/mllp-framing';

/**
 * Our MLLP sender (the ORU^R01 / ORM^O01 client to the RIS) against RIS listeners that keep
 * their own connection habits, on real loopback sockets.
 */
describe('MllpClient against RIS connection habits', () => {
  const servers: net.Server[] = [];
  afterAll(() => Promise.all(servers.map((s) => new Promise((r) => s.close(r)))));

  /** A RIS that ACKs each message (MSA-2 = its MSH-10) and then closes the connection. */
  async function oneMessagePerConnectionRis(): Promise<{ port: number; received: string[] }> {
    const received: string[] = [];
    const server = net.createServer((socket) => {
      const decoder = new MllpDecoder();
      socket.on('data', (chunk) => {
        for (const m of decoder.push(chunk).messages) {
          const id = m.toString('latin1').split('\r')[0]!.split('|')[9]!;
          received.push(id);
          if (socket.writableEnded) continue; // a closing RIS reads no further message
          socket.end(
            encodeMllpFrame(
              Buffer.from(
                `MSH|^~\\&|RIS|HOSP|IAA|ADAPTER|20261127||ACK^R01^ACK|A${id}|P|2.5.1\rMSA|AA|${id}`,
              ),
            ),
          );
        }
      });
      socket.on('error', () => undefined);
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return { port: (server.address() as AddressInfo).port, received };
  }

  it('a RIS closing the connection after each ACK: learnt once, then every message on a fresh connection', async () => {
    const ris = await oneMessagePerConnectionRis();
    const client = new MllpClient({ host: '127.0.0.1', port: ris.port, responseTimeoutMs: 2_000 });
    try {
      // the outbox sends results of different orders back to back on one connection
      const results = await Promise.allSettled(
        [1, 2, 3, 4, 5, 6, 7, 8].map((i) =>
          client.send(`MSH|^~\\&|IAA|ADAPTER|RIS|HOSP|20261127||ORU^R01^ORU_R01|IAA${i}|P|2.5.1\r`),
        ),
      );
      const failed = results.flatMap((r, i) => (r.status === 'rejected' ? [i + 1] : []));
      // Before: every second message was written into the connection the RIS was closing
      // (IAA2, IAA4, ...), failed as "connection closed" and went back to the outbox, though
      // the RIS may have read it. Now only the message in flight when the habit is learnt does.
      expect(failed.length).toBeLessThanOrEqual(1);
      expect(results.slice(2).every((r) => r.status === 'fulfilled')).toBe(true);
    } finally {
      await client.close();
    }
  });

  /**
   * A RIS (or an engine in front of it) that, once it has answered, keeps writing frames nobody
   * asked for: the same ACK again and again, ACKs of old messages. Between two results no
   * message waits for them; before, every one was kept in memory until the next message went
   * out on the connection, however many came (10,000 here, 100 bytes each; frames of up to
   * 10 MiB the same): a buffer without bound, on an idle connection that may stay open for
   * hours. Now the connection is dropped once more come than a message may set aside
   * (MAX_IGNORED_REPLIES), and the next message opens a new one.
   */
  it('a RIS flooding frames nobody asked for between messages: the connection is dropped, the next message answered on a new one', async () => {
    const closed: number[] = [];
    let connections = 0;
    const server = net.createServer((socket) => {
      const connection = ++connections;
      const decoder = new MllpDecoder();
      socket.on('data', (chunk) => {
        for (const m of decoder.push(chunk).messages) {
          const id = m.toString('latin1').split('\r')[0]!.split('|')[9]!;
          const ack = (acked: string) =>
            encodeMllpFrame(
              Buffer.from(
                `MSH|^~\\&|RIS|HOSP|IAA|ADAPTER|20261127||ACK^R01^ACK|A${id}|P|2.5.1\rMSA|AA|${acked}`,
              ),
            );
          socket.write(ack(id));
          if (connection === 1)
            setTimeout(
              () => socket.write(Buffer.concat(Array.from({ length: 10_000 }, () => ack('IAA0')))),
              50,
            );
        }
      });
      socket.on('close', () => closed.push(connection));
      socket.on('error', () => undefined);
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as AddressInfo).port;
    const client = new MllpClient({ host: '127.0.0.1', port, responseTimeoutMs: 2_000 });
    const message = (n: number) =>
      `MSH|^~\\&|IAA|ADAPTER|RIS|HOSP|20261127||ORU^R01^ORU_R01|IAA${n}|P|2.5.1\r`;
    const answers = (n: number) => (reply: Buffer) =>
      reply.toString('latin1').includes(`MSA|AA|IAA${n}`);
    try {
      await client.send(message(1), { isAnswer: answers(1) });
      const end = Date.now() + 5_000;
      while (closed.length === 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
      // before: still open, the 10,000 frames held by the client
      expect(closed).toEqual([1]);
      const reply = await client.send(message(2), { isAnswer: answers(2) });
      expect(reply.toString('latin1')).toContain('MSA|AA|IAA2');
      expect(connections).toBe(2);
    } finally {
      await client.close();
    }
  });
});
