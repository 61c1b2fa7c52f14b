import { randomBytes } from 'node:crypto';
import { parseHl7 } from '../../src/hl7';
import { ackSummary, hl7Fixture } from '../helpers/hl7-fixtures';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';

jest.setTimeout(90_000);

/**
 * Which order, and which patient, a message means when real senders name them: a placer order
 * number is an EI (v2.5.1 2A.3.24: entity identifier ^ namespace ID ^ universal ID ^ type),
 * unique only within its placer application; an interface engine forwards the orders of several
 * placer applications under one MSH-3/MSH-4. A patient has several identifiers (PID-3
 * repetitions), and a merge (ADT^A40) retires one of them. Over the real MLLP front door into
 * PostgreSQL; each case was answered or stored wrongly before.
 */
describe('HL7 order and patient identity over MLLP (real adapter, real socket, real PostgreSQL)', () => {
  let h: MllpHarness;

  beforeAll(async () => {
    h = await startMllpHarness();
  });
  afterAll(async () => {
    await h?.close();
  });

  /** A fixture with text replaced (the fixtures edited here are ASCII where edited). */
  const edited = (raw: Buffer, pairs: [string, string][]): Buffer => {
    let text = raw.toString('latin1');
    for (const [from, to] of pairs) {
      if (!text.includes(from)) throw new Error(`${from} not in the fixture`);
      text = text.split(from).join(to);
    }
    return Buffer.from(text, 'latin1');
  };
  const ordersUnder = async (placer: string) =>
    (
      await h.db.query(
        `SELECT id, state, accession_number, cancel_requested_at, request FROM orders
          WHERE placer_order_number = $1 ORDER BY created_at`,
        [placer],
      )
    ).rows;

  it('the same placer number from two placer applications (ORC-2.2) behind one interface engine is two orders; a cancel names its own', async () => {
    // An integration engine (MSH-3 HUBENGINE) forwards the ambulatory EHR's and the cardiology
    // system's orders; both number their orders from 7001 upward, and the EI namespace (ORC-2.2,
    // OBR-2.2) says whose number it is. Same patient: a chest CT from the EHR, later a chest
    // X-ray from cardiology. Before: the second was answered AA as "already known"
    // (order.duplicate) and never ordered: the X-ray was never analysed.
    const order = (control: string, placer: string, accession: string, procedure: string) =>
      edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
        ['|RADIS1|IHEDEMO|', '|HUBENGINE|IHEDEMO|'],
        ['MSGID20240318144217', control],
        ['PLC-100234^RADIS1', placer],
        ['FIL-55012^DSS_OF', ''],
        ['ACC-20240318-0042', accession],
        ['24627-2^CT Chest^LN', procedure],
      ]);
    const ehr = order('NS-1', '7001^AMB_EHR', 'ACC-NS-1', '24627-2^CT Chest^LN');
    const cardio = order('NS-2', '7001^CARDIO', 'ACC-NS-2', '36643-5^XR Chest 2 Views^LN');
    expect(ackSummary(await h.mllp.send(ehr))).toMatchObject({ code: 'AA', errors: [] });
    expect(ackSummary(await h.mllp.send(cardio))).toMatchObject({ code: 'AA', errors: [] });
    const both = await ordersUnder('7001');
    expect(both.map((o) => [o.accession_number, o.request.placerOrderNumber])).toEqual([
      ['ACC-NS-1', { value: '7001', system: 'AMB_EHR' }],
      ['ACC-NS-2', { value: '7001', system: 'CARDIO' }],
    ]);

    // The EHR's own resend under a new MSH-10 is still its order (no third one).
    expect(
      ackSummary(
        await h.mllp.send(order('NS-3', '7001^AMB_EHR', 'ACC-NS-1', '24627-2^CT Chest^LN')),
      ).code,
    ).toBe('AA');
    expect(await ordersUnder('7001')).toHaveLength(2);

    // The EHR cancels its CT: the CT is cancelled, cardiology's X-ray (the newer order under
    // 7001) is left alone. Before: the newest order under the number was the one cancelled.
    const cancel = edited(hl7Fixture('orm-o01-v251-cancel-ca'), [
      ['|RADIS1|IHEDEMO|', '|HUBENGINE|IHEDEMO|'],
      ['MSGID20240318163005', 'NS-CA-1'],
      ['PLC-100234^RADIS1', '7001^AMB_EHR'],
      ['FIL-55012^DSS_OF', ''],
      ['ACC-20240318-0042', 'ACC-NS-1'],
    ]);
    const answer = parseHl7(await h.mllp.send(cancel));
    expect(answer.get('MSA-1')).toBe('AA');
    expect(answer.get('ORC-1')).toBe('CR');
    const after = await ordersUnder('7001');
    expect(after.map((o) => [o.accession_number, o.cancel_requested_at !== null])).toEqual([
      ['ACC-NS-1', true],
      ['ACC-NS-2', false],
    ]);
  });

  it('two placer applications named by their OIDs alone (MSH-3 `^<oid>^ISO`, IHE style) are two senders: the same MSH-10 and placer number from each are two messages, two orders, and a cancel names its own', async () => {
    // Two hospital RIS instances behind a regional hub, each naming itself and its facility
    // by universal ID only (HD namespace empty), both numbering messages and orders from 1.
    // Before: both were the sender `null` (the namespace was read alone): the second's first
    // order was refused AR 205 as a reuse of the first's MSH-10, and its cancel of order 1
    // would have cancelled the other hospital's order 1.
    const order = (app: string, control: string, accession: string) =>
      edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
        ['|RADIS1|IHEDEMO|', `|^${app}^ISO|^2.16.840.1.113883.19.5^ISO|`],
        ['MSGID20240318144217', control],
        ['PLC-100234^RADIS1', 'OID-1'],
        ['FIL-55012^DSS_OF', ''],
        ['ACC-20240318-0042', accession],
      ]);
    const a = order('1.2.840.99.1', 'OID-MSG-1', 'ACC-OID-A');
    const b = order('1.2.840.99.2', 'OID-MSG-1', 'ACC-OID-B');
    expect(ackSummary(await h.mllp.send(a))).toMatchObject({ code: 'AA', errors: [] });
    expect(ackSummary(await h.mllp.send(b))).toMatchObject({ code: 'AA', errors: [] });
    const both = await ordersUnder('OID-1');
    expect(both.map((o) => o.accession_number)).toEqual(['ACC-OID-A', 'ACC-OID-B']);

    // The second hospital cancels its order 1: the first hospital's stays.
    const cancel = edited(hl7Fixture('orm-o01-v251-cancel-ca'), [
      ['|RADIS1|IHEDEMO|', '|^1.2.840.99.2^ISO|^2.16.840.1.113883.19.5^ISO|'],
      ['MSGID20240318163005', 'OID-MSG-2'],
      ['PLC-100234^RADIS1', 'OID-1'],
      ['FIL-55012^DSS_OF', ''],
      ['ACC-20240318-0042', 'ACC-OID-B'],
    ]);
    expect(parseHl7(await h.mllp.send(cancel)).get('ORC-1')).toBe('CR');
    const after = await ordersUnder('OID-1');
    expect(after.map((o) => [o.accession_number, o.cancel_requested_at !== null])).toEqual([
      ['ACC-OID-A', false],
      ['ACC-OID-B', true],
    ]);
  });

  it('an identifier over its bound (placer ORC-2/OBR-2, filler ORC-3, accession OBR-18 over 199 characters, EI.1/ST in v2.7) is AE 102 naming the field, nothing ordered; at 199 it is taken, an accession over 16 (DICOM SH) with a quirk', async () => {
    const long = (n: number, seed: string) => `${seed}-`.padEnd(n, '7');
    const order = (control: string, pairs: [string, string][]) =>
      edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [['MSGID20240318144217', control], ...pairs]);
    const placer5000 = long(5000, 'PLC-BND');
    const cases: Array<[string, [string, string][], RegExp]> = [
      ['placer 5,000', [['PLC-100234', placer5000]], /^ORC\^1\^2\^102&/],
      [
        'filler 200',
        [
          ['PLC-100234', 'PLC-BND-F'],
          ['FIL-55012', long(200, 'FIL')],
        ],
        /^ORC\^1\^3\^102&/,
      ],
      [
        'accession 200',
        [
          ['PLC-100234', 'PLC-BND-A'],
          ['ACC-20240318-0042', long(200, 'ACC')],
        ],
        /^OBR\^1\^18\^102&/,
      ],
    ];
    for (const [what, pairs, err] of cases) {
      const reply = await h.mllp.send(order(`BND-${what.length}-${what[0]}`, pairs));
      const ack = ackSummary(reply);
      expect({ what, code: ack.code }).toEqual({ what, code: 'AE' });
      expect(ack.errors).toEqual([expect.stringMatching(err)]);
      // v2.3.1: the text travels in MSA-3
      expect(parseHl7(reply).get('MSA-3')).toMatch(/more than the 199/);
    }
    for (const placer of [placer5000, 'PLC-BND-F', 'PLC-BND-A']) {
      expect(await ordersUnder(placer)).toEqual([]);
    }
    const refused = await h.db.query(
      `SELECT outcome FROM inbound_messages WHERE message_control_id = 'BND-12-p'`,
    );
    expect(refused.rows).toEqual([{ outcome: 'rejected' }]);

    // At the bound: taken. The fixture's accession ACC-20240318-0042 is 17 characters, more
    // than a DICOM Accession Number (SH) holds: taken, with a quirk saying a study may never match.
    const placer199 = long(199, 'PLC-OK');
    const ok = ackSummary(await h.mllp.send(order('BND-OK', [['PLC-100234', placer199]])));
    expect(ok).toMatchObject({ code: 'AA', errors: [] });
    expect(await ordersUnder(placer199)).toHaveLength(1);
    const [message] = (
      await h.db.query<{ quirks: Array<{ code: string; detail: string }> }>(
        `SELECT quirks FROM inbound_messages WHERE message_control_id = 'BND-OK'`,
      )
    ).rows;
    expect(message!.quirks).toContainEqual({
      code: 'accession-longer-than-dicom',
      detail: expect.stringMatching(/OBR-18.*17 characters.*16/),
    });
  });

  it('a patient identifier over 199 characters (PID-3 CX.1, random, more than an index row holds) is AE 102 at PID-3 and kept; before, AR 207 "resend later" and nothing kept, for ever', async () => {
    const mrn = randomBytes(6000).toString('base64').replace(/[+/=]/g, 'x');
    const nw = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'LONG-PID-NW'],
      ['PAT-4711^^^HOSPA^MR', `${mrn}^^^HOSPA^MR`],
      ['PLC-100234', 'PLC-LONG-PID'],
    ]);
    const reply = await h.mllp.send(nw);
    expect(ackSummary(reply)).toMatchObject({
      code: 'AE',
      errors: [expect.stringMatching(/^PID\^1\^3\^102&/)],
    });
    // v2.3.1 MSA-3 (80): the advice first, then where and how long (the sentence is longer)
    expect(parseHl7(reply).get('MSA-3')).toBe(
      'Send the number it is known by: PID-3.1 is 8000 characters, more than the 199',
    );
    expect(await ordersUnder('PLC-LONG-PID')).toEqual([]);
    const kept = await h.db.query(
      `SELECT outcome FROM inbound_messages WHERE message_control_id = 'LONG-PID-NW'`,
    );
    expect(kept.rows).toEqual([{ outcome: 'rejected' }]);
    // An ADT^A08 naming the patient so: refused the same way, no order touched.
    const a08 = edited(hl7Fixture('adt-a08-v251-update'), [
      ['PAT-4711^^^HOSPA^MR', `${mrn}^^^HOSPA^MR`],
    ]);
    expect(ackSummary(await h.mllp.send(a08))).toMatchObject({
      code: 'AE',
      errors: [expect.stringMatching(/PID\^1\^3\^1\|102\^Data type error/)],
    });
  });

  it("an ADT^A40 replaces only the merged number (MRG-1) with the surviving one: the order keeps the patient's other identifiers", async () => {
    // A network RIS orders for a patient known by HOSPA's record number PAT-9902, the partner
    // clinic's number K-88120 (CLINB) and the SSN. HOSPA's MPI then merges PAT-9902 into PAT-4711
    // (ADT^A40, v2.5.1 §3.3.40: MRG-1 the retired identifier, PID-3 the surviving one); its PID-3
    // knows only HOSPA's numbers. Before: the order's identifiers became PID-3 alone, CLINB's
    // number and the SSN were gone, and what we send back (the upstream's patient, our DICOM SR) knew only HOSPA's number.
    const order = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'MRG-KEEP-NW'],
      ['PLC-100234', 'PLC-MRG-KEEP'],
      ['FIL-55012', 'FIL-MRG-KEEP'],
      ['ACC-20240318-0042', 'ACC-MRG-KEEP'],
      [
        'PAT-4711^^^HOSPA^MR~998877665^^^SSA^SS',
        'PAT-9902^^^HOSPA^MR~K-88120^^^CLINB^MR~998877665^^^SSA^SS',
      ],
    ]);
    expect(ackSummary(await h.mllp.send(order)).code).toBe('AA');
    const a40 = edited(hl7Fixture('adt-a40-v251-merge'), [['MPI-20240320-000112', 'MRG-KEEP-A40']]);
    expect(ackSummary(await h.mllp.send(a40))).toMatchObject({ code: 'AA', errors: [] });
    const [merged] = await ordersUnder('PLC-MRG-KEEP');
    expect(merged.request.patient.identifiers).toEqual([
      { value: 'PAT-4711', system: 'HOSPA', type: 'MR' },
      { value: 'K-88120', system: 'CLINB', type: 'MR' },
      { value: '998877665', system: 'SSA', type: 'SS' },
    ]);
    expect(merged.request.patient.name).toMatchObject({ family: 'SCHMIDT-BERGER' });
    const row = await h.db.query(`SELECT patient_id FROM orders WHERE id = $1`, [merged.id]);
    expect(row.rows[0].patient_id).toBe('PAT-4711');

    // The surviving patient's cancel (PID-3 PAT-4711) names this order.
    const cancel = edited(hl7Fixture('orm-o01-v251-cancel-ca'), [
      ['MSGID20240318163005', 'MRG-KEEP-CA'],
      ['PLC-100234', 'PLC-MRG-KEEP'],
      ['FIL-55012', 'FIL-MRG-KEEP'],
      ['ACC-20240318-0042', 'ACC-MRG-KEEP'],
    ]);
    expect(parseHl7(await h.mllp.send(cancel)).get('ORC-1')).toBe('CR');
  });

  it('after a cancel (CA) the orderer reorders under the same placer number: a new order, not "already known"; an XO of the cancelled order is UX', async () => {
    // The RIS cancels a CT and orders it again under the same placer number (docs/hl7.md tells
    // a RIS to cancel and order again to change the procedure of a running order; many reuse
    // the number). Until the cancel job has ended the order upstream it is still open, its
    // cancel requested. Before: the new NW was answered AA as already known (order.duplicate)
    // and never ordered, and an XO in that window was answered XR and applied to the order
    // being cancelled.
    const order = (control: string, accession: string) =>
      edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
        ['MSGID20240318144217', control],
        ['PLC-100234', 'PLC-REORDER'],
        ['FIL-55012^DSS_OF', ''],
        ['ACC-20240318-0042', accession],
      ]);
    expect(ackSummary(await h.mllp.send(order('REORDER-NW-1', 'ACC-REORDER-1'))).code).toBe('AA');
    const cancel = edited(hl7Fixture('orm-o01-v251-cancel-ca'), [
      ['MSGID20240318163005', 'REORDER-CA'],
      ['PLC-100234', 'PLC-REORDER'],
      ['FIL-55012^DSS_OF', ''],
      ['ACC-20240318-0042', 'ACC-REORDER-1'],
    ]);
    expect(parseHl7(await h.mllp.send(cancel)).get('ORC-1')).toBe('CR');

    const change = edited(hl7Fixture('orm-o01-v251-change-xo'), [
      ['MSGID20240318152210', 'REORDER-XO'],
      ['PLC-100234', 'PLC-REORDER'],
      ['FIL-55012^DSS_OF', ''],
      ['ACC-20240318-0042', 'ACC-REORDER-1'],
    ]);
    const changed = parseHl7(await h.mllp.send(change));
    expect([changed.get('MSA-1'), changed.get('ORC-1')]).toEqual(['AA', 'UX']);
    const [cancelled] = await ordersUnder('PLC-REORDER');
    expect(cancelled.request.priority).not.toBe('stat');

    expect(ackSummary(await h.mllp.send(order('REORDER-NW-2', 'ACC-REORDER-2'))).code).toBe('AA');
    const orders = await ordersUnder('PLC-REORDER');
    expect(orders.map((o) => [o.accession_number, o.cancel_requested_at !== null])).toEqual([
      ['ACC-REORDER-1', true],
      ['ACC-REORDER-2', false],
    ]);
  });

  it('a cancel (CA), a discontinue (DC) or a change (XO) whose placer number holds a control character is AE 102 at ORC-2, as the new order (NW) with it is; an order stored before that rule is still cancelled by it', async () => {
    // A barcode scanner's TAB or a BEL an engine let through, sent escaped (`\X09\`). Before,
    // the NW was AE 102 at ORC-2 but the CA with the same number "unknown order" (AE 204 at
    // ORC-2): the RIS was told to look for an order, not that its number can name none.
    const message = (control: string, orc1: string, placer: string): Buffer => {
      const fixture = orc1 === 'NW' ? 'orm-o01-v231-ihe-swf-zds' : 'orm-o01-v251-cancel-ca';
      const id = orc1 === 'NW' ? 'MSGID20240318144217' : 'MSGID20240318163005';
      return edited(hl7Fixture(fixture), [
        [id, control],
        ['PLC-100234', placer],
        ['FIL-55012^DSS_OF', ''],
        [orc1 === 'NW' ? 'ORC|NW|' : 'ORC|CA|', `ORC|${orc1}|`],
      ]);
    };
    for (const orc1 of ['NW', 'CA', 'DC', 'XO']) {
      for (const escaped of ['\\X09\\', '\\X07\\']) {
        const reply = await h.mllp.send(
          message(`CTRL-${orc1}-${escaped.slice(2, 4)}`, orc1, `PLC-CTRL${escaped}`),
        );
        const ack = ackSummary(reply);
        expect({ orc1, escaped, code: ack.code }).toEqual({ orc1, escaped, code: 'AE' });
        expect({ orc1, escaped, errors: ack.errors }).toEqual({
          orc1,
          escaped,
          // the NW fixture is v2.3.1 (ERR-1), the cancel v2.5.1 (ERR-2, ERR-3)
          errors: [expect.stringMatching(/^(ORC\^1\^2\^102&|\|ORC\^1\^2\^1\|102\^)/)],
        });
      }
    }
    // An order stored while such numbers were taken (a TAB was kept as sent): its cancel finds
    // it and cancels it (CR)
    expect(ackSummary(await h.mllp.send(message('CTRL-OLD-NW', 'NW', 'PLC-CTRL-OLD'))).code).toBe(
      'AA',
    );
    await h.db.query(
      `UPDATE orders SET placer_order_number = E'PLC-CTRL-OLD\\t',
              request = jsonb_set(request, '{placerOrderNumber,value}', to_jsonb(E'PLC-CTRL-OLD\\t'::text))
        WHERE placer_order_number = 'PLC-CTRL-OLD'`,
    );
    const cancel = parseHl7(await h.mllp.send(message('CTRL-OLD-CA', 'CA', 'PLC-CTRL-OLD\\X09\\')));
    expect(cancel.get('MSA-1')).toBe('AA');
    expect(cancel.segmentsById('ORC').map((o) => o.value(1))).toEqual(['CR']);
    expect((await ordersUnder('PLC-CTRL-OLD\t'))[0]?.cancel_requested_at).not.toBeNull();
  });

  it('a cancel (CA) and the reorder (NW) under the same placer number in one message: CR for the old order, OK for a new one', async () => {
    // The RIS sends the cancel and the new order as two ORC groups of one ORM^O01 (HL7 v2.5.1
    // §4.4.1: one message, several orders). Before: the NW was decided against the order as
    // it stood before the message, not yet cancelled: with another accession it was AE 205
    // and the cancel was refused with it; with the same content it was ORC OK "already known"
    // while the only order under the number was being cancelled, the reorder lost.
    expect(
      ackSummary(
        await h.mllp.send(
          edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
            ['MSGID20240318144217', 'ONEMSG-NW'],
            ['PLC-100234', 'PLC-ONEMSG'],
            ['FIL-55012^DSS_OF', ''],
            ['ACC-20240318-0042', 'ACC-ONEMSG-1'],
          ]),
        ),
      ).code,
    ).toBe('AA');
    const reorder = (control: string, accession: string): Buffer => {
      const cancel = edited(hl7Fixture('orm-o01-v251-cancel-ca'), [
        ['MSGID20240318163005', control],
        ['PLC-100234', 'PLC-ONEMSG'],
        ['FIL-55012^DSS_OF', ''],
        ['ACC-20240318-0042', 'ACC-ONEMSG-1'],
      ]).toString('latin1');
      const order = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
        ['PLC-100234', 'PLC-ONEMSG'],
        ['FIL-55012^DSS_OF', ''],
        ['ACC-20240318-0042', accession],
      ]).toString('latin1');
      const group = order.slice(order.indexOf('ORC|'), order.indexOf('ZDS|'));
      return Buffer.from(`${cancel}${group}`, 'latin1');
    };
    const reply = parseHl7(await h.mllp.send(reorder('ONEMSG-CA-NW', 'ACC-ONEMSG-2')));
    expect(reply.get('MSA-1')).toBe('AA');
    expect(reply.segmentsById('ORC').map((o) => o.value(1))).toEqual(['CR', 'OK']);
    const orders = await ordersUnder('PLC-ONEMSG');
    expect(orders.map((o) => [o.accession_number, o.cancel_requested_at !== null])).toEqual([
      ['ACC-ONEMSG-1', true],
      ['ACC-ONEMSG-2', false],
    ]);
    // The same again for the new order, this time its content unchanged: a third order, not
    // "already known" for the one being cancelled.
    const again = parseHl7(await h.mllp.send(reorder('ONEMSG-CA-NW-2', 'ACC-ONEMSG-2')));
    expect(again.segmentsById('ORC').map((o) => o.value(1))).toEqual(['CR', 'OK']);
    const after = await ordersUnder('PLC-ONEMSG');
    expect(after.map((o) => [o.accession_number, o.cancel_requested_at !== null])).toEqual([
      ['ACC-ONEMSG-1', true],
      ['ACC-ONEMSG-2', true],
      ['ACC-ONEMSG-2', false],
    ]);
  });

  it('a new order (NW) and its cancel (CA) in one message: OK and CR, the order made and its cancel requested; a NW after them is a new order; an XO after a NW changes it (XR)', async () => {
    // The groups of one message are judged in order (HL7 v2.5.1 §4.4.1), as the same groups in
    // successive messages would be. Before: the CA (or XO) was looked for among the orders
    // stored before the message, found none, and the whole message was AE 204 "unknown order",
    // the NW with it, though the RIS had written the order and its cancel in that order.
    const message = (
      control: string,
      placer: string,
      groups: Array<['NW' | 'CA' | 'XO', string]>,
    ) => {
      const nw = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
        ['MSGID20240318144217', control],
        ['PLC-100234', placer],
        ['FIL-55012^DSS_OF', ''],
      ]).toString('latin1');
      const groupOf = (control: 'NW' | 'CA' | 'XO', accession: string) => {
        const fixture = {
          NW: 'orm-o01-v231-ihe-swf-zds',
          CA: 'orm-o01-v251-cancel-ca',
          XO: 'orm-o01-v251-change-xo',
        }[control];
        const text = edited(hl7Fixture(fixture), [
          ['PLC-100234', placer],
          ['FIL-55012^DSS_OF', ''],
          ['ACC-20240318-0042', accession],
        ]).toString('latin1');
        return text.slice(text.indexOf('ORC|'));
      };
      const head = nw.slice(0, nw.indexOf('ORC|'));
      return Buffer.from(head + groups.map(([c, acc]) => groupOf(c, acc)).join(''), 'latin1');
    };
    const controls = (reply: Buffer) =>
      parseHl7(reply)
        .segmentsById('ORC')
        .map((o) => o.value(1));

    const made = await h.mllp.send(
      message('NWCA-1', 'PLC-NWCA', [
        ['NW', 'ACC-NWCA-1'],
        ['CA', 'ACC-NWCA-1'],
      ]),
    );
    expect(ackSummary(made)).toMatchObject({ code: 'AA', errors: [] });
    expect(controls(made)).toEqual(['OK', 'CR']);
    const orders = await ordersUnder('PLC-NWCA');
    expect(orders.map((o) => [o.accession_number, o.cancel_requested_at !== null])).toEqual([
      ['ACC-NWCA-1', true],
    ]);
    const timeline = await h.db.query(`SELECT kind FROM audit_events WHERE order_id = $1`, [
      orders[0].id,
    ]);
    expect(timeline.rows.map((r) => r.kind)).toContain('order.cancel-requested');

    const remade = await h.mllp.send(
      message('NWCA-2', 'PLC-NWCA2', [
        ['NW', 'ACC-NWCA-2'],
        ['CA', 'ACC-NWCA-2'],
        ['NW', 'ACC-NWCA-3'],
      ]),
    );
    expect(controls(remade)).toEqual(['OK', 'CR', 'OK']);
    // made in one transaction (one created_at): by accession
    const both = (await ordersUnder('PLC-NWCA2'))
      .map((o) => [o.accession_number, o.cancel_requested_at !== null])
      .sort();
    expect(both).toEqual([
      ['ACC-NWCA-2', true],
      ['ACC-NWCA-3', false],
    ]);

    const changed = await h.mllp.send(
      message('NWXO-1', 'PLC-NWXO', [
        ['NW', 'ACC-NWXO-1'],
        ['XO', 'ACC-NWXO-1'],
      ]),
    );
    expect(controls(changed)).toEqual(['OK', 'XR']);
    const [order] = await ordersUnder('PLC-NWXO');
    // the XO's ORC-7 priority S (stat) over the NW's R
    expect(order.request.priority).toBe('stat');
  });

  it('a placer number whose namespace is longer than an EI holds: the ORR answers its cancel by the number alone', async () => {
    // ORC-2.2 (IS, 20) of 3,000 characters: taken (the number is what names the order), but
    // written back it made an ORC-2 no EI holds. Before, the ORR's ORC-2 carried all of it.
    const placer = `PLC-LONGNS^${'N'.repeat(3000)}^1.2.3^ISO`;
    const message = (control: string, orc1: string) =>
      edited(hl7Fixture(orc1 === 'NW' ? 'orm-o01-v231-ihe-swf-zds' : 'orm-o01-v251-cancel-ca'), [
        [orc1 === 'NW' ? 'MSGID20240318144217' : 'MSGID20240318163005', control],
        ['PLC-100234^RADIS1', placer],
        ['FIL-55012^DSS_OF', ''],
      ]);
    expect(ackSummary(await h.mllp.send(message('LONGNS-NW', 'NW'))).code).toBe('AA');
    const reply = await h.mllp.send(message('LONGNS-CA', 'CA'));
    const orr = parseHl7(reply);
    expect(orr.segmentsById('ORC').map((o) => o.rawField(1) + '|' + o.rawField(2))).toEqual([
      'CR|PLC-LONGNS',
    ]);
    expect(reply.length).toBeLessThan(500);
  });

  it("an XO found by its filler number that names another placer number changes the order, never its numbers: later messages under the order's own number still find it", async () => {
    // The RIS (filler) knows the order as FIL-KEEP; the placer's XO carries the filler number and,
    // after a re-keying in the placer's system, another ORC-2. A placer order number is the
    // order's permanent key (v2.5.1 §4.5.1.2). Before: the stored request took the XO's placer
    // number while the order stayed indexed under the first one (what the audit log, FHIR and
    // the order's key said disagreed), and the order's own number no longer named it.
    const order = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'KEYS-NW'],
      ['PLC-100234', 'PLC-KEEP'],
      ['FIL-55012', 'FIL-KEEP'],
      ['ACC-20240318-0042', 'ACC-KEEP'],
    ]);
    expect(ackSummary(await h.mllp.send(order)).code).toBe('AA');
    const change = edited(hl7Fixture('orm-o01-v251-change-xo'), [
      ['MSGID20240318152210', 'KEYS-XO'],
      ['PLC-100234', 'PLC-REKEYED'],
      ['FIL-55012', 'FIL-KEEP'],
      ['ACC-20240318-0042', 'ACC-KEEP'],
    ]);
    expect(parseHl7(await h.mllp.send(change)).get('ORC-1')).toBe('XR');
    const [changed] = await ordersUnder('PLC-KEEP');
    expect(changed.request).toMatchObject({
      priority: 'stat',
      placerOrderNumber: { value: 'PLC-KEEP', system: 'RADIS1' },
      fillerOrderNumber: { value: 'FIL-KEEP', system: 'DSS_OF' },
    });
    const cancel = edited(hl7Fixture('orm-o01-v251-cancel-ca'), [
      ['MSGID20240318163005', 'KEYS-CA'],
      ['PLC-100234', 'PLC-KEEP'],
      ['FIL-55012^DSS_OF', ''],
      ['ACC-20240318-0042', 'ACC-KEEP'],
    ]);
    expect(parseHl7(await h.mllp.send(cancel)).get('ORC-1')).toBe('CR');
  });

  it('an order message with a second PID (ORM_O01/OMI_O23 have one patient) is AE 100 at PID[2], nothing ordered under either patient', async () => {
    // An interface engine that joins two RIS messages and drops the second MSH (or a sender
    // that writes the mother's PID before the newborn's) leaves two PID segments before the
    // order. Which patient the ORC/OBR belongs to is a guess. Before: AA, the order filed
    // under the first PID, whatever the second said (the ORC followed the second patient).
    const order = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'TWO-PID'],
      ['PLC-100234', 'PLC-TWO-PID'],
      ['ACC-20240318-0042', 'ACC-TWO-PID'],
      ['\rORC|NW|', '\rPID|2||PAT-9902^^^HOSPA^MR||ROE^JANE||19800515|F\rORC|NW|'],
    ]);
    const reply = await h.mllp.send(order);
    expect(ackSummary(reply)).toMatchObject({ code: 'AE', controlIdEchoed: 'TWO-PID' });
    // v2.3.1: the ERR-1 layout (segment^sequence^field^code&text)
    expect(ackSummary(reply).errors.join(' ')).toMatch(/^PID\^2\^1\^100/);
    expect(reply.toString('latin1')).not.toMatch(/PAT-9902|PAT-4711/);
    expect(await ordersUnder('PLC-TWO-PID')).toEqual([]);
  });

  it("a change listing the patient's record numbers in another order (PID-3 repetitions) is the same patient's: XR, not AE 204", async () => {
    // A network RIS knows the patient by HOSPA's and CLINB's record numbers. Its NW lists
    // HOSPA's first; after the patient's record was updated, its XO lists CLINB's first (the
    // order of PID-3 repetitions carries no meaning, v2.5.1 §3.4.2.3). The order is known by
    // the first record number of its NW. Before: the XO's first record number differed, the
    // change was read as naming another patient, refused AE 204 and the order never changed.
    const order = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'REPS-NW'],
      ['PLC-100234', 'PLC-REPS'],
      ['FIL-55012', 'FIL-REPS'],
      ['ACC-20240318-0042', 'ACC-REPS'],
      ['PAT-4711^^^HOSPA^MR~998877665^^^SSA^SS', 'PAT-4711^^^HOSPA^MR~K-88120^^^CLINB^MR'],
    ]);
    expect(ackSummary(await h.mllp.send(order)).code).toBe('AA');
    const change = edited(hl7Fixture('orm-o01-v251-change-xo'), [
      ['MSGID20240318152210', 'REPS-XO'],
      ['PLC-100234', 'PLC-REPS'],
      ['FIL-55012', 'FIL-REPS'],
      ['ACC-20240318-0042', 'ACC-REPS'],
      ['PID|1||PAT-4711^^^HOSPA^MR|', 'PID|1||K-88120^^^CLINB^MR~PAT-4711^^^HOSPA^MR|'],
    ]);
    const answer = parseHl7(await h.mllp.send(change));
    expect([answer.get('MSA-1'), answer.get('ORC-1')]).toEqual(['AA', 'XR']);
    const [changed] = await ordersUnder('PLC-REPS');
    expect(changed.request.priority).toBe('stat');
    // …and the order is still known by its own record number (identifiers change by ADT only).
    expect(changed.request.patient.identifiers[0]).toEqual({
      value: 'PAT-4711',
      system: 'HOSPA',
      type: 'MR',
    });

    // A change naming only a record number the order does not hold is still refused.
    const other = edited(change, [
      ['REPS-XO', 'REPS-XO-2'],
      ['K-88120^^^CLINB^MR~PAT-4711^^^HOSPA^MR', 'K-99999^^^CLINB^MR'],
    ]);
    expect(ackSummary(await h.mllp.send(other)).code).toBe('AE');
  });

  it('walk-in orders known only by their filler number: the same number from two filler applications (ORC-3.2) is two orders, and an OC names its own', async () => {
    // A department-system hub (one MSH-3/MSH-4) relays the CT and the MR RIS; each numbers its
    // RIS-originated (walk-in) orders from W-1 upward, the EI namespace in ORC-3.2/OBR-3.2
    // says whose. Before: the MR walk-in under W-77 was answered AA as a resend of the CT's
    // (same patient) and never ordered; and the CT RIS's OC cancelled the newer, the MR's.
    const msg = (control: string, order: string, filler: string, accession: string) =>
      Buffer.from(
        [
          `MSH|^~\\&|DEPT_HUB|CITYHOSP|AI_ADAPTER|CITYHOSP|20261012120000||ORM^O01^ORM_O01|${control}|P|2.3.1`,
          'PID|1||CH-55120^^^CITYHOSP^MR||MOREAU^CLAIRE||19750412|F',
          `ORC|${order}||${filler}||${order === 'NW' ? 'SC' : 'CA'}`,
          `OBR|1||${filler}|${filler.endsWith('RIS_MR') ? '24590-2^MR Brain^LN' : '24725-4^CT Head^LN'}||||||||||||||${accession}`,
        ].join('\r') + '\r',
        'latin1',
      );
    const fillers = async () =>
      (
        await h.db.query(
          `SELECT accession_number, cancel_requested_at IS NOT NULL AS cancelled FROM orders
            WHERE filler_order_number = 'W-77' ORDER BY created_at`,
        )
      ).rows;
    expect(ackSummary(await h.mllp.send(msg('HUB-1', 'NW', 'W-77^RIS_CT', 'CT-ACC-77'))).code).toBe(
      'AA',
    );
    expect(ackSummary(await h.mllp.send(msg('HUB-2', 'NW', 'W-77^RIS_MR', 'MR-ACC-77'))).code).toBe(
      'AA',
    );
    // The CT RIS's resend is still its order.
    expect(ackSummary(await h.mllp.send(msg('HUB-3', 'NW', 'W-77^RIS_CT', 'CT-ACC-77'))).code).toBe(
      'AA',
    );
    expect(await fillers()).toEqual([
      { accession_number: 'CT-ACC-77', cancelled: false },
      { accession_number: 'MR-ACC-77', cancelled: false },
    ]);
    const oc = parseHl7(await h.mllp.send(msg('HUB-4', 'OC', 'W-77^RIS_CT', 'CT-ACC-77')));
    expect(oc.get('ORC-1')).toBe('CR');
    expect(await fillers()).toEqual([
      { accession_number: 'CT-ACC-77', cancelled: true },
      { accession_number: 'MR-ACC-77', cancelled: false },
    ]);
  });
});
