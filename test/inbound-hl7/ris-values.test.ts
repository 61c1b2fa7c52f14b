import { once } from 'node:events';
import net from 'node:net';
import { Client } from 'pg';
import { MllpClient, parseHl7 } from '../../src/hl7';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { writeSiteFile } from '../helpers/site-file';
import { ackSummary } from '../helpers/hl7-fixtures';
import { waitFor } from '../e2e/e2e-support';

jest.setTimeout(90_000);

/**
 * What real RIS feeds put in their values, answered and stored as they mean it: a Central
 * European RIS in ISO 8859-2, dates written the wrong way, an offset that does not exist, a
 * year-only birth date, and a cancel for an unknown order in the second ORC group.
 */
describe('HL7v2 values from real RIS feeds (real adapter, real socket, real PostgreSQL)', () => {
  let adapter: TestAdapter;
  let client: MllpClient;
  let db: Client;

  beforeAll(async () => {
    adapter = await startTestAdapter({
      CONFIG_FILE: writeSiteFile(
        [
          'mappings:',
          '  hl7:',
          '    productTable:',
          '      - code: MRKOPF',
          '        products: [neuro-volumetry]',
          '',
        ].join('\n'),
      ),
    });
    client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await client?.close();
    await db?.end();
    await adapter?.close();
  });

  /** An ORM^O01 as a RIS sends it; `over` replaces whole segments by their ID. */
  const orm = (id: string, over: Record<string, string> = {}, charset = ''): string[] =>
    [
      `MSH|^~\\&|RIS|HOSP|AI|HOSP|20240318101500||ORM^O01|${id}|P|2.5.1||||||${charset}`,
      `PID|1||PAT-${id}^^^HOSP^MR||NOVAK^JAN||19560402|M`,
      `ORC|NW|PL-${id}^RIS|||||||20240318101500|||1234^DOC^A`,
      `OBR|1|PL-${id}^RIS||MRKOPF^MRT Kopf^L||20240318101500||||||||||1234^DOC^A||ACC-${id}||||||MR`,
    ].map((segment) => over[segment.slice(0, 3)] ?? segment);
  const wire = (segments: string[], encoding: BufferEncoding = 'latin1') =>
    Buffer.from(segments.join('\r') + '\r', encoding);
  const orderOf = async (id: string) =>
    (await db.query(`SELECT * FROM orders WHERE placer_order_number = $1`, [`PL-${id}`])).rows[0];

  it('a RIS in ISO 8859-2 (MSH-18 8859/2) gets its own names back byte for byte, and its patient read right', async () => {
    const text = orm(
      'CZ-1',
      {
        MSH: 'MSH|^~\\&|AMIS|NEMOCNICE ŽĎÁR|AI|RADIOLOGIE|20240318101500||ORM^O01^ORM_O01|CZ-1|P|2.4||||||8859/2',
        PID: 'PID|1||PAT-CZ-1^^^NEM^PI||DVOŘÁK^JIŘÍ||19560402|M',
      },
      '8859/2',
    ).join('\r');
    // The bytes an 8859-2 sender writes (Node has no 8859-2 encoder: Ž 0xAE, Ď 0xCF, Á 0xC1,
    // Ř 0xD8, í 0xED, Í 0xCD).
    const bytes = Buffer.from(
      text.replace(/[ŽĎÁŘÍ]/g, (c) =>
        String.fromCharCode({ Ž: 0xae, Ď: 0xcf, Á: 0xc1, Ř: 0xd8, Í: 0xcd }[c]!),
      ) + '\r',
      'latin1',
    );
    const reply = await client.send(bytes);
    expect(ackSummary(reply).code).toBe('AA');
    // MSH-5/MSH-6 of the ACK are the sender's MSH-3/MSH-4: the same bytes, in the charset MSH-18 names.
    const facility = bytes.subarray(bytes.indexOf('|AMIS|') + 6, bytes.indexOf('|AI|'));
    expect(reply.includes(Buffer.concat([Buffer.from('|AMIS|'), facility, Buffer.from('|')]))).toBe(
      true,
    );
    expect(reply.toString('latin1')).toMatch(/\|8859\/2\r/);
    const order = await orderOf('CZ-1');
    expect(order.request.patient.name).toEqual({ family: 'DVOŘÁK', given: ['JIŘÍ'] });
  });

  it.each([
    ['FOO BAR', ''],
    ['8859/1^x', ''],
    ['unicode utf-8', 'UNICODE UTF-8'],
    ['UTF-8', 'UNICODE UTF-8'],
    ['ISO_IR 100', '8859/1'],
    ['8859/2', '8859/2'],
  ])(
    'MSH-18 %s is answered with an ACK whose MSH-18 is a table 0211 value (%s) or none',
    async (declared, written) => {
      // Before: the ACK echoed the sender's text (`FOO BAR`, `8859/1\S\x`, `unicode utf-8`),
      // a value of no table 0211 that an engine validating our answer refuses.
      const id = `CS-${declared.replace(/\W/g, '')}`;
      const reply = await client.send(wire(orm(id, {}, declared)));
      expect(ackSummary(reply).code).toBe('AA');
      expect(parseHl7(reply).msh.rawField(18)).toBe(written);
    },
  );

  it.each([
    ['2.3', 'UNICODE UTF-8', 'UNICODE'],
    ['2.3.1', 'UNICODE UTF-8', 'UNICODE'],
    ['2.4', 'UNICODE UTF-8', 'UNICODE'],
    ['2.4', 'UTF-8', 'UNICODE'],
    ['2.5', 'UNICODE', 'UNICODE'],
    ['2.5.1', 'UNICODE UTF-8', 'UNICODE UTF-8'],
    ['2.6', 'UTF-8', 'UNICODE UTF-8'],
    ['2.8', 'UNICODE UTF-8', 'UNICODE UTF-8'],
  ])(
    'a v%s sender declaring MSH-18 %s gets an ACK in UTF-8 whose MSH-18 (%s) is in its version’s table 0211',
    async (version, declared, written) => {
      // Table 0211 has `UNICODE UTF-8` from v2.5; v2.3–2.4 name Unicode `UNICODE`. A v2.3.1
      // RIS that writes `UNICODE UTF-8` (its engine's default) was answered `UNICODE UTF-8`, a
      // value its version's table does not hold, though `UTF-8` was already answered UNICODE.
      const id = `U8-${version}-${declared.replace(/\W/g, '')}`;
      const segments = orm(id, {}, declared).map((s) =>
        s.startsWith('MSH|')
          ? s.replace('|RIS|HOSP|', '|RIS|RÖNTGEN|').replace('|P|2.5.1|', `|P|${version}|`)
          : s,
      );
      const reply = await client.send(wire(segments, 'utf8'));
      expect(ackSummary(reply).code).toBe('AA');
      const msh = parseHl7(reply).msh;
      expect(msh.rawField(18)).toBe(written);
      expect(msh.rawField(12)).toBe(version);
      // the bytes are what MSH-18 says: Ö as UTF-8 (C3 96)
      expect(reply.includes(Buffer.from('RÖNTGEN', 'utf8'))).toBe(true);
    },
  );

  it.each([
    ['2.3.1', '8859/15', 'ascii', ''],
    ['2.4', 'GB 18030-2000', 'ascii', ''],
    ['2.4', 'BIG-5', 'ascii', ''],
    ['2.3', 'KS X 1001', 'ascii', ''],
    ['2.4', 'UNICODE UTF-16', 'ascii', ''],
    ['2.4', '8859/15', 'latin1', 'UNICODE'],
    ['2.3.1', 'ISO_IR 203', 'latin1', 'UNICODE'],
    ['2.5', '8859/15', 'latin1', '8859/15'],
    ['2.4', '8859/9', 'latin1', '8859/9'],
  ])(
    'a v%s sender declaring MSH-18 %s (text %s) gets an ACK whose MSH-18 (%s) its version’s table 0211 defines',
    async (version, declared, text, written) => {
      // 8859/15, GB 18030-2000, KS X 1001, CNS 11643-1992, BIG-5 and UNICODE UTF-8/16/32 entered
      // table 0211 in v2.5. A v2.3/2.4 sender writing one (an engine's default, a French or
      // German profile's 8859/15 in an older feed) was answered with it, a value its version
      // does not define. Now: none when the ACK is ASCII, else UTF-8 by its version's name.
      const id = `V0211-${version}-${declared.replace(/\W/g, '')}-${text}`;
      const segments = orm(id, {}, declared).map((s) =>
        s.startsWith('MSH|')
          ? s
              .replace('|RIS|HOSP|', text === 'ascii' ? '|RIS|HOSP|' : '|RIS|RÖNTGEN|')
              .replace('|P|2.5.1|', `|P|${version}|`)
          : s,
      );
      const reply = await client.send(wire(segments, 'latin1'));
      expect(ackSummary(reply).code).toBe('AA');
      const msh = parseHl7(reply).msh;
      expect(msh.rawField(18)).toBe(written);
      expect(msh.rawField(12)).toBe(version);
      if (written === 'UNICODE') expect(reply.includes(Buffer.from('RÖNTGEN', 'utf8'))).toBe(true);
      if (written.startsWith('8859/'))
        expect(reply.includes(Buffer.from('RÖNTGEN', 'latin1'))).toBe(true);
    },
  );

  it('a sender without MSH-18 writing Latin-1 gets its application and facility back as it wrote them', async () => {
    const segments = orm('LAT-1', {
      MSH: 'MSH|^~\\&|RÖNTGEN|KLINIKUM SÜD|AI|HOSP|20240318101500||ORM^O01|LAT-1|P|2.3.1',
    });
    const reply = await client.send(wire(segments, 'latin1'));
    expect(ackSummary(reply).code).toBe('AA');
    expect(reply.includes(Buffer.from('|RÖNTGEN|KLINIKUM SÜD|', 'latin1'))).toBe(true);
  });

  it('a birth date written 1956-04-02 is not stored as 1956, and an offset +2400 is not stored at all: both warned', async () => {
    const reply = await client.send(
      wire(
        orm('DATES-1', {
          PID: 'PID|1||PAT-DATES-1^^^HOSP^MR||NOVAK^JAN||1956-04-02|M',
          ORC: 'ORC|NW|PL-DATES-1^RIS|||||||20240318101500+2400|||1234^DOC^A',
          OBR: 'OBR|1|PL-DATES-1^RIS||MRKOPF^MRT Kopf^L||20240318101500-0075||||||||||1234^DOC^A||ACC-DATES-1||||||MR',
        }),
      ),
    );
    const ack = ackSummary(reply);
    expect(ack.code).toBe('AA');
    expect(ack.errors).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^\|PID\^1\^7\^1\|102\^.*\|W\|/),
        expect.stringMatching(/^\|ORC\^1\^9\^1\|102\^.*\|W\|/),
      ]),
    );
    const order = await orderOf('DATES-1');
    expect(order.request.patient.birthDate).toBeUndefined();
    // ORC-9 and OBR-6 do not exist as instants; no invalid ISO 8601 offset is kept.
    expect(order.request.requestedAt).toBeUndefined();
    expect(JSON.stringify(order.request)).not.toMatch(/[+-]24:00|-00:75/);
  });

  it('a year-only birth date (PID-7 1977) does not stop the order upstream: it is placed', async () => {
    const reply = await client.send(
      wire(orm('YEAR-1', { PID: 'PID|1||PAT-YEAR-1^^^HOSP^MR||NOVAK^JAN||1977|M' })),
    );
    expect(ackSummary(reply).code).toBe('AA');
    const placed = await waitFor('the order placed upstream (or failed)', async () => {
      const order = await orderOf('YEAR-1');
      return order && ['placed', 'failed'].includes(order.state) ? order : undefined;
    });
    expect({ state: placed.state, error: placed.last_error }).toEqual({
      state: 'placed',
      error: null,
    });
    expect(placed.request.patient.birthDate).toBe('1977');
  });

  it('control characters escaped into values (\\X07\\, \\X1C\\) are stored as U+FFFD: nothing we build from the order holds one', async () => {
    const reply = await client.send(
      wire(
        orm('CTRL-1', { PID: 'PID|1||PAT-CTRL-1^^^HOSP^MR||NOVAK\\X07\\^JAN\\X1C\\||19560402|M' }),
      ),
    );
    expect(ackSummary(reply).code).toBe('AA');
    const placed = await waitFor('the order placed upstream (or failed)', async () => {
      const order = await orderOf('CTRL-1');
      return order && ['placed', 'failed'].includes(order.state) ? order : undefined;
    });
    expect(placed.state).toBe('placed');
    expect(placed.request.patient.name).toMatchObject({
      family: 'NOVAK\uFFFD',
      given: ['JAN\uFFFD'],
    });
    // JSON.stringify writes a control character as \u00XX: none is left
    expect(JSON.stringify(placed.request)).not.toMatch(/\\u00(0[0-8bcef]|1[0-9a-f]|7f)/i);
    // the raw message keeps what was sent
    const raw = (
      await db.query(`SELECT raw FROM inbound_messages WHERE message_control_id = 'CTRL-1'`)
    ).rows[0].raw as Buffer;
    expect(raw.toString('latin1')).toContain('NOVAK\\X07\\^JAN\\X1C\\');
    // and the analyst is told that something was replaced
    const stored = await db.query(
      `SELECT quirks FROM inbound_messages WHERE message_control_id = 'CTRL-1'`,
    );
    expect(stored.rows[0].quirks).toContainEqual(
      expect.objectContaining({ code: 'unstorable-characters-replaced' }),
    );
  });

  it('a cancel for an unknown order in the second ORC group is AE 204 at ORC[2]-2, not at the first ORC', async () => {
    const first = orm('GRP-1');
    const reply = await client.send(
      wire([...first, 'ORC|CA|PL-NOBODY-7^RIS', 'OBR|2|PL-NOBODY-7^RIS||MRKOPF^MRT Kopf^L']),
    );
    const ack = parseHl7(reply);
    expect(ack.get('MSA-1')).toBe('AE');
    const err = ack.segment('ERR')!;
    expect([err.value(2, 1, 1), err.value(2, 1, 2), err.value(2, 1, 3)]).toEqual(['ORC', '2', '2']);
    expect(err.value(3)).toBe('204');
    expect(await orderOf('GRP-1')).toBeUndefined();
  });
  it('a new order (NW) whose group has no OBR names that group’s ORC, not the OBR of another order', async () => {
    // An interface engine's filter dropped the second order's OBR (ORM_O01 makes the order
    // detail optional; a new order still needs its procedure). Before: AE 101 at `OBR^1^4`,
    // the first order's OBR, which holds its procedure; the sender was sent to look there.
    const second = 'ORC|NW|PL-NOOBR-2^RIS|||||||20240318101500|||1234^DOC^A';
    const reply = await client.send(wire([...orm('NOOBR-1'), second]));
    const ack = parseHl7(reply);
    expect(ack.get('MSA-1')).toBe('AE');
    const err = ack.segment('ERR')!;
    expect([err.value(2, 1, 1), err.value(2, 1, 2), err.value(2, 1, 3)]).toEqual(['ORC', '2', '1']);
    expect(err.value(3)).toBe('100');
    expect(err.value(8)).toMatch(/ORC\[2\] has no OBR/);
    expect(await orderOf('NOOBR-1')).toBeUndefined();

    // The same in v2.3 (ERR-1), the ORC without its OBR first: not the next order's OBR[1].
    const [msh, pid, orc, obr] = orm('NOOBR-3');
    const v23 = await client.send(
      wire([
        msh.replace('|2.5.1|', '|2.3|'),
        pid,
        orc.replace('PL-NOOBR-3', 'PL-NOOBR-4'),
        orc,
        obr,
      ]),
    );
    expect(parseHl7(v23).get('MSA-1')).toBe('AE');
    expect(v23.toString('latin1')).toMatch(/\rERR\|ORC\^1\^1\^100&/);
  });

  /**
   * Sends each message in its own frame (`frame(id)`) on one raw socket, waiting for each
   * answer as a legacy sender does; each is answered AA, stored with the quirk
   * `mllp-missing-cr`, and the last one ordered.
   */
  const answeredOneByOne = async (ids: string[], frame: (id: string) => Buffer) => {
    const socket = net.connect(adapter.mllpPort, '127.0.0.1');
    await once(socket, 'connect');
    const answers: Buffer[] = [];
    let pending = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      for (let end = pending.indexOf(0x1c); end !== -1; end = pending.indexOf(0x1c)) {
        answers.push(pending.subarray(1, end));
        pending = pending.subarray(end + 2);
      }
    });
    try {
      // the legacy sender waits for each answer before it sends the next message
      for (const id of ids) {
        const before = answers.length;
        socket.write(frame(id));
        await waitFor(`answer to ${id}`, async () => answers.length > before, 5_000);
        expect(ackSummary(answers[before]!)).toMatchObject({ code: 'AA', controlIdEchoed: id });
      }
    } finally {
      socket.destroy();
    }
    const { rows } = await db.query(
      `SELECT message_control_id, quirks FROM inbound_messages
        WHERE message_control_id = ANY($1) ORDER BY message_control_id`,
      [ids],
    );
    expect(rows.map((r) => r.message_control_id)).toEqual(ids);
    for (const row of rows) {
      expect(row.quirks).toContainEqual(expect.objectContaining({ code: 'mllp-missing-cr' }));
    }
    expect(await orderOf(ids.at(-1)!)).toBeDefined();
  };

  it('a sender that ends its frames with FS alone (no CR) is answered, and the deviation is recorded', async () => {
    await answeredOneByOne(['NOCR-1', 'NOCR-2'], (id) =>
      Buffer.concat([Buffer.from([0x0b]), wire(orm(id)), Buffer.from([0x1c])]),
    );
  });

  it('a sender whose frame trailer is FS LF (its CR written as a line feed) is answered, and the deviation is recorded', async () => {
    // A sender that turns every CR it writes into LF (a Unix port of a text-mode writer) ends
    // its segments and its MLLP trailer with LF. Before: the FS was kept as payload, the frame
    // never ended, and the message was neither answered nor stored (the sender resent it
    // until it gave up).
    await answeredOneByOne(['FSLF-1', 'FSLF-2'], (id) =>
      Buffer.from(`\u000b${orm(id).join('\n')}\n\u001c\n`, 'latin1'),
    );
  });
  /** An OMI^O23 (IHE RAD-4, v2.5.1) with the given TQ1; procedure MRKOPF. */
  const omi = (id: string, tq1: string): Buffer =>
    wire([
      `MSH|^~\\&|RIS|HOSP|AI|HOSP|20240318101500+0100||OMI^O23^OMI_O23|${id}|P|2.5.1`,
      `PID|1||PAT-${id}^^^HOSP^MR||NOVAK^JAN||19560402|M`,
      `ORC|NW|PL-${id}^RIS|||||||20240318101500+0100|||1234^DOC^A`,
      tq1,
      `OBR|1|PL-${id}^RIS||MRKOPF^MRT Kopf^L|||||||||||||||ACC-${id}||||||MR`,
      `IPC|ACC-${id}|RP-${id}|1.2.826.0.1.3680043.2.1125.${id.length}7|SPS-${id}|MR`,
    ]);

  it('a TQ1-9 priority sent as text only (CWE ^STAT, ^Urgent^HL70485) is the priority it names, not dropped', async () => {
    // TQ1-9 is a CWE (v2.5.1 §4.5.4.9): an EHR that fills only the text component (`^STAT`)
    // or the alternate code (`^^^S^Stat^HL70485`). Before: component 1 was read alone, it was
    // empty, and the stat order went upstream with no priority (processed as routine), silently.
    for (const [id, field, priority] of [
      ['PRIO-T1', '^STAT', 'stat'],
      ['PRIO-T2', '^Urgent^HL70485', 'urgent'],
      ['PRIO-T3', '^^^S^Stat^HL70485', 'stat'],
    ] as const) {
      const reply = await client.send(omi(id, `TQ1|1||||||20240318110000+0100||${field}`));
      expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [] });
      expect((await orderOf(id)).request.priority).toBe(priority);
    }
    // A text that names no priority is warned about at the component read, never guessed.
    const odd = ackSummary(
      await client.send(omi('PRIO-T4', 'TQ1|1||||||20240318110000+0100||^whenever')),
    );
    expect(odd.code).toBe('AA');
    expect(odd.errors).toEqual([expect.stringMatching(/^\|TQ1\^1\^9\^1\^2\|103\^.*\|W\|/)]);
    expect((await orderOf('PRIO-T4')).request.priority).toBeUndefined();
  });
  it('an unreadable ORC-7.6 priority (SOON) beside a valid TQ1-9 is warned about at ORC-7.6 and recorded, as when it is alone', async () => {
    // An EHR writing the priority twice, a code in TQ1-9 and a word of its own in the old
    // ORC-7.6. Alone, ORC-7.6 SOON was a warning ERR 103; beside TQ1-9 S it was never looked
    // at (only values are compared with the one taken), so the sender never heard that half
    // of what it wrote meant nothing here.
    const withOrc7 = (id: string, tq1: string) =>
      Buffer.from(
        omi(id, tq1)
          .toString('latin1')
          .replace(`ORC|NW|PL-${id}^RIS||||||`, `ORC|NW|PL-${id}^RIS|||||^^^^^SOON|`),
        'latin1',
      );
    const warned = expect.stringMatching(/^\|ORC\^1\^7\^1\^6\|103\^.*\|W\|.*SOON/);
    const beside = ackSummary(
      await client.send(withOrc7('SOON-1', 'TQ1|1||||||20240318110000+0100||S')),
    );
    expect(beside).toMatchObject({ code: 'AA', errors: [warned] });
    expect((await orderOf('SOON-1')).request.priority).toBe('stat');
    const alone = ackSummary(
      await client.send(withOrc7('SOON-2', 'TQ1|1||||||20240318110000+0100')),
    );
    expect(alone).toMatchObject({ code: 'AA', errors: [warned] });
    expect((await orderOf('SOON-2')).request.priority).toBeUndefined();
    for (const id of ['SOON-1', 'SOON-2']) {
      const stored = await db.query(
        `SELECT quirks::text FROM inbound_messages WHERE message_control_id = $1`,
        [id],
      );
      expect(stored.rows[0].quirks).toMatch(/value-not-mapped.*ORC-7\.6.*SOON/);
    }
  });
  it('a date-only start (TQ1-7 20240318 or 202403) is kept at its precision, not made midnight', async () => {
    // A RIS that schedules by day writes TQ1-7 as a date (a DTM of day precision). Before: the
    // order's start was 2024-03-18T00:00:00+01:00, a time nobody gave, and our ORU's OBR-7 and
    // the report's effectiveDateTime said the exam was at midnight.
    await client.send(omi('DAY-1', 'TQ1|1||||||20240318||R'));
    expect((await orderOf('DAY-1')).request.requestedAt).toBe('2024-03-18');
    await client.send(omi('DAY-2', 'TQ1|1||||||202403+0100||R'));
    expect((await orderOf('DAY-2')).request.requestedAt).toBe('2024-03');
    // with an hour the time is given: an instant as before
    await client.send(omi('DAY-3', 'TQ1|1||||||2024031809||R'));
    expect((await orderOf('DAY-3')).request.requestedAt).toBe('2024-03-18T09:00:00+01:00');
  });
  it('a RIS that schedules in OBR-36 (scheduled date/time) and stamps OBR-6 with the message time has the exam at OBR-36', async () => {
    // An ORM^O01 v2.3 feeding a worklist (Orthanc-style MWL feeds): ORC-7 empty, OBR-6 the
    // moment the order was sent, OBR-36 the slot the RIS scheduled. OBR-6 "is not used"
    // since v2.3 (deprecated, its meaning moved to ORC-7.4/OBR-27.4); OBR-36 is the time the
    // filler scheduled the observation. Before: requestedAt was OBR-6, the exam put at the
    // minute of the message (OBR-7 of our ORU, the report's effectiveDateTime), a day early.
    const obr = (id: string, extra: Record<number, string>) => {
      const fields = ['OBR', '1', `PL-${id}^RIS`, '', 'MRKOPF^MRT Kopf^L'];
      Object.entries({ 16: '1234^DOC^A', 18: `ACC-${id}`, 24: 'MR', ...extra }).forEach(
        ([n, v]) => (fields[Number(n)] = v),
      );
      return Array.from(fields, (f) => f ?? '').join('|');
    };
    const sent = (id: string, extra: Record<number, string>, orc?: string) =>
      client.send(
        wire(
          orm(id, {
            MSH: `MSH|^~\\&|RIS|HOSP|AI|HOSP|20240318101500+0100||ORM^O01|${id}|P|2.3`,
            OBR: obr(id, extra),
            ...(orc ? { ORC: orc } : {}),
          }),
        ),
      );
    expect(
      ackSummary(await sent('SCH-1', { 6: '20240318101500', 36: '20240319083000' })).code,
    ).toBe('AA');
    expect((await orderOf('SCH-1')).request.requestedAt).toBe('2024-03-19T08:30:00+01:00');
    // OBR-6 alone is still read (its pre-v2.3 meaning), and a start in the TQ still wins
    await sent('SCH-2', { 6: '20240318101500' });
    expect((await orderOf('SCH-2')).request.requestedAt).toBe('2024-03-18T10:15:00+01:00');
    await sent(
      'SCH-3',
      { 6: '20240318101500', 36: '20240319083000' },
      'ORC|NW|PL-SCH-3^RIS|||||^^^20240319090000||20240318101500|||1234^DOC^A',
    );
    expect((await orderOf('SCH-3')).request.requestedAt).toBe('2024-03-19T09:00:00+01:00');
  });
  it('a Japanese RIS writing ISO-2022-JP bytes (MSH-18 ~ISO IR87, MSH-20 ISO 2022-1994, as JAHIS orders are): names read as kanji, also when their JIS bytes are HL7 delimiters', async () => {
    // JIS X 0208 in ESC $ B ... ESC ( B, the escape sequences as bytes (not as \M2442\):
    // 服部 is ESC $ B `I~It` ESC ( B and 五十嵐 `8^==Mr`: their second bytes are `~` and `^`.
    // The bytes `iconv -t ISO-2022-JP` writes for each name (JIS X 0208 row/cell + 0x20).
    const JIS: Record<string, string> = {
      服部: 'I~It',
      美咲: 'H~:i',
      五十嵐: '8^==Mr',
      太郎: 'B@O:',
    };
    const jis = (text: string) =>
      text.replace(/[\u3000-\u9fff]+/g, (run) => `\u001b$B${JIS[run]}\u001b(B`);
    const cases = [
      ['JIS-1', '服部^美咲^^^^^L^I~HATTORI^MISAKI^^^^^L^P', { family: '服部', given: ['美咲'] }],
      ['JIS-2', '五十嵐^太郎^^^^^L^I', { family: '五十嵐', given: ['太郎'] }],
    ] as const;
    for (const [id, pid5, name] of cases) {
      const reply = await client.send(
        wire(
          orm(id, {
            MSH: `MSH|^~\\&|RIS|HOSP|AI|HOSP|20240318101500||ORM^O01|${id}|P|2.5|||||JPN|~ISO IR87||ISO 2022-1994`,
            PID: `PID|1||PAT-${id}^^^HOSP^MR||${jis(pid5)}||19560402|M`,
          }),
        ),
      );
      expect(ackSummary(reply).code).toBe('AA');
      expect((await orderOf(id)).request.patient.name).toEqual(name);
    }
  });
  it('character set escapes (\\M2442\\, \\C2842\\) are read as the switch they are, a local escape (\\Z..\\) dropped: no escape text in a stored name', async () => {
    // A Japanese RIS (v2.5.1 §2.7.5, MSH-18 ~ISO IR87) writing the ISO 2022 escapes of its
    // kanji name as HL7 escapes: \M2442\ (ESC $ B, JIS X 0208) ... \C2842\ (ESC ( B, ASCII).
    // Before: kept literally, the stored family name was `\M2442\;3ED\C2842\`, which went
    // upstream, into FHIR and into our ORU as text.
    const names = [
      [
        'ESC-JP',
        '\\M2442\\;3ED\\C2842\\^\\M2442\\B@O:\\C2842\\^^^^^L^I',
        { family: '山田', given: ['太郎'] },
      ],
      ['ESC-Z', 'YAMADA\\ZKANJI1\\^TARO', { family: 'YAMADA', given: ['TARO'] }],
      ['ESC-C', 'M\\C2D41\\ULLER^HANS', { family: 'MULLER', given: ['HANS'] }],
      // a switch back to ASCII right before the next switch to kanji (no character between)
      [
        'ESC-JP2',
        '\\M2442\\;3ED\\C2842\\\\M2442\\B@O:\\C2842\\^X',
        { family: '山田太郎', given: ['X'] },
      ],
    ] as const;
    for (const [id, pid5, name] of names) {
      const reply = await client.send(
        wire(
          orm(id, {
            MSH: `MSH|^~\\&|RIS|HOSP|AI|HOSP|20240318101500||ORM^O01|${id}|P|2.5.1||||||~ISO IR87|||`,
            PID: `PID|1||PAT-${id}^^^HOSP^MR||${pid5}||19560402|M`,
          }),
        ),
      );
      expect(ackSummary(reply).code).toBe('AA');
      const order = await orderOf(id);
      expect(order.request.patient.name).toEqual(name);
      const quirks = await db.query(
        `SELECT quirks::text FROM inbound_messages WHERE message_control_id = $1`,
        [id],
      );
      expect(quirks.rows[0].quirks).toMatch(/charset-escape|local-escape/);
    }
  });
});
