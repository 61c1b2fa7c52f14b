import net from 'node:net';
import { once } from 'node:events';
import { MllpClient } from '../../src/hl7';
import { waitFor } from '../e2e/e2e-support';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { hl7Fixture } from '../helpers/hl7-fixtures';

/**
 * Issue #20 item 5: an HL7 batch (FHS/BHS … BTS/FTS, v2.5.1 §2.10.3) is processed, not
 * answered "not an HL7 v2 message": each message inside is stored and acknowledged as if it
 * came alone, and the answer is one batch acknowledgment holding each ACK.
 */
/**
 * The two-message FHS/BHS batch fixture with its message control IDs, placer and accession
 * numbers renumbered to `first` and `second` (each case its own orders: BATCH-MSG-n, PLC-Bn,
 * ACC-Bn).
 */
function twoOrmBatch(first: number, second: number): string {
  return hl7Fixture('batches/batch-fhs-bhs-v231-two-orm')
    .toString('latin1')
    .replace(/BATCH-MSG-1/g, `BATCH-MSG-${first}`)
    .replace(/BATCH-MSG-2/g, `BATCH-MSG-${second}`)
    .replace(/PLC-B1/g, `PLC-B${first}`)
    .replace(/PLC-B2/g, `PLC-B${second}`)
    .replace(/ACC-B1/g, `ACC-B${first}`)
    .replace(/ACC-B2/g, `ACC-B${second}`);
}

describe('HL7 batches over MLLP', () => {
  let adapter: TestAdapter;
  let client: MllpClient;
  beforeAll(async () => {
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
    client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 20_000,
    });
  });
  afterAll(async () => {
    await client?.close();
    await adapter?.close();
  });

  const segments = (reply: Buffer) => reply.toString('latin1').split('\r').filter(Boolean);

  it('answers a file batch of two orders with a batch ACK: FHS/BHS naming the sender’s ids, two AA, BTS 2, FTS 1', async () => {
    const reply = segments(await client.send(hl7Fixture('batches/batch-fhs-bhs-v231-two-orm')));
    expect(reply[0]).toMatch(/^FHS\|\^~\\&\|IMAGING-AI-ADAPTER\|/);
    expect(reply[0]!.split('|')[11]).toBe('FILE-20240318-01'); // FHS-12 (field 12 = index 11)
    expect(reply[1]).toMatch(/^BHS\|/);
    expect(reply[1]!.split('|')[11]).toBe('BATCH-20240318-07');
    expect(reply.filter((s) => s.startsWith('MSA|'))).toEqual([
      'MSA|AA|BATCH-MSG-1',
      'MSA|AA|BATCH-MSG-2',
    ]);
    expect(reply.slice(-2)).toEqual(['BTS|2', 'FTS|1']);
    const rows = await adapter.dataSource.query(
      `SELECT placer_order_number FROM orders ORDER BY placer_order_number`,
    );
    expect(rows.map((r: { placer_order_number: string }) => r.placer_order_number)).toEqual([
      'PLC-B1',
      'PLC-B2',
    ]);
  });

  it('a resent batch gets the original answers and creates nothing twice', async () => {
    const reply = segments(await client.send(hl7Fixture('batches/batch-fhs-bhs-v231-two-orm')));
    expect(reply.filter((s) => s.startsWith('MSA|'))).toEqual([
      'MSA|AA|BATCH-MSG-1',
      'MSA|AA|BATCH-MSG-2',
    ]);
    const [count] = await adapter.dataSource.query(`SELECT count(*)::int AS n FROM orders`);
    expect(count.n).toBe(2);
  });

  it('a bad message inside is answered on its own (AE); the others still go through', async () => {
    const text = twoOrmBatch(3, 4).replace(/ACC-B4/g, '*');
    const reply = segments(await client.send(Buffer.from(text, 'latin1')));
    expect(reply.filter((s) => s.startsWith('MSA|')).map((s) => s.slice(0, 7))).toEqual([
      'MSA|AA|',
      'MSA|AE|',
    ]);
    expect(reply.at(-2)).toBe('BTS|2');
  });

  it('echoes the sender’s batch and file control ids whole in BHS-12/FHS-12: every component, escapes kept, rewritten for our delimiters', async () => {
    // A RIS that numbers its batches `<run>^<day>` and escapes a separator in the run name;
    // and one with its own encoding characters (`#` component, `$` escape). Before, BHS-12
    // carried only the first component (`NIGHT\T\RUN`) and FHS-12 `F-20240318`.
    const text = twoOrmBatch(7, 8)
      .replace('FILE-20240318-01', 'F-20240318^RIS&1.2.3^ISO')
      .replace('BATCH-20240318-07', 'NIGHT\\T\\RUN^20240318-07');
    const reply = segments(await client.send(Buffer.from(text, 'latin1')));
    expect(reply[0]!.split('|')[11]).toBe('F-20240318^RIS&1.2.3^ISO');
    expect(reply[1]!.split('|')[11]).toBe('NIGHT\\T\\RUN^20240318-07');
    expect(reply.filter((s) => s.startsWith('MSA|'))).toEqual([
      'MSA|AA|BATCH-MSG-7',
      'MSA|AA|BATCH-MSG-8',
    ]);

    const custom = twoOrmBatch(9, 10)
      .replace('BHS|^~\\&|', () => 'BHS|#~$&|')
      .replace('BATCH-20240318-07', () => 'RUN^7$S$A$E$B#20240318');
    const customReply = segments(await client.send(Buffer.from(custom, 'latin1')));
    // `^` is text in the sender's BHS (its component separator is `#`), escaped for ours; its
    // escapes of `#` and `$` are plain text for ours; its `#` is our `^`
    expect(customReply[1]!.split('|')[11]).toBe('RUN\\S\\7#A$B^20240318');
  });

  it('writes back no BHS-11 or BHS-3 longer than its type holds (ST 199, HD 227): the messages are still answered', async () => {
    // Before: a 5,000-character BHS-11 came back whole in BHS-12, and so did the HD in BHS-5.
    const text = twoOrmBatch(31, 32)
      .replace('BATCH-20240318-07', 'B'.repeat(5000))
      .replace(/^BHS\|\^~\\&\|RADIS1\|/m, () => `BHS|^~\\&|${'R'.repeat(300)}|`);
    const reply = segments(await client.send(Buffer.from(text, 'latin1')));
    const bhs = reply.find((s) => s.startsWith('BHS|'))!.split('|');
    expect([bhs[4], bhs[11]]).toEqual(['', undefined]);
    expect(reply.join('\r').length).toBeLessThan(2000);
    expect(reply.filter((s) => s.startsWith('MSA|'))).toEqual([
      'MSA|AA|BATCH-MSG-31',
      'MSA|AA|BATCH-MSG-32',
    ]);
  });

  it('names the sender in BHS-5/BHS-6 and FHS-5/FHS-6 by its whole HD (namespace, universal ID, type; no fourth component)', async () => {
    // A RIS that names itself by OID in its envelope. Before, the answer's BHS-5 was `RADIS1`
    // and BHS-6 `IHEDEMO` (first component only), an answer the sender's engine, routing on
    // the OID, did not recognise as its own.
    const text = twoOrmBatch(11, 12).replace(
      /^(FHS|BHS)\|\^~\\&\|RADIS1\|IHEDEMO\|/gm,
      (_m, id: string) => `${id}|^~\\&|RADIS1^1.2.276.0.1^ISO^X|IHEDEMO&1.2.276.0.2&ISO|`,
    );
    const reply = segments(await client.send(Buffer.from(text, 'latin1')));
    for (const header of [reply[0]!, reply[1]!]) {
      const fields = header.split('|');
      expect([fields[4], fields[5]]).toEqual(['RADIS1^1.2.276.0.1^ISO', 'IHEDEMO&1.2.276.0.2&ISO']);
    }
    expect(reply.filter((s) => s.startsWith('MSA|')).map((s) => s.slice(0, 7))).toEqual([
      'MSA|AA|',
      'MSA|AA|',
    ]);
  });

  it('a message of the batch whose MSH-15/16 say NE|NE (no acknowledgment) is stored and not acknowledged in the batch ACK', async () => {
    // Table 0155 NE is "never", in a batch as alone. Before, its ACK was in the batch
    // acknowledgment all the same (and counted in BTS-1).
    const text = twoOrmBatch(13, 14).replace(
      '|BATCH-MSG-13|P|2.3.1',
      '|BATCH-MSG-13|P|2.3.1|||NE|NE',
    );
    const reply = segments(await client.send(Buffer.from(text, 'latin1')));
    expect(reply.filter((s) => s.startsWith('MSA|'))).toEqual(['MSA|AA|BATCH-MSG-14']);
    expect(reply.slice(-2)).toEqual(['BTS|1', 'FTS|1']);
    const [stored] = await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM orders WHERE placer_order_number IN ('PLC-B13', 'PLC-B14')`,
    );
    expect(stored.n).toBe(2);
  });

  it('a batch whose every message says NE|NE gets no answer at all (no empty envelope); the connection goes on', async () => {
    // Table 0155 NE is "never", and a batch acknowledgment holding no ACK says "all accepted"
    // (v2.5.1 §2.10.3: a batch of zero acknowledgments implicitly acknowledges the whole batch),
    // an answer none of its messages asked for. Before, FHS/BHS/BTS|0/FTS was written to a
    // one-way feed, and a sender that then sent a message on the same connection read that
    // envelope as its answer.
    const text = twoOrmBatch(15, 16).replace(/\|P\|2\.3\.1/g, '|P|2.3.1|||NE|NE');
    const single = hl7Fixture('batches/batch-fhs-bhs-v231-two-orm')
      .toString('latin1')
      .split(/\r|\n/)
      .filter((l) => l !== '' && !/^(FHS|BHS|BTS|FTS)/.test(l))
      .join('\r')
      .split(/(?=MSH\|)/)[0]!
      .replace(/BATCH-MSG-1/g, 'BATCH-MSG-17')
      .replace(/PLC-B1/g, 'PLC-B17')
      .replace(/ACC-B1/g, 'ACC-B17');
    const socket = net.connect(adapter.mllpPort, '127.0.0.1');
    const received: Buffer[] = [];
    socket.on('data', (d) => received.push(d));
    await once(socket, 'connect');
    const frame = (t: string) =>
      Buffer.concat([Buffer.from([0x0b]), Buffer.from(t, 'latin1'), Buffer.from([0x1c, 0x0d])]);
    try {
      socket.write(frame(text));
      socket.write(frame(single));
      await waitFor(
        'the answer to BATCH-MSG-17',
        async () => Buffer.concat(received).includes('BATCH-MSG-17'),
        10_000,
      );
      await new Promise((r) => setTimeout(r, 300));
      const answers = Buffer.concat(received).toString('latin1');
      expect(answers).not.toMatch(/FHS|BHS|BTS|FTS/);
      expect(answers.match(/MSA\|[^\r]*/g)).toEqual(['MSA|AA|BATCH-MSG-17']);
    } finally {
      socket.destroy();
    }
    const [stored] = await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM orders WHERE placer_order_number IN ('PLC-B15', 'PLC-B16')`,
    );
    expect(stored.n).toBe(2);
  });

  it('a batch whose BTS-1 declares more messages than it holds: each message goes through, and the count is said in BTS-2 and in each message’s quirks', async () => {
    // The overnight file of the fixture cut short after its second message (a transfer that
    // stopped, an engine that truncated the frame); BTS-1 still says 3.
    // Before: BTS-1 was read and never compared; nothing said a message was missing.
    const text = twoOrmBatch(5, 6).replace('BTS|2', 'BTS|3');
    const reply = segments(await client.send(Buffer.from(text, 'latin1')));
    expect(reply.filter((s) => s.startsWith('MSA|'))).toEqual([
      'MSA|AA|BATCH-MSG-5',
      'MSA|AA|BATCH-MSG-6',
    ]);
    expect(reply.at(-2)).toBe('BTS|2|BTS-1 declares 3 message(s); the batch holds 2');
    const rows = await adapter.dataSource.query(
      `SELECT quirks FROM inbound_messages WHERE message_control_id IN ('BATCH-MSG-5', 'BATCH-MSG-6')`,
    );
    expect(rows).toHaveLength(2);
    for (const row of rows as { quirks: unknown[] }[])
      expect(row.quirks).toContainEqual({
        code: 'batch-count-mismatch',
        detail: 'BTS-1 declares 3 message(s); the batch holds 2',
      });
  });

  it('a file of two batches is answered batch by batch: each BHS-12 its own BHS-11, each BTS its own count and its own shortfall, FTS-1 2', async () => {
    // The overnight file of the fixture, and a second batch of the same file (a RIS that
    // exports one batch per modality) cut short: its BTS-1 says 2, one message arrived.
    // Before: one BHS answered both (BHS-12 the first batch's id only, B-2 never named),
    // BTS-1 3 and FTS-1 1 for a file of two batches, and the second batch's shortfall was
    // compared against the sum of both counts (2 + 2 declared, 3 held), so its quirk
    // landed on the messages of the complete first batch too.
    const first = twoOrmBatch(41, 42).split('\r').filter(Boolean);
    const third = twoOrmBatch(43, 44).split('\r').filter(Boolean);
    const fts = first.pop()!; // FTS|1
    const bts = first.pop()!; // BTS|2
    const message = third.slice(third.findIndex((l) => l.startsWith('MSH|')));
    const onlyFirst = message.slice(
      0,
      message.findIndex((l, i) => i > 0 && l.startsWith('MSH|')),
    );
    const file = [
      ...first,
      bts,
      'BHS|^~\\&|RADIS1|IHEDEMO|DSS_OF|IHEDEMO|20240318150000||||BATCH-20240318-08',
      ...onlyFirst,
      'BTS|2',
      fts.replace('FTS|1', 'FTS|2'),
      '',
    ].join('\r');
    const reply = segments(await client.send(Buffer.from(file, 'latin1')));
    expect(reply.map((s) => s.slice(0, 3))).toEqual([
      'FHS',
      'BHS',
      'MSH',
      'MSA',
      'MSH',
      'MSA',
      'BTS',
      'BHS',
      'MSH',
      'MSA',
      'BTS',
      'FTS',
    ]);
    expect(reply[1]!.split('|')[11]).toBe('BATCH-20240318-07');
    expect(reply.slice(3, 7)).toEqual([
      'MSA|AA|BATCH-MSG-41',
      expect.stringMatching(/^MSH\|/),
      'MSA|AA|BATCH-MSG-42',
      'BTS|2',
    ]);
    expect(reply[7]!.split('|')[11]).toBe('BATCH-20240318-08');
    expect(reply.slice(9)).toEqual([
      'MSA|AA|BATCH-MSG-43',
      'BTS|1|BTS-1 declares 2 message(s); the batch holds 1',
      'FTS|2',
    ]);
    const rows = (await adapter.dataSource.query(
      `SELECT message_control_id AS id, quirks FROM inbound_messages
        WHERE message_control_id IN ('BATCH-MSG-41', 'BATCH-MSG-42', 'BATCH-MSG-43') ORDER BY 1`,
    )) as { id: string; quirks: { code: string }[] }[];
    expect(
      rows.map((r) => [r.id, r.quirks.some((q) => q.code === 'batch-count-mismatch')]),
    ).toEqual([
      ['BATCH-MSG-41', false],
      ['BATCH-MSG-42', false],
      ['BATCH-MSG-43', true],
    ]);
  });
});
