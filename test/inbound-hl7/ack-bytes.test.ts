import { once } from 'node:events';
import net from 'node:net';
import { parseHl7 } from '../../src/hl7';
import { isValidUtf8, table0211Value } from '../../src/hl7/hl7-charset';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';
import { hl7Fixture, withControlId } from '../helpers/hl7-fixtures';

jest.setTimeout(90_000);

/**
 * What the adapter writes back over MLLP is valid HL7 for its declared character set, whatever
 * the sender's header held: the ACK's bytes are what its own MSH-18 names (v2.5.1 §2.15.9.18;
 * empty is ASCII). Real adapter, real socket (raw frames, the answer read byte for byte), real
 * PostgreSQL.
 */
describe('MLLP answers: bytes valid for the MSH-18 they declare', () => {
  let h: MllpHarness;
  beforeAll(async () => {
    h = await startMllpHarness();
  });
  afterAll(() => h?.close());

  /** One frame on a fresh raw socket; the answer's bytes between VT and FS, as sent. */
  const exchange = async (message: Buffer): Promise<Buffer> => {
    const socket = net.connect(h.adapter.mllpPort, '127.0.0.1');
    await once(socket, 'connect');
    let pending = Buffer.alloc(0);
    try {
      const answered = new Promise<Buffer>((resolve, reject) => {
        socket.on('error', reject);
        socket.on('data', (chunk: Buffer) => {
          pending = Buffer.concat([pending, chunk]);
          const end = pending.indexOf(0x1c);
          if (end !== -1) resolve(pending.subarray(1, end));
        });
      });
      socket.write(Buffer.concat([Buffer.from([0x0b]), message, Buffer.from([0x1c, 0x0d])]));
      return await answered;
    } finally {
      socket.destroy();
    }
  };

  /** The ACK's own MSH-18 as it stands in its bytes (ASCII in every charset we write). */
  const declaredBy = (ack: Buffer): string =>
    ack.toString('latin1').split('\r')[0]!.split('|')[17] ?? '';

  /**
   * True when the bytes are what the charset named in their MSH-18 allows: UTF-8 that decodes
   * strictly, ISO 8859-1 without the C1 control bytes 0x80-0x9F, 7-bit ASCII when empty.
   */
  const validForItsCharset = (ack: Buffer): boolean => {
    const declared = declaredBy(ack);
    const value = declared === '' ? 'ASCII' : table0211Value(declared, '2.5.1');
    if (value === 'UNICODE UTF-8') return isValidUtf8(ack);
    if (value === '8859/1') return !ack.some((b) => b >= 0x80 && b <= 0x9f);
    if (value === 'ASCII') return !ack.some((b) => b >= 0x80);
    throw new Error(`no check for MSH-18 ${declared}`);
  };

  it('a header of Latin-1 bytes under UNICODE UTF-8 is answered in UTF-8, its names the same letters', async () => {
    // A German RIS behind an engine that labels its feed UTF-8 and passes the Latin-1 bytes on
    const sent = withControlId(hl7Fixture('orm-o01-v251-utf8-declared-latin1-header'), 'ACKB-1');
    const ack = await exchange(sent);
    expect(declaredBy(ack)).toBe('UNICODE UTF-8');
    expect(isValidUtf8(ack)).toBe(true);
    const parsed = parseHl7(ack);
    expect(parsed.get('MSA-2')).toBe('ACKB-1');
    expect([parsed.get('MSH-5'), parsed.get('MSH-6')]).toEqual(['RIS_RÖNTGEN', 'ST_MARIEN_KÖLN']);
    const stored = await h.db.query(
      `SELECT outcome FROM inbound_messages WHERE message_control_id = 'ACKB-1'`,
    );
    expect(stored.rows).toEqual([{ outcome: 'accepted' }]);
  });

  /** An ORM^O01 whose sender names itself `sender` and writes MSH-18 `charset`. */
  const orm = (id: string, sender: string, charset: string, type = 'ORM^O01'): string =>
    [
      `MSH|^~\\&|${sender}|KLINIKUM|AI|RAD|20240611091502||${type}|${id}|P|2.5.1||||||${charset}`,
      `PID|1||PAT-${id}^^^KLINIKUM^PI||Jäger^Björn||19700101|M`,
      `ORC|NW|PL-${id}^RIS|||||||20240611091502`,
      `OBR|1|PL-${id}^RIS||CTTHX^CT Thorax^L|||||||||||||ACC-${id}||||||CT`,
    ].join('\r') + '\r';

  it.each([
    // [case, MSH-18 sent, MSH-18 answered, bytes of the message]
    ['UTF-8 under ASCII', 'ASCII', 'UNICODE UTF-8', 'utf8'],
    ['UTF-8 with no MSH-18', '', 'UNICODE UTF-8', 'utf8'],
    ['Latin-1 with no MSH-18', '', '8859/1', 'latin1'],
    ['Latin-1 under ASCII', 'ASCII', '8859/1', 'latin1'],
    ['UTF-8 under 8859/1 (an engine re-encoded)', '8859/1', '8859/1', 'utf8'],
    ['Latin-1 under UTF-8', 'UTF-8', 'UNICODE UTF-8', 'latin1'],
  ] as const)('%s: MSH-18 %j answered %j, valid in it', async (_, charset, answered, bytes) => {
    const id = `ACKB-${charset || 'NONE'}-${bytes}`.replace(/[^A-Z0-9-]/gi, '');
    for (const type of ['ORM^O01', 'ORM^O09']) {
      // accepted (AA) and refused (AR 201): both answers echo the sender's header
      const ack = await exchange(
        Buffer.from(orm(id + type.slice(-1), 'RÖNTGEN', charset, type), bytes),
      );
      expect(declaredBy(ack)).toBe(answered);
      expect(validForItsCharset(ack)).toBe(true);
      const parsed = parseHl7(ack);
      expect(parsed.get('MSA-1')).toBe(type === 'ORM^O01' ? 'AA' : 'AR');
      expect(parsed.get('MSA-2')).toBe(id + type.slice(-1));
      expect(parsed.get('MSH-5')).toBe('RÖNTGEN');
    }
  });

  it('an MSH-3 longer than an HD is refused, and the AR does not write it back', async () => {
    const ack = await exchange(Buffer.from(orm('ACKB-HD3', 'R'.repeat(3000), '')));
    const parsed = parseHl7(ack);
    expect([parsed.get('MSA-1'), parsed.get('MSA-2'), parsed.get('ERR-3')]).toEqual([
      'AR',
      'ACKB-HD3',
      '102',
    ]);
    // before: MSH-5 of the AR was the 3,000 characters
    expect(parsed.get('MSH-5')).toBeUndefined();
    expect(ack.length).toBeLessThan(1000);
  });

  it('an MSH-5 longer than an HD: the order is taken, and the ACK names us in MSH-3', async () => {
    const text = orm('ACKB-HD5', 'RIS', '').replace(
      '|KLINIKUM|AI|',
      `|KLINIKUM|${'A'.repeat(3000)}|`,
    );
    const ack = await exchange(Buffer.from(text));
    const parsed = parseHl7(ack);
    expect(parsed.get('MSA-1')).toBe('AA');
    // before: the 3,000 characters in the ACK's MSH-3
    expect(parsed.get('MSH-3')).toBe('IMAGING-AI-ADAPTER');
    expect(ack.length).toBeLessThan(1000);
  });

  it('an MSH-10 longer than an ST is refused AR 102, MSA-2 its first 199 characters', async () => {
    const id = `ACKB-${'7'.repeat(7995)}`;
    const ack = await exchange(Buffer.from(orm(id, 'RIS', '').replace(`PL-${id}`, 'PL-ACKB-LONG')));
    const parsed = parseHl7(ack);
    // before: AA, with the 8,000 characters in MSA-2
    expect([parsed.get('MSA-1'), parsed.get('ERR-2.3'), parsed.get('ERR-3')]).toEqual([
      'AR',
      '10',
      '102',
    ]);
    expect(parsed.get('MSA-2')).toBe(id.slice(0, 199));
    const order = await h.db.query(
      `SELECT 1 FROM orders WHERE placer_order_number = 'PL-ACKB-LONG'`,
    );
    expect(order.rowCount).toBe(0);
  });

  it("a UUID control ID (36) from a v2.3-2.5.1 sender is echoed whole, and the message says it is over its version's 20", async () => {
    // An engine that numbers its messages by UUID under MSH-12 2.5.1 (MSH-10 and MSA-2 are ST 20
    // there, 199 from v2.6). MSA-2 is how the sender matches our answer (v2.5.1 §2.9.2; Mirth's
    // response validator compares it whole), so it goes back whole: cut to 20 it would answer
    // no message of the sender's. Before, nothing told the analyst the answer carried a longer
    // MSA-2 than the version gives it.
    const uuid = '5f0c2a8e-9d1b-4c7e-8f3a-2b6d1e9c4a70';
    const v251 = await exchange(withControlId(hl7Fixture('omi-o23-v251-ihe-ipc'), uuid));
    expect([parseHl7(v251).get('MSA-1'), parseHl7(v251).get('MSA-2')]).toEqual(['AA', uuid]);
    const stored = await h.db.query(
      `SELECT quirks FROM inbound_messages WHERE message_control_id = $1`,
      [uuid],
    );
    expect(stored.rows[0].quirks).toEqual(
      expect.arrayContaining([
        {
          code: 'control-id-longer-than-version',
          detail:
            'MSH-10 is 36 characters, more than the 20 that v2.5.1 gives MSH-10 and MSA-2 (199 from v2.6): taken, and echoed whole in MSA-2 so that the sender can match the answer',
        },
      ]),
    );
    // v2.8: MSH-10 is ST 199, the same UUID is within its type
    const v28uuid = '0b7e4d12-6a3f-4e88-9c21-7d5f3a9e1b64';
    const v28 = await exchange(withControlId(hl7Fixture('omi-o23-v28-multi-order'), v28uuid));
    expect(parseHl7(v28).get('MSA-2')).toBe(v28uuid);
    const within = await h.db.query(
      `SELECT quirks FROM inbound_messages WHERE message_control_id = $1`,
      [v28uuid],
    );
    expect(JSON.stringify(within.rows[0].quirks)).not.toContain('control-id-longer-than-version');
  });

  it('an MSH-10 with a backslash the sender did not escape comes back as the text it was read as', async () => {
    const ack = await exchange(Buffer.from(orm('ACKB\\BS', 'RIS', '')));
    // before: `ACKB\BS`, an escape sequence left open in the answer
    expect(ack.toString('latin1')).toContain('\rMSA|AA|ACKB\\E\\BS\r');
    expect(parseHl7(ack).get('MSA-2')).toBe('ACKB\\BS');
  });

  it('Windows-1252 punctuation under UTF-8, ASCII or no MSH-18 is read as such: no C1 control code in the ACK or the order', async () => {
    // An Irish or US RIS on Windows: O’NEILL (0x92) in its facility, O’BRIEN in PID-5. Before,
    // read as ISO 8859-1, 0x92 was U+0092, a C1 control code: the ACK echoed it (in UTF-8 as
    // C2 92), and the order stored it for the ORU, FHIR and the SR.
    for (const charset of ['UNICODE UTF-8', 'ASCII', '']) {
      const id = `ACKB-1252-${charset.length}`;
      const text = orm(id, 'RIS', charset)
        .replace('|KLINIKUM|AI|', '|O\u2019NEILL CLINIC|AI|')
        .replace('Jäger^Björn', 'O\u2019BRIEN^SEAN');
      const ack = await exchange(Buffer.from(text.replace(/\u2019/g, '\x92'), 'latin1'));
      expect(validForItsCharset(ack)).toBe(true);
      const parsed = parseHl7(ack);
      expect({ charset, msh6: parsed.get('MSH-6') }).toEqual({ charset, msh6: 'O’NEILL CLINIC' });
      expect(ack.toString('utf8')).not.toMatch(/[\u0080-\u009f]/);
      const order = await h.db.query<{ name: unknown; quirks: Array<{ code: string }> }>(
        `SELECT o.request->'patient'->'name' AS name, m.quirks
           FROM orders o JOIN inbound_messages m ON m.id = o.inbound_message_id
          WHERE o.placer_order_number = $1`,
        [`PL-${id}`],
      );
      expect(order.rows[0]!.name).toEqual({ family: 'O’BRIEN', given: ['SEAN'] });
      expect(order.rows[0]!.quirks).toContainEqual(
        expect.objectContaining({ code: 'windows-1252-bytes' }),
      );
    }
  });

  it('a refusal quotes a header code by its first 20 characters: 5,000 of MSH-9.1 do not fill the ERR', async () => {
    // v2.8: no length for ERR-8 in the version, the refusal's text is the whole bound
    const ack = await exchange(
      Buffer.from(
        orm('ACKB-TYPE', 'RIS', '')
          .replace('|2.5.1|', '|2.8|')
          .replace('|ORM^O01|', `|${'Z'.repeat(5000)}^O01|`),
      ),
    );
    const parsed = parseHl7(ack);
    expect([parsed.get('MSA-1'), parsed.get('ERR-3')]).toEqual(['AR', '200']);
    expect(parsed.get('ERR-8')).toMatch(/^Message type Z{20}… not supported/);
    // before: 5,250 bytes, the 5,000 characters in ERR-8
    expect(ack.length).toBeLessThan(500);
  });

  it.each([
    ['ORC-1', '103', (t: string, long: string) => t.replace('\rORC|NW|', `\rORC|${long}|`)],
    ['OBR-4', '103', (t: string, long: string) => t.replace('|CTTHX^', `|${long}^`)],
    [
      'ORC-7.6',
      undefined,
      (t: string, long: string) => t.replace('|||||||20240611', `|||||^^^^^${long}||20240611`),
    ],
  ])(
    'a refusal or warning about %s quotes the code by its first 20 characters',
    async (_, code, edit) => {
      const long = 'Q'.repeat(3000);
      const text = edit(orm(`ACKB-Q-${_}`, 'RIS', '').replace('|2.5.1|', '|2.8|'), long);
      expect(text).toContain(long);
      const ack = await exchange(Buffer.from(text));
      const err = parseHl7(ack).segment('ERR')!;
      if (code) expect(err.value(3)).toBe(code);
      expect(err.value(8)).toContain(`${'Q'.repeat(20)}…`);
      // before: the 3,000 characters in ERR-8
      expect(ack.length).toBeLessThan(600);
    },
  );

  it('a Polish RIS writing Windows-1250 under 8859/2: read as its code page, its name back in its own bytes, no C1 control code stored', async () => {
    // Ś is 0x8C in Windows-1250, a C1 control code in ISO 8859-2 (where it is 0xA6); ą is 0xB9
    // (š in 8859-2). Before: the facility came back with U+008C read as 8859-2, and the
    // patient was stored as `\u008Cwi\u0161tek`.
    const text = orm('ACKB-1250', 'RIS', '8859/2')
      .replace('|KLINIKUM|AI|', '|SZPITAL ŚLĄSKI|AI|')
      .replace('Jäger^Björn', 'Świątek^Józef');
    const cp1250: Record<string, number> = { Ś: 0x8c, Ą: 0xa5, ą: 0xb9, ó: 0xf3 };
    const bytes = Buffer.from([...text].map((c) => cp1250[c] ?? c.charCodeAt(0)));
    const ack = await exchange(bytes);
    expect(declaredBy(ack)).toBe('8859/2');
    // the sender's own bytes for its facility
    expect(ack.includes(Buffer.from([0x8c, 0x4c, 0xa5, 0x53, 0x4b, 0x49]))).toBe(true);
    expect(parseHl7(ack).get('MSH-6')).toBe('SZPITAL ŚLĄSKI');
    const order = await h.db.query<{ name: unknown; quirks: Array<{ code: string }> }>(
      `SELECT o.request->'patient'->'name' AS name, m.quirks
         FROM orders o JOIN inbound_messages m ON m.id = o.inbound_message_id
        WHERE o.placer_order_number = 'PL-ACKB-1250'`,
    );
    expect(order.rows[0]!.name).toEqual({ family: 'Świątek', given: ['Józef'] });
    expect(order.rows[0]!.quirks).toContainEqual(
      expect.objectContaining({ code: 'windows-code-page-bytes' }),
    );
  });

  it('a sender whose header is ASCII is answered as before: its MSH-18, or none', async () => {
    for (const charset of ['', 'UNICODE UTF-8', '8859/1']) {
      const ack = await exchange(Buffer.from(orm(`ACKB-ASCII-${charset.length}`, 'RIS', charset)));
      expect(declaredBy(ack)).toBe(charset);
      expect(validForItsCharset(ack)).toBe(true);
    }
  });
});
