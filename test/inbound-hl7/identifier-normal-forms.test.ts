import { ackSummary, hl7Fixture } from '../helpers/hl7-fixtures';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';

jest.setTimeout(90_000);

/**
 * Identifiers with letters outside ASCII, written composed by one system and decomposed by
 * another (Unicode canonical equivalence, §3.7): a French RIS whose numbers carry `É` (the
 * IHE IPC OMI^O23 fixtures, UTF-8) sends the new order composed (U+00C9) and its cancel through
 * an engine that writes NFD (`E` + U+0301, as macOS and many pipelines do). The same order, so
 * the cancel must find it; the identifiers are kept composed (NFC), the raw message as sent.
 */
describe('identifiers in composed and decomposed form name the same order', () => {
  let h: MllpHarness;

  beforeAll(async () => {
    h = await startMllpHarness();
  });
  afterAll(async () => {
    await h?.close();
  });

  const nfc = (s: string) => s.normalize('NFC');
  const nfd = (s: string) => s.normalize('NFD');
  const edited = (name: string, pairs: [string, string][]): Buffer => {
    let text = hl7Fixture(name).toString('utf8');
    for (const [from, to] of pairs) text = text.split(from).join(to);
    return Buffer.from(text, 'utf8');
  };
  const placer = 'DP-ÉCHO-776120';
  const accession = 'A-ÉCHO-0017';
  const patient = '7800123-É';
  const filler = 'RQ-É45120';
  const message = (id: string, name: string, form: (s: string) => string) =>
    edited(name, [
      [name.endsWith('cancel') ? 'OF20250204094012-31' : 'OF20250204091533-17', id],
      ['DP-776120', form(placer)],
      ['RQ-45120^', `${form(filler)}^`],
      ['A20250204-0017', form(accession)],
      ['7800123^^^CHU_LYON', `${form(patient)}^^^CHU_LYON`],
    ]);

  it('a cancel whose placer number, accession and patient ID arrive in NFD finds the NFC order', async () => {
    const nw = message('NFC-NW-1', 'omi-o23-v251-ihe-ipc', nfc);
    expect(ackSummary(await h.mllp.send(nw))).toMatchObject({ code: 'AA', errors: [] });
    const ca = message('NFD-CA-1', 'omi-o23-v251-ihe-ipc-cancel', nfd);
    expect(ca.toString('utf8')).toContain('E\u0301');
    // Before: AE 204 at PID-3 "Not this patient's order" (or "unknown order" at ORC-2 when
    // the filler number differed as well), and the order stayed open.
    const reply = await h.mllp.send(ca);
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [] });
    // the reply echoes ORC-2 as this message wrote it (the sender's form), not the stored one
    expect(reply.toString('utf8')).toContain(`|${nfd(placer)}^OF_RIS|`);
    const rows = (
      await h.db.query(
        `SELECT placer_order_number, filler_order_number, accession_number, patient_id, cancel_requested_at FROM orders`,
      )
    ).rows;
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      placer_order_number: nfc(placer),
      filler_order_number: nfc(filler),
      accession_number: nfc(accession),
      patient_id: nfc(patient),
    });
    expect(rows[0].cancel_requested_at).not.toBeNull();
    // the raw message keeps what the sender sent
    const [raw] = (
      await h.db.query(`SELECT raw FROM inbound_messages WHERE message_control_id = 'NFD-CA-1'`)
    ).rows;
    expect(Buffer.from(raw.raw).toString('utf8')).toContain(nfd(placer));
  });

  it('a 16-character accession written NFD (20 code points) fits a DICOM SH: no quirk', async () => {
    const accession16 = 'MÜNCHEN-ÄÖÜ-123';
    expect([...nfc(accession16)]).toHaveLength(15);
    const nw = edited('omi-o23-v251-ihe-ipc', [
      ['OF20250204091533-17', 'NFD-SH-1'],
      ['DP-776120', 'DP-SH-1'],
      ['RQ-45120^', 'RQ-SH-1^'],
      ['A20250204-0017', nfd(`${accession16}4`)],
    ]);
    expect(ackSummary(await h.mllp.send(nw))).toMatchObject({ code: 'AA', errors: [] });
    const [row] = (
      await h.db.query(
        `SELECT m.quirks, o.accession_number FROM inbound_messages m JOIN orders o ON o.inbound_message_id = m.id
          WHERE m.message_control_id = 'NFD-SH-1'`,
      )
    ).rows;
    expect(row.accession_number).toBe(nfc(`${accession16}4`));
    // Before: the quirk accession-longer-than-dicom, "20 characters, more than the 16".
    expect(JSON.stringify(row.quirks)).not.toContain('accession-longer-than-dicom');
  });

  it('a new order in NFD is stored in NFC, and a resend of it in NFC is the same order', async () => {
    const other = (s: string) => s.replace('ÉCHO', 'ÉCHO-2');
    const nwD = Buffer.from(
      message('NFD-NW-2', 'omi-o23-v251-ihe-ipc', (s) => nfd(other(s))).toString('utf8'),
      'utf8',
    );
    expect(ackSummary(await h.mllp.send(nwD))).toMatchObject({ code: 'AA', errors: [] });
    const nwC = message('NFC-NW-2', 'omi-o23-v251-ihe-ipc', (s) => nfc(other(s)));
    expect(ackSummary(await h.mllp.send(nwC)).code).toBe('AA');
    const rows = (
      await h.db.query(`SELECT placer_order_number FROM orders WHERE placer_order_number LIKE $1`, [
        '%2-776120',
      ])
    ).rows;
    expect(rows).toEqual([{ placer_order_number: nfc(other(placer)) }]);
  });

  it('an ADT^A08 naming the patient in NFD updates the order made for the NFC patient', async () => {
    const utf8 = (text: string, version: string) =>
      text.replace(
        new RegExp(`\\|${version.replace(/\./g, '\\.')}\r`),
        `|${version}||||||UNICODE UTF-8\r`,
      );
    const nw = Buffer.from(
      utf8(
        hl7Fixture('orm-o01-v231-ihe-swf-zds')
          .toString('latin1')
          .split('PAT-4711')
          .join(nfc('PAT-É4711'))
          .split('PLC-100234')
          .join('PLC-NFC-A08')
          .split('MSGID20240318144217')
          .join('NFC-A08-NW'),
        '2.3.1',
      ),
      'utf8',
    );
    expect(ackSummary(await h.mllp.send(nw))).toMatchObject({ code: 'AA', errors: [] });
    const a08 = Buffer.from(
      utf8(
        hl7Fixture('adt-a08-v251-update')
          .toString('latin1')
          .split('PAT-4711')
          .join(nfd('PAT-É4711'))
          .split('ADT20240319081500-0007')
          .join('NFD-A08'),
        '2.5.1',
      ),
      'utf8',
    );
    expect(ackSummary(await h.mllp.send(a08))).toMatchObject({ code: 'AA', errors: [] });
    const [order] = (
      await h.db.query(
        `SELECT patient_id, request FROM orders WHERE placer_order_number = 'PLC-NFC-A08'`,
      )
    ).rows;
    expect(order.patient_id).toBe(nfc('PAT-É4711'));
    // Before: the A08 matched no open order (PID-3 compared code point by code point).
    expect(order.request.patient.name.family).toBe('SCHMIDT-BERGER');
  });

  it('compatibility forms are other identifiers (not NFKC): a full-width placer number cancels nothing', async () => {
    const nw = edited('omi-o23-v251-ihe-ipc', [
      ['OF20250204091533-17', 'NFKC-NW'],
      ['DP-776120', 'DP-K776120'],
      ['RQ-45120^', 'RQ-K45120^'],
      ['A20250204-0017', 'A-K0017'],
    ]);
    expect(ackSummary(await h.mllp.send(nw)).code).toBe('AA');
    // ＤＰ-Ｋ７７６１２０: full-width letters and digits (U+FF24 …), NFKC-equal to DP-K776120
    const ca = edited('omi-o23-v251-ihe-ipc-cancel', [
      ['OF20250204094012-31', 'NFKC-CA'],
      ['DP-776120', 'ＤＰ-Ｋ７７６１２０'],
      ['RQ-45120^', 'ＲＱ-Ｋ４５１２０^'],
      ['A20250204-0017', 'A-K0017'],
    ]);
    const refused = ackSummary(await h.mllp.send(ca));
    expect(refused.code).toBe('AE');
    expect(refused.errors.join('\n')).toMatch(/\|204\^Unknown key identifier/);
    const [order] = (
      await h.db.query(
        `SELECT cancel_requested_at FROM orders WHERE placer_order_number = 'DP-K776120'`,
      )
    ).rows;
    expect(order.cancel_requested_at).toBeNull();
  });
});
