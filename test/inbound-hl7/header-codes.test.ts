import net from 'node:net';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { waitFor } from '../e2e/e2e-support';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';
import { parseHl7 } from '../../src/hl7';
import { ackSummary, hl7Fixture, withControlId } from '../helpers/hl7-fixtures';

/**
 * Codes in the header and ORC-1 are values of HL7 tables (0076 message type, 0003 event, 0103
 * processing ID, 0119 order control) and are case-sensitive; and one MLLP frame carries one
 * message. Real sockets, real PostgreSQL; the IHE SWF ORM^O01 fixture (v2.3.1), edited.
 */
function swf(controlId: string, edit: (text: string) => string = (t) => t): Buffer {
  const text = withControlId(hl7Fixture('orm-o01-v231-ihe-swf-zds'), controlId)
    .toString('latin1')
    .replace(/PLC-100234/g, `PLC-${controlId}`)
    .replace(/ACC-20240318-0042/g, `ACC-${controlId}`);
  return Buffer.from(edit(text), 'latin1');
}

describe('MLLP front door: case-sensitive codes, one message per frame', () => {
  let h: MllpHarness;
  beforeAll(async () => {
    h = await startMllpHarness();
  });
  afterAll(() => h?.close());

  const send = async (raw: Buffer) => ackSummary(await h.mllp.send(raw));
  const stored = async (controlId: string) =>
    (
      await h.db.query<{ outcome: string; raw: Buffer }>(
        `SELECT outcome, raw FROM inbound_messages WHERE message_control_id = $1`,
        [controlId],
      )
    ).rows;

  it.each([
    ['orm^O01', 'MSH-9-1', /MSH\^1\^9\^200/, /HL7 table 0076 codes are case-sensitive: ORM/],
    ['ORM^o01', 'MSH-9-2', /MSH\^1\^9\^201/, /HL7 table 0003 codes are case-sensitive: O01/],
  ])(
    'MSH-9 %s is refused AR, the answer naming the code in its case',
    async (type, id, err, text) => {
      const ack = await h.mllp.send(swf(id, (t) => t.replace('|ORM^O01|', `|${type}|`)));
      expect(ackSummary(ack)).toMatchObject({ code: 'AR', controlIdEchoed: id });
      // v2.3.1: the ERR-1 layout (location^code&text&table), the reason in MSA-3
      expect(ackSummary(ack).errors.join(' ')).toMatch(err);
      expect(ack.toString('latin1')).toMatch(text);
      expect(await stored(id)).toEqual([expect.objectContaining({ outcome: 'rejected' })]);
    },
  );

  it.each([
    ['ORM^o01', 'ACK^O01^ACK'],
    ['ORM^O0<1>', 'ACK^^ACK'],
    ['ORM^O01\\X0D\\', 'ACK^^ACK'],
    ['ZZZ^Q99&x', 'ACK^Q99^ACK'],
  ])(
    'MSH-9 %s is refused AR, the AR’s MSH-9 %s: its trigger an event code (table 0003) or none',
    async (type, written) => {
      // Before: the AR's MSH-9.2 was the sender's text (`ACK^O0<1>^ACK`, `ACK^o01^ACK`), an
      // event in no table that an engine validating the answer refuses.
      const controlId = `TRG-${type.replace(/\W/g, '')}`;
      const ack = await h.mllp.send(swf(controlId, (t) => t.replace('|ORM^O01|', `|${type}|`)));
      expect(ackSummary(ack)).toMatchObject({ code: 'AR', controlIdEchoed: controlId });
      expect(parseHl7(ack).msh.rawField(9)).toBe(written);
    },
  );

  it('an MSH-3/MSH-4 with more components than an HD has is answered with the HD’s three: namespace, universal ID, type', async () => {
    // HD (v2.5.1 2A.3.36) has three components. Before, the ACK's MSH-5 carried the sender's
    // fourth and fifth (`RADIS1^1.2.3^ISO^X^Y`), an HD no validating engine reads.
    const ack = await h.mllp.send(
      swf('HD-4', (t) =>
        t.replace('MSH|^~\\&|RADIS1|IHEDEMO|', 'MSH|^~\\&|RADIS1^1.2.3^ISO^X^Y|IHEDEMO^^^Z|'),
      ),
    );
    expect(ackSummary(ack)).toMatchObject({ code: 'AA', controlIdEchoed: 'HD-4' });
    const msh = parseHl7(ack).msh;
    expect([msh.rawField(5), msh.rawField(6)]).toEqual(['RADIS1^1.2.3^ISO', 'IHEDEMO']);
  });

  it('MSH-11 p (lower case) is refused AR 202 at MSH-11, saying codes are case-sensitive', async () => {
    const ack = await h.mllp.send(swf('CASE-P', (t) => t.replace('|CASE-P|P|', '|CASE-P|p|')));
    const summary = ackSummary(ack);
    expect(summary).toMatchObject({ code: 'AR', controlIdEchoed: 'CASE-P' });
    expect(summary.errors.join(' ')).toMatch(/MSH\^1\^11\^202/);
    expect(ack.toString('latin1')).toMatch(/case-sensitive: P/);
  });

  it.each([
    ['production', 'P'],
    ['p', 'P'],
    ['X^A', 'P'],
  ])(
    'MSH-11 %s (no table 0103 code) is refused AR 202, the AR’s own MSH-11 a table 0103 code (%s), not the sender’s text',
    async (id, written) => {
      // Before: the AR echoed MSH-11 `production`, a PT whose processing ID is in no table:
      // an engine validating the answer refused it too, and the AR never reached its sender.
      const controlId = `PID-${id.replace(/\W/g, '')}`;
      const ack = await h.mllp.send(
        swf(controlId, (t) => t.replace(`|${controlId}|P|`, `|${controlId}|${id}|`)),
      );
      expect(ackSummary(ack)).toMatchObject({ code: 'AR', controlIdEchoed: controlId });
      expect(parseHl7(ack).msh.rawField(11)).toBe(written);
    },
  );

  it('MSH-15 NE with MSH-16 AL (no accept ack, an application ack) is answered AA, and AE for a content error', async () => {
    // IHE LAW-style senders write NE|AL and read the application ack on the same connection.
    // Before: CA, the accept ack they said they never want.
    const enhanced = (t: string) => t.replace('|P|2.3.1', '|P|2.3.1|||NE|AL');
    expect(await send(swf('NE-AL-1', enhanced))).toMatchObject({
      code: 'AA',
      controlIdEchoed: 'NE-AL-1',
    });
    const bad = await send(swf('NE-AL-2', (t) => enhanced(t).replace('\rORC|NW|', '\rORC|RP|')));
    expect(bad).toMatchObject({ code: 'AE', controlIdEchoed: 'NE-AL-2' });
  });

  it.each([
    ['XX|XX', 'AA', ['15', '16']],
    ['always|', 'AA', ['15']],
    ['AL|garbage', 'CA', ['16']],
    // ID values are case-sensitive (v2.5.1 §2.5.3.2): `al` is no table 0155 value, as `p` is no
    // table 0103 one (AR 202) and `nw` no table 0119 one (AE 103). Before: read as AL, enhanced
    // mode, and answered CA without a word.
    ['al|al', 'AA', ['15', '16']],
    ['ne|al', 'AA', ['15', '16']],
  ])(
    'MSH-15/16 %s (outside table 0155) is read as empty: answered %s, a warning ERR 103 at each such field',
    async (fields, code, warned) => {
      // v2.5.1 §2.9.2: original mode when MSH-15 and MSH-16 are not valued; a value outside
      // table 0155 asks for no condition. Before: any text there meant enhanced mode, `XX|XX`
      // was answered CA (an accept acknowledgment, never the AA the sender waits for), silently.
      const id = `ACKT-${fields.replace(/\W/g, '')}`;
      const ack = await h.mllp.send(
        swf(id, (t) => t.replace(`|${id}|P|2.3.1`, `|${id}|P|2.5.1|||${fields}`)),
      );
      const summary = ackSummary(ack);
      expect(summary).toMatchObject({ code, controlIdEchoed: id });
      expect(summary.errors).toEqual(
        warned.map((f) =>
          expect.stringMatching(new RegExp(`^\\|MSH\\^1\\^${f}\\^1\\|103\\^.*\\|W\\|.*table 0155`)),
        ),
      );
      expect(await stored(id)).toEqual([expect.objectContaining({ outcome: 'accepted' })]);
      if (/^[a-z]{2}\|[a-z]{2}$/.test(fields))
        expect(ack.toString('latin1')).toMatch(/table 0155 codes are case-sensitive: AL/);
    },
  );

  it('coded values padded with spaces (ORC-1 `NW `, MSH-9, -11, -12, -15/16, ORC-7.6, OBR-24) are read as their codes, the padding recorded', async () => {
    // A fixed-width interface engine pads each coded field to its width (`ORC|NW |`). A table
    // value holds no space, so the code is read and the padding kept as the quirk padded-code.
    // Before: ORC-1 `NW ` was AE 103 ("not in table 0119"), MSH-12 `2.5.1 ` AR 203, MSH-15/16
    // `NE |AL ` CA (enhanced mode read as AL), ORC-7.6 `S ` a warning and no priority.
    const id = 'PAD-1';
    const ack = await h.mllp.send(
      swf(id, (t) =>
        t
          .replace('|ORM^O01|', '|ORM ^ O01|')
          .replace(`|${id}|P|2.3.1`, `|${id}|P | 2.5.1 |||NE | AL|`)
          .replace('\rORC|NW|', '\rORC|NW |')
          .replace('||^^^20240318150000^^R||', '||^^^20240318150000^^S ||')
          .replace('||||CT|||', '||||CT ||||'),
      ),
    );
    expect(ackSummary(ack)).toMatchObject({ code: 'AA', controlIdEchoed: id, errors: [] });
    const msh = parseHl7(ack).msh;
    expect([msh.rawField(9), msh.rawField(11), msh.rawField(12)]).toEqual([
      'ACK^O01^ACK',
      'P',
      '2.5.1',
    ]);
    const order = await h.db.query(`SELECT request FROM orders WHERE placer_order_number = $1`, [
      `PLC-${id}`,
    ]);
    expect(order.rows[0].request).toMatchObject({ priority: 'stat', modality: 'CT' });
    const quirks = await h.db.query(
      `SELECT quirks::text FROM inbound_messages WHERE message_control_id = $1`,
      [id],
    );
    for (const place of [
      'ORC-1',
      'MSH-9',
      'MSH-9.2',
      'MSH-11',
      'MSH-12',
      'MSH-15',
      'MSH-16',
      'ORC-7.6',
      'OBR-24',
    ])
      expect(quirks.rows[0].quirks).toMatch(
        new RegExp(`padded-code[^}]*${place.replace('.', '\\.')} `),
      );
    // a code in another case is still another code (table codes are case-sensitive)
    const lower = await send(swf('PAD-2', (t) => t.replace('\rORC|NW|', '\rORC| nw |')));
    expect(lower).toMatchObject({ code: 'AE' });
  });

  it('MSH-15/16 NE|NE (no acknowledgment of any kind) is stored and not answered; the connection goes on', async () => {
    // Table 0155: NE is "never". A sender writing NE|NE (a one-way feed through an engine)
    // does not read answers. Before: CA, and CE on an error, written to a peer that never
    // takes them. Now nothing is written; the message is kept as usual, the next one answered.
    const socket = net.connect(h.adapter.mllpPort, '127.0.0.1');
    const received: Buffer[] = [];
    socket.on('data', (d) => received.push(d));
    await once(socket, 'connect');
    const frame = (b: Buffer) => Buffer.concat([Buffer.from([0x0b]), b, Buffer.from([0x1c, 0x0d])]);
    const neNe = (t: string) => t.replace('|P|2.3.1', '|P|2.3.1|||NE|NE');
    try {
      socket.write(frame(swf('NE-NE-1', neNe)));
      socket.write(frame(swf('NE-NE-2', (t) => neNe(t).replace('\rORC|NW|', '\rORC|RP|'))));
      // MSH-15 NE with MSH-16 empty says nothing about the application ack: still answered
      socket.write(frame(swf('NE-NE-4', (t) => t.replace('|P|2.3.1', '|P|2.3.1|||NE|'))));
      socket.write(frame(swf('NE-NE-3')));
      await waitFor(
        'the answer to NE-NE-3',
        async () => Buffer.concat(received).includes('NE-NE-3'),
        10_000,
      );
      await new Promise((r) => setTimeout(r, 300));
      const answers = Buffer.concat(received).toString('latin1');
      // only the last two messages are answered, on the same connection
      expect(answers.match(/MSA\|[^\r]*/g)).toEqual(['MSA|CA|NE-NE-4', 'MSA|AA|NE-NE-3']);
    } finally {
      socket.destroy();
    }
    expect(await stored('NE-NE-1')).toEqual([expect.objectContaining({ outcome: 'accepted' })]);
    expect(await stored('NE-NE-2')).toEqual([expect.objectContaining({ outcome: 'rejected' })]);
    const quirks = await h.db.query(
      `SELECT quirks::text FROM inbound_messages WHERE message_control_id = 'NE-NE-1'`,
    );
    expect(quirks.rows[0].quirks).toContain('no-acknowledgment-wanted');
    const order = await h.db.query(
      `SELECT 1 FROM orders WHERE placer_order_number = 'PLC-NE-NE-1'`,
    );
    expect(order.rowCount).toBe(1);
  });

  it('an OMG^O19 (general clinical order, v2.5.1 §4.4.10) is AR 200 at MSH-9.1, the text naming the messages taken; kept, nothing ordered', async () => {
    // An EHR that sends its radiology orders as OMG^O19 (ORC/TQ1/OBR, no IPC). Before: the text
    // said only "Message type OMG not supported", not that the order goes as OMI^O23 or ORM^O01.
    const omg = swf('OMG-1', (t) =>
      t
        .replace('|ORM^O01|', '|OMG^O19^OMG_O19|')
        .replace('|P|2.3.1', '|P|2.5.1')
        .replace('\rOBR|', '\rTQ1|1||||||20240318150000||R\rOBR|'),
    );
    const ack = await h.mllp.send(omg);
    expect(ackSummary(ack)).toMatchObject({
      code: 'AR',
      controlIdEchoed: 'OMG-1',
      errors: [expect.stringMatching(/^\|MSH\^1\^9\^1\^1\|200\^Unsupported message type/)],
    });
    expect(parseHl7(ack).get('ERR-8')).toBe(
      'Message type OMG not supported; this receiver takes ORM^O01, OMI^O23, ADT^A08, ADT^A31, ADT^A40, ADT^A47',
    );
    expect(await stored('OMG-1')).toEqual([expect.objectContaining({ outcome: 'rejected' })]);
    const orders = await h.db.query(`SELECT 1 FROM orders WHERE placer_order_number = 'PLC-OMG-1'`);
    expect(orders.rowCount).toBe(0);
  });

  it('an OMG^O19 in v2.3.1 (MSA-3, 80 characters): the brief names every message taken and what was refused, whole', async () => {
    // A v2.3.1 ACK carries the sentence in MSA-3 (ST 80), each ^ escaped as \S\. The list of
    // six messages written out whole (ORM^O01, OMI^O23, ADT^A08, ADT^A31, …) no longer fitted:
    // the end, "message type OMG not taken", was cut off.
    const omg = swf('OMG-231', (t) => t.replace('|ORM^O01|', '|OMG^O19|'));
    const ack = parseHl7(await h.mllp.send(omg));
    expect(ack.get('MSA-1')).toBe('AR');
    expect(ack.get('MSA-3')).toBe(
      'Send ORM^O01, OMI^O23, ADT^A08/A31/A40/A47: message type OMG not taken',
    );
  });

  it('an MSH-3 or MSH-4 over 227 characters (HD in v2.7) is AR 102 at the field and kept; before, AR 207 "resend later" for ever, nothing kept', async () => {
    // A random 8,000-character sending application passed the largest row a PostgreSQL index
    // holds (the sender is part of the idempotency key and the orders' sender index).
    const long = randomBytes(6000).toString('base64').replace(/[+/=]/g, 'x');
    for (const [field, controlId, from] of [
      ['MSH^1^3', 'LONG-MSH3', '|RADIS1|IHEDEMO|DSS_OF|'],
      ['MSH^1^4', 'LONG-MSH4', '|RADIS1|IHEDEMO|DSS_OF|'],
    ] as const) {
      const to = field.endsWith('3') ? `|${long}|IHEDEMO|DSS_OF|` : `|RADIS1|${long}|DSS_OF|`;
      const ack = await send(swf(controlId, (t) => t.replace(from, to)));
      expect({ field, code: ack.code }).toEqual({ field, code: 'AR' });
      expect(ack.errors).toEqual([
        expect.stringMatching(new RegExp(`^${field.replace(/\^/g, '\\^')}\\^102&`)),
      ]);
      expect((await stored(controlId)).map((r) => r.outcome)).toEqual(['rejected']);
    }
    // 227 characters are taken.
    const at = await send(swf('MSH3-227', (t) => t.replace('|RADIS1|', `|${'R'.repeat(227)}|`)));
    expect(at.code).toBe('AA');
  });

  it('ORC-1 nw is AE 103 at ORC-1 and creates no order', async () => {
    const ack = await h.mllp.send(swf('CASE-NW', (t) => t.replace('\rORC|NW|', '\rORC|nw|')));
    expect(ackSummary(ack)).toMatchObject({ code: 'AE', controlIdEchoed: 'CASE-NW' });
    expect(ackSummary(ack).errors.join(' ')).toMatch(/ORC\^1\^1\^103/);
    expect(ack.toString('latin1')).toMatch(/case-sensitive \(NW\)/);
    const orders = await h.db.query(`SELECT 1 FROM orders WHERE placer_order_number = $1`, [
      'PLC-CASE-NW',
    ]);
    expect(orders.rowCount).toBe(0);
  });

  it.each([
    ['CR', 'CA'],
    ['DR', 'DC'],
    ['UC', 'CA'],
    ['XR', 'XO'],
    ['OK', 'NW'],
  ])(
    'ORC-1 %s (an answer of table 0119, not a request) is AE 103 at ORC-1, the text naming the request it answers (%s); no order',
    async (control, request) => {
      // A placer (or an engine looping our own ORR back) sending a filler's answer as if it
      // were an order. Before: "Order control CR (HL7 table 0119) is not acted on here", as for
      // any code not taken, and MSA-3 "Send one of NW, CA, …", with nothing saying that the
      // code answers a request and which request was meant.
      const id = `ANS-${control}`;
      const ack = await h.mllp.send(swf(id, (t) => t.replace('\rORC|NW|', `\rORC|${control}|`)));
      expect(ackSummary(ack)).toMatchObject({ code: 'AE', controlIdEchoed: id });
      expect(ackSummary(ack).errors.join(' ')).toMatch(/ORC\^1\^1\^103/);
      const msa3 = parseHl7(ack).get('MSA-3') ?? '';
      expect(msa3.length).toBeLessThanOrEqual(80);
      expect(msa3).toContain(`Send ${request}`);
      expect(msa3).toContain(`${control} answers`);
      const orders = await h.db.query(`SELECT 1 FROM orders WHERE placer_order_number = $1`, [
        `PLC-${id}`,
      ]);
      expect(orders.rowCount).toBe(0);
    },
  );

  it('OBR-24 `ct` (a modality in lower case) is read as CT, recorded as the quirk lowercase-code', async () => {
    // DICOM modalities (CS) and table 0074 codes are upper case and case-sensitive. Before:
    // upper-cased silently, so the interface writing them was never pointed at (a value
    // in no table at all, `XYZ`, is left out with a warning ERR 103, as before).
    const id = 'CASE-MOD';
    const ack = await h.mllp.send(swf(id, (t) => t.replace('||||CT|||', '||||ct|||')));
    expect(ackSummary(ack)).toMatchObject({ code: 'AA', controlIdEchoed: id });
    const order = await h.db.query(`SELECT request FROM orders WHERE placer_order_number = $1`, [
      `PLC-${id}`,
    ]);
    expect(order.rows[0].request).toMatchObject({ modality: 'CT' });
    const quirks = await h.db.query(
      `SELECT quirks::text FROM inbound_messages WHERE message_control_id = $1`,
      [id],
    );
    expect(quirks.rows[0].quirks).toMatch(/lowercase-code[^}]*OBR-24 [^}]*case-sensitive \(CT\)/);
  });

  it('an MSH-9.3 that does not fit the type is taken with a warning ERR at MSH-9.3', async () => {
    const ack = await send(
      swf('CASE-93', (t) =>
        t.replace('|ORM^O01|', '|ORM^O01^ADT_A01|').replace('|P|2.3.1', '|P|2.5.1'),
      ),
    );
    expect(ack).toMatchObject({ code: 'AA', controlIdEchoed: 'CASE-93' });
    expect(ack.errors.join(' ')).toMatch(/MSH\^1\^9\^1\^3\|200\^.*\|W\|/);
  });

  it('a v2.8 control ID holding the truncation character (MSH-2 ^~\\&#) comes back in MSA-2 as it was written', async () => {
    // An Epic OMI^O23 (v2.8, five encoding characters) from an engine that numbers its
    // messages `<batch>#<n>`; one relayed with `\\P\\` (the escaped #) as well. The sender
    // matches MSA-2 to MSH-10 byte for byte. Before: `8817261\\P\\02`, an answer to no message.
    for (const [i, id] of ['8817261#02', '8817261\\P\\03'].entries()) {
      const raw = withControlId(hl7Fixture('omi-o23-v28-multi-order'), id);
      const text = raw.toString('utf8').replace(/55607(\d)\^EPC/g, (_, n) => `T${i}-${n}^EPC`);
      const reply = await h.mllp.send(Buffer.from(text, 'utf8'));
      const msa = reply.toString('utf8').split('\r')[1];
      expect(msa).toBe(`MSA|CA|${id}`);
    }
  });

  it('two messages in one frame are refused AR 100 at the second MSH; no order is filed under the first patient', async () => {
    const first = swf('FRAME-1');
    const second = swf('FRAME-2', (t) => t.replace(/PAT-4711/g, 'PAT-OTHER'));
    const ack = await send(Buffer.concat([first, second]));
    expect(ack).toMatchObject({ code: 'AR', controlIdEchoed: 'FRAME-1' });
    expect(ack.errors.join(' ').replace(/&/g, '^')).toMatch(/MSH\^2\^1\^100/);
    const orders = await h.db.query(
      `SELECT 1 FROM orders WHERE placer_order_number IN ('PLC-FRAME-1', 'PLC-FRAME-2')`,
    );
    expect(orders.rowCount).toBe(0);
    const kept = await stored('FRAME-1');
    expect(kept).toHaveLength(1);
    expect(kept[0]!.outcome).toBe('rejected');
    expect(Buffer.compare(kept[0]!.raw, Buffer.concat([first, second]))).toBe(0);
  });
});
