import { parseHl7 } from '../../src/hl7';
import { TEST_TOKENS } from '../helpers/adapter';
import { ackSummary, hl7Fixture, withControlId } from '../helpers/hl7-fixtures';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';

jest.setTimeout(90_000);

/**
 * What an order means clinically, as RIS and EHR feeds send it (HL7 v2.3.1 to v2.5.1 chapter 4),
 * over the real MLLP front door into PostgreSQL: when the exam is to happen, why it was ordered,
 * which copies of a message are resends, and what our answer says about itself. Each case was
 * answered or stored wrongly before.
 */
describe('HL7 order semantics over MLLP (real adapter, real socket, real PostgreSQL)', () => {
  let h: MllpHarness;

  beforeAll(async () => {
    h = await startMllpHarness();
  });
  afterAll(async () => {
    await h?.close();
  });

  const requestOf = async (placer: string) =>
    (await h.db.query(`SELECT request FROM orders WHERE placer_order_number = $1`, [placer]))
      .rows[0]?.request;
  /** A fixture with text replaced (the fixtures edited here are ASCII where edited). */
  const edited = (raw: Buffer, pairs: [string, string][]): Buffer => {
    let text = raw.toString('latin1');
    for (const [from, to] of pairs) {
      if (!text.includes(from)) throw new Error(`${from} not in the fixture`);
      text = text.split(from).join(to);
    }
    return Buffer.from(text, 'latin1');
  };

  it('the requested time is the exam start (TQ1-7, ORC-7.4/OBR-27.4, OBR-6), not ORC-9, the time of the transaction', async () => {
    // IHE SWF NW: ORC-7.4 15:00 (scheduled), ORC-9 14:42:17 (entered).
    expect(ackSummary(await h.mllp.send(hl7Fixture('orm-o01-v231-ihe-swf-zds'))).code).toBe('AA');
    expect((await requestOf('PLC-100234')).requestedAt).toBe('2024-03-18T15:00:00+00:00');

    // The XO that makes it stat keeps the start 15:30 (ORC-7.4, OBR-6, OBR-27.4); its ORC-9 is
    // the minute the clerk changed it. Before: requestedAt 15:22:10, the time of the change,
    // which became OBR-7 of the ORU and the DiagnosticReport's effectiveDateTime.
    const change = await h.mllp.send(hl7Fixture('orm-o01-v251-change-xo'));
    expect(parseHl7(change).get('ORC-1')).toBe('XR');
    expect((await requestOf('PLC-100234')).requestedAt).toBe('2024-03-18T15:30:00+00:00');

    // OMI^O23: TQ1-7 10:30 is when the chest X-ray is scheduled. Before: 09:15, ORC-9.
    expect(ackSummary(await h.mllp.send(hl7Fixture('omi-o23-v251-ihe-ipc'))).code).toBe('AA');
    expect((await requestOf('DP-776120')).requestedAt).toBe('2025-02-04T10:30:00+01:00');

    // Only ORC-9 given: still the fallback, and no conflict quirk for the start it stands in for.
    const onlyOrc9 = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'MSGID20240318144299'],
      ['PLC-100234', 'PLC-100299'],
      ['ACC-20240318-0042', 'ACC-20240318-0099'],
      ['|^^^20240318150000^^R|', '|^^^^^R|'],
      ['|20240318150000|', '||'],
    ]);
    expect(ackSummary(await h.mllp.send(onlyOrc9)).code).toBe('AA');
    expect((await requestOf('PLC-100299')).requestedAt).toBe('2024-03-18T14:42:17+00:00');

    // An XO with no timing at all (it changes the priority): its ORC-9 is the time of the change,
    // never read for it. Before (and with ORC-9 a fallback for every action): 15:22:10.
    const untimed = edited(hl7Fixture('orm-o01-v251-change-xo'), [
      ['MSGID20240318152210', 'MSGID20240318152299'],
      ['PLC-100234', 'PLC-100299'],
      ['ACC-20240318-0042', 'ACC-20240318-0099'],
      ['|^^^20240318153000^^S|', '|^^^^^S|'],
      ['|20240318153000|', '||'],
      ['|^^^20240318153000^^S', '|^^^^^S'],
    ]);
    expect(parseHl7(await h.mllp.send(untimed)).get('ORC-1')).toBe('XR');
    const changed = await requestOf('PLC-100299');
    expect(changed).toMatchObject({ priority: 'stat', requestedAt: '2024-03-18T14:42:17+00:00' });
  });

  it('DG1 diagnoses of the order are the reason for the study when OBR-31 is empty', async () => {
    // Before: reasonForStudy was OBR-13's free text ("Fall at home, on apixaban"), the ICD-10
    // codes the EHR sent in DG1-3 were not read at all.
    const ack = ackSummary(await h.mllp.send(hl7Fixture('orm-o01-v231-ehr-dg1-reason')));
    expect(ack).toMatchObject({ code: 'AA', errors: [] });
    const request = await requestOf('77102345');
    expect(request.reasonForStudy).toEqual([
      { code: 'R51.9', display: 'Headache, unspecified', system: 'I10' },
      { code: 'W19.XXXA', display: 'Unspecified fall, initial encounter', system: 'I10' },
      { display: 'Long term (current) use of anticoagulants' },
    ]);
    expect(request.requestedAt).toBe('2026-10-14T09:45:00+00:00'); // ORC-7.4, not ORC-9 09:30:10
    expect(request.priority).toBe('stat');
  });

  it('a resend with MSH-7 and ORC-9 stamped anew gets the original answer; a changed patient, procedure, accession or control under that MSH-10 is AR 205', async () => {
    const original = withControlId(hl7Fixture('orm-o01-v231-ihe-obr4-alternate'), 'SEM-RESEND-1');
    const first = await h.mllp.send(original);
    expect(ackSummary(first)).toMatchObject({ code: 'AA', controlIdEchoed: 'SEM-RESEND-1' });

    // A RIS that rebuilds the message from its database: MSH-7 and ORC-9 are now.
    // Before: AR 205 "already used by this sender for a different message", so the RIS kept
    // resending a message that had been stored all along.
    const text = original.toString('latin1');
    const orc9 = parseHl7(original).get('ORC-9')!;
    const msh7 = parseHl7(original).get('MSH-7')!;
    const restamped = edited(original, [
      [`|${msh7}|`, '|20261012090501|'],
      [`|${orc9}|`, '|20261012090500|'],
    ]);
    expect(restamped.toString('latin1')).not.toBe(text);
    expect((await h.mllp.send(restamped)).equals(first)).toBe(true);

    // Anything that changes what the order is, under the same control ID: refused, kept.
    const obr = parseHl7(original).segmentsById('OBR')[0]!;
    const changes: Array<[string, [string, string]]> = [
      ['patient', ['HW-300418', 'HW-300419']],
      ['procedure', [obr.value(4, 1, 4)!, '24725-4']],
      ['accession', [parseHl7(original).get('OBR-18')!, 'RW-ACC-00000']],
      ['order control', ['ORC|NW|', 'ORC|CA|']],
      ['requested start', ['20261012090000', '20261012100000']],
    ];
    for (const [what, pair] of changes) {
      const reply = ackSummary(await h.mllp.send(edited(restamped, [pair])));
      expect({ what, code: reply.code, err: reply.errors.join(' ') }).toEqual({
        what,
        code: 'AR',
        err: expect.stringMatching(/MSH\^1\^10\^205/),
      });
    }
    const stored = await h.db.query<{ outcome: string }>(
      `SELECT outcome FROM inbound_messages WHERE message_control_id = 'SEM-RESEND-1' ORDER BY received_at`,
    );
    expect(stored.rows.map((r) => r.outcome)).toEqual([
      'accepted',
      'duplicate', // the resend, recorded as one
      ...changes.map(() => 'rejected'),
    ]);
  });

  it('an MSH-12 that is no HL7 version is answered AR 203 in a v2.5.1 ACK, never echoed', async () => {
    const send = (version: string, id: string) =>
      h.mllp.send(
        withControlId(
          edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [['|P|2.3.1', `|P|${version}`]]),
          id,
        ),
      );
    // Before: MSH-12 `3.0` and `V231` came back in our MSH-12, with the ERR in the v2.3 layout.
    for (const [version, id] of [
      ['3.0', 'SEM-VER-1'],
      ['V231', 'SEM-VER-2'],
    ]) {
      const ack = parseHl7(await send(version, id));
      expect(ack.version).toBe('2.5.1');
      expect(ack.get('MSA-1')).toBe('AR');
      expect(ack.get('MSA-2')).toBe(id);
      expect(ack.get('ERR-2')).toBe('MSH');
      expect(ack.segmentsById('ERR')[0]!.value(3)).toBe('203');
      expect(ack.get('ERR-8')).toContain(`Version ${version} not supported`);
    }
    // A real but old version (table 0104) is answered in it, without MSH-9.3 (v2.3.1+).
    const old = parseHl7(await send('2.2', 'SEM-VER-3'));
    expect(old.version).toBe('2.2');
    expect(old.msh.fields[9]).toBe('ACK^O01');
  });

  it("a change or cancel whose PID-3 names another patient is AE 204 at PID-3, and the order stays its own patient's", async () => {
    const nw = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'SEM-PAT-NW'],
      ['PLC-100234', 'PLC-PAT-1'],
      ['FIL-55012', 'FIL-PAT-1'],
      ['ACC-20240318-0042', 'ACC-PAT-1'],
    ]);
    expect(ackSummary(await h.mllp.send(nw)).code).toBe('AA');
    // The same RIS's XO for that order number, but for PAT-9902 (a mistyped or reused number).
    // Before: ORR XR "changed as requested", and the order (its study match, the upstream's
    // patient_id, the ORU's PID) moved to the other patient.
    const other: [string, string][] = [
      ['PLC-100234', 'PLC-PAT-1'],
      ['FIL-55012', 'FIL-PAT-1'],
      ['ACC-20240318-0042', 'ACC-PAT-1'],
      [
        'PAT-4711^^^HOSPA^MR||SCHMIDT^ANNA^MARIA^^^^L||19560214|F',
        'PAT-9902^^^HOSPA^MR||ROE^JANE||19800515|F',
      ],
    ];
    const xo = edited(hl7Fixture('orm-o01-v251-change-xo'), [
      ['MSGID20240318152210', 'SEM-PAT-XO'],
      ...other,
    ]);
    const xoReply = await h.mllp.send(xo);
    expect(ackSummary(xoReply)).toMatchObject({
      code: 'AE',
      errors: [expect.stringMatching(/^\|PID\^1\^3\^1\|204\^Unknown key identifier/)],
    });
    expect(xoReply.toString('latin1')).toMatch(/Not this patient's order/);
    expect(xoReply.toString('latin1')).not.toContain('PAT-4711'); // the order's patient not named
    const ca = edited(hl7Fixture('orm-o01-v251-cancel-ca'), [
      ['MSGID20240318163005', 'SEM-PAT-CA'],
      ...other,
    ]);
    expect(ackSummary(await h.mllp.send(ca)).code).toBe('AE');
    const row = (
      await h.db.query(
        `SELECT patient_id, cancel_requested_at, request FROM orders WHERE placer_order_number = 'PLC-PAT-1'`,
      )
    ).rows[0];
    expect(row).toMatchObject({ patient_id: 'PAT-4711', cancel_requested_at: null });
    expect(row.request.patient.name.family).toBe('SCHMIDT');
    expect(row.request.priority).toBe('routine');
    const kept = await h.db.query<{ outcome: string }>(
      `SELECT outcome FROM inbound_messages WHERE message_control_id IN ('SEM-PAT-XO', 'SEM-PAT-CA')`,
    );
    expect(kept.rows.map((r) => r.outcome)).toEqual(['rejected', 'rejected']);

    // The same patient's XO still applies.
    const own = edited(hl7Fixture('orm-o01-v251-change-xo'), [
      ['MSGID20240318152210', 'SEM-PAT-XO2'],
      ...other.slice(0, 3),
    ]);
    expect(parseHl7(await h.mllp.send(own)).get('ORC-1')).toBe('XR');
    expect((await requestOf('PLC-PAT-1')).priority).toBe('stat');
  });

  it("a new order (NW) under a placer number that already names another patient's order is AE 205 at ORC-2, not an AA that drops it", async () => {
    const first = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'SEM-DUP-1'],
      ['PLC-100234', 'PLC-DUP-1'],
      ['FIL-55012', 'FIL-DUP-1'],
      ['ACC-20240318-0042', 'ACC-DUP-1'],
    ]);
    expect(ackSummary(await h.mllp.send(first)).code).toBe('AA');
    // The RIS's numbering restarted (or a test system's numbers reached production): the same
    // placer number for PAT-9902's own exam. Before: AA, `order.duplicate` in the audit log,
    // and PAT-9902's order never created nor analysed.
    const second = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'SEM-DUP-2'],
      ['PLC-100234', 'PLC-DUP-1'],
      ['FIL-55012', 'FIL-DUP-2'],
      ['ACC-20240318-0042', 'ACC-DUP-2'],
      [
        'PAT-4711^^^HOSPA^MR~998877665^^^SSA^SS||SCHMIDT^ANNA^MARIA^^^^L||19560214|F',
        'PAT-9902^^^HOSPA^MR||ROE^JANE||19800515|F',
      ],
    ]);
    const reply = await h.mllp.send(second);
    expect(ackSummary(reply)).toMatchObject({
      code: 'AE',
      controlIdEchoed: 'SEM-DUP-2',
      errors: [expect.stringMatching(/^ORC\^1\^2\^205&Duplicate key identifier/)],
    });
    expect(reply.toString('latin1')).toMatch(/Duplicate placer order number/);
    expect(reply.toString('latin1')).not.toContain('PAT-4711');
    const rows = (
      await h.db.query(
        `SELECT patient_id, accession_number FROM orders WHERE placer_order_number = 'PLC-DUP-1'`,
      )
    ).rows;
    expect(rows).toEqual([{ patient_id: 'PAT-4711', accession_number: 'ACC-DUP-1' }]);
    const kept = await h.db.query<{ outcome: string }>(
      `SELECT outcome FROM inbound_messages WHERE message_control_id = 'SEM-DUP-2'`,
    );
    expect(kept.rows.map((r) => r.outcome)).toEqual(['rejected']);

    // The same patient's NW under a new MSH-10 is still the known order, answered AA.
    const resent = withControlId(first, 'SEM-DUP-3');
    expect(ackSummary(await h.mllp.send(resent)).code).toBe('AA');
    expect(
      (await h.db.query(`SELECT 1 FROM orders WHERE placer_order_number = 'PLC-DUP-1'`)).rowCount,
    ).toBe(1);
  });

  it('a new order (NW) under a known placer number of the same patient with other content (accession) is AE 205 at ORC-2, not an AA that drops the change', async () => {
    const first = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'SEM-DUPC-1'],
      ['PLC-100234', 'PLC-DUPC-1'],
      ['FIL-55012', 'FIL-DUPC-1'],
      ['ACC-20240318-0042', 'ACC-DUPC-1'],
    ]);
    expect(ackSummary(await h.mllp.send(first)).code).toBe('AA');
    // The RIS re-sends the order as NW after the exam was moved to another accession (instead
    // of XO). Before: AA "already known" and the order kept ACC-DUPC-1, so the study under
    // ACC-DUPC-2 was never matched and the change was lost without a word.
    const changed = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'SEM-DUPC-2'],
      ['PLC-100234', 'PLC-DUPC-1'],
      ['FIL-55012', 'FIL-DUPC-1'],
      ['ACC-20240318-0042', 'ACC-DUPC-2'],
    ]);
    const reply = await h.mllp.send(changed);
    expect(ackSummary(reply)).toMatchObject({
      code: 'AE',
      controlIdEchoed: 'SEM-DUPC-2',
      errors: [expect.stringMatching(/^ORC\^1\^2\^205&Duplicate key identifier/)],
    });
    // v2.3.1: MSA-3 is ST of 80, and the sentence is 199: its short form says what is wrong,
    // where, and what to do (before, the first 80 characters, which lost the advice); the
    // whole sentence is kept with the refused message for the analyst.
    expect(parseHl7(reply).get('MSA-3')).toBe(
      'Duplicate placer number (ORC/OBR group 1): change by XO, or CA and new NW',
    );
    const refused = await h.db.query<{ error: string }>(
      `SELECT error::text AS error FROM inbound_messages WHERE message_control_id = 'SEM-DUPC-2'`,
    );
    // The whole sentence, its advice included, is what the analyst reads (answerText).
    expect(refused.rows[0].error).toContain('Send a change as XO, or cancel (CA) and order again');
    const rows = (
      await h.db.query(
        `SELECT accession_number FROM orders WHERE placer_order_number = 'PLC-DUPC-1'`,
      )
    ).rows;
    expect(rows).toEqual([{ accession_number: 'ACC-DUPC-1' }]);
    // The same content under a new MSH-10 (a resend after a lost ACK) is still AA.
    expect(ackSummary(await h.mllp.send(withControlId(first, 'SEM-DUPC-3'))).code).toBe('AA');
  });

  it('a priority only in OBR-5 (v2.3 "backward compatibility" field, ORC-7/OBR-27 empty) is read, as a fallback', async () => {
    // An older RIS writes S in OBR-5 and no quantity/timing at all. Before: no priority, the
    // stat head CT processed upstream as routine.
    const stat = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'SEM-OBR5-1'],
      ['PLC-100234', 'PLC-OBR5-1'],
      ['ACC-20240318-0042', 'ACC-OBR5-1'],
      ['|^^^20240318150000^^R||20240318144217|', '|||20240318144217|'],
      ['|||^^^20240318150000^^R||||', '|||||||'],
      ['|24627-2^CT Chest^LN||20240318150000|', '|24627-2^CT Chest^LN|S|20240318150000|'],
    ]);
    expect(ackSummary(await h.mllp.send(stat)).code).toBe('AA');
    expect((await requestOf('PLC-OBR5-1')).priority).toBe('stat');
    const order = (
      await h.db.query(`SELECT id FROM orders WHERE placer_order_number = 'PLC-OBR5-1'`)
    ).rows[0];
    const lineage = (
      await h.db.query(
        `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'mapping.applied'`,
        [order.id],
      )
    ).rows[0].detail;
    expect(lineage.mappingVersion).toBe('hl7-order-mapping/1.10.0');
    expect(lineage.lineage).toContainEqual(
      expect.objectContaining({ target: 'priority', source: 'OBR-5', value: 'stat' }),
    );

    // ORC-7.6 R with OBR-5 S: ORC-7 is the priority, no conflict (OBR-5 is only a fallback).
    const both = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'SEM-OBR5-2'],
      ['PLC-100234', 'PLC-OBR5-2'],
      ['ACC-20240318-0042', 'ACC-OBR5-2'],
      ['|24627-2^CT Chest^LN||20240318150000|', '|24627-2^CT Chest^LN|S|20240318150000|'],
    ]);
    expect(ackSummary(await h.mllp.send(both))).toMatchObject({ code: 'AA', errors: [] });
    expect((await requestOf('PLC-OBR5-2')).priority).toBe('routine');
  });

  it('an XO that changes the AI products of an order the upstream already runs is AE 207 at OBR-4, not XR', async () => {
    const nw = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'SEM-PROD-NW'],
      ['PLC-100234', 'PLC-PROD-1'],
      ['FIL-55012', 'FIL-PROD-1'],
      ['ACC-20240318-0042', 'ACC-PROD-1'],
    ]);
    expect(ackSummary(await h.mllp.send(nw)).code).toBe('AA');
    const change = (id: string, code: string) =>
      edited(hl7Fixture('orm-o01-v251-change-xo'), [
        ['MSGID20240318152210', id],
        ['PLC-100234', 'PLC-PROD-1'],
        ['FIL-55012', 'FIL-PROD-1'],
        ['ACC-20240318-0042', 'ACC-PROD-1'],
        ['24627-2^CT Chest^LN', code],
      ]);
    // Not placed yet: the place job will read the changed order, so the change applies.
    expect(
      parseHl7(await h.mllp.send(change('SEM-PROD-XO1', '24725-4^CT Head^LN'))).get('ORC-1'),
    ).toBe('XR');
    expect((await requestOf('PLC-PROD-1')).products).toEqual(['head-ct-hemorrhage']);

    // Placed upstream (as the place job leaves it): PATCH /add-metadata cannot change products.
    // Before: ORR XR, our order said head CT -> chest CT while the upstream ran the head-CT
    // product, whose result would have been published under OBR-4 CT Chest.
    await h.db.query(
      `UPDATE orders SET upstream_order_id = gen_random_uuid()::text, state = 'placed' WHERE placer_order_number = 'PLC-PROD-1'`,
    );
    const reply = await h.mllp.send(change('SEM-PROD-XO2', '24627-2^CT Chest^LN'));
    expect(ackSummary(reply)).toMatchObject({
      code: 'AE',
      errors: [expect.stringMatching(/^\|OBR\^1\^4\^1\|207\^/)],
    });
    expect(reply.toString('latin1')).toMatch(
      /AI products head-ct-hemorrhage, and the new procedure asks for lung-nodule-ct.*cancel it \(CA\) and send a new order \(NW\)/,
    );
    const request = await requestOf('PLC-PROD-1');
    expect(request.products).toEqual(['head-ct-hemorrhage']);
    expect(request.procedure.code).toBe('24725-4');
    // A change that keeps the products (priority, times) still applies to a placed order.
    expect(
      parseHl7(await h.mllp.send(change('SEM-PROD-XO3', '24725-4^CT Head^LN'))).get('ORC-1'),
    ).toBe('XR');
  });

  it('an XO that moves the accession or Study Instance UID of an order whose study is already used is AE 207, not XR', async () => {
    const nw = edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', 'SEM-ACC-NW'],
      ['PLC-100234', 'PLC-ACC-1'],
      ['FIL-55012', 'FIL-ACC-1'],
      ['ACC-20240318-0042', 'ACC-ACC-1'],
    ]);
    expect(ackSummary(await h.mllp.send(nw)).code).toBe('AA');
    const change = (id: string, pairs: [string, string][]) =>
      edited(hl7Fixture('orm-o01-v251-change-xo'), [
        ['MSGID20240318152210', id],
        ['PLC-100234', 'PLC-ACC-1'],
        ['FIL-55012', 'FIL-ACC-1'],
        ...pairs,
      ]);
    // Placed, the study not found yet: the acquirer will look for the new accession.
    await h.db.query(
      `UPDATE orders SET upstream_order_id = gen_random_uuid()::text, state = 'placed' WHERE placer_order_number = 'PLC-ACC-1'`,
    );
    expect(
      parseHl7(await h.mllp.send(change('SEM-ACC-XO1', [['ACC-20240318-0042', 'ACC-ACC-2']]))).get(
        'ORC-1',
      ),
    ).toBe('XR');
    expect((await requestOf('PLC-ACC-1')).accessionNumber).toBe('ACC-ACC-2');
    // The study of ACC-ACC-2 is found and packaged (then uploaded, analysed): a result under
    // ACC-ACC-3 would name images that are not its own. Before: XR, and the order moved.
    await h.db.query(
      `UPDATE orders SET state = 'study-ready' WHERE placer_order_number = 'PLC-ACC-1'`,
    );
    const reply = await h.mllp.send(change('SEM-ACC-XO2', [['ACC-20240318-0042', 'ACC-ACC-3']]));
    expect(ackSummary(reply)).toMatchObject({
      code: 'AE',
      errors: [expect.stringMatching(/^\|OBR\^1\^18\^1\|207\^/)],
    });
    expect(reply.toString('latin1')).toMatch(/already been found by its accession number/);
    expect((await requestOf('PLC-ACC-1')).accessionNumber).toBe('ACC-ACC-2');
    // another Study Instance UID (ZDS-1) is refused the same way, at ZDS-1
    const uid = await h.mllp.send(
      change('SEM-ACC-XO3', [
        ['ACC-20240318-0042', 'ACC-ACC-2'],
        ['1.2.276.0.7230010.3.1.2.2831176988.12345.1710769337.1', '2.25.4711'],
      ]),
    );
    expect(ackSummary(uid)).toMatchObject({
      code: 'AE',
      errors: [expect.stringMatching(/^\|ZDS\^1\^1\^1\|207\^/)],
    });
    // a change that keeps both (the priority, the times) still applies
    expect(
      parseHl7(await h.mllp.send(change('SEM-ACC-XO4', [['ACC-20240318-0042', 'ACC-ACC-2']]))).get(
        'ORC-1',
      ),
    ).toBe('XR');
  });

  it('FHIR: a ServiceRequest update naming another patient, or asking other products of a running order, is 409 and changes nothing', async () => {
    const call = (method: string, path: string, body: Record<string, unknown>) =>
      fetch(`${h.adapter.httpUrl}/fhir/${path}`, {
        method,
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
        },
        body: JSON.stringify(body),
      });
    const sr = {
      resourceType: 'ServiceRequest',
      identifier: [{ system: 'http://ehr.example/placer', value: 'FHIR-SEM-1' }],
      status: 'active',
      intent: 'order',
      code: { coding: [{ system: 'http://loinc.org', code: '24725-4' }] },
      subject: { identifier: { system: 'http://ehr.example/mrn', value: 'SEM-1' } },
    };
    const created = await call('POST', 'ServiceRequest', sr);
    expect(created.status).toBe(201);
    const { id } = (await created.json()) as { id: string };
    const put = (body: Record<string, unknown>) =>
      call('PUT', `ServiceRequest/${id}`, { ...body, id });

    // Before: 200, and the order moved to patient SEM-2.
    const otherPatient = await put({
      ...sr,
      subject: { identifier: { system: 'http://ehr.example/mrn', value: 'SEM-2' } },
    });
    expect(otherPatient.status).toBe(409);
    expect(await otherPatient.json()).toMatchObject({
      issue: [{ code: 'business-rule', expression: ['ServiceRequest.subject'] }],
    });

    await h.db.query(
      `UPDATE orders SET upstream_order_id = gen_random_uuid()::text, state = 'placed' WHERE placer_order_number = 'FHIR-SEM-1'`,
    );
    // Before: 200, products lung-nodule-ct in our order while the upstream ran head-ct-hemorrhage.
    const otherCode = await put({
      ...sr,
      code: { coding: [{ system: 'http://loinc.org', code: '24627-2' }] },
    });
    expect(otherCode.status).toBe(409);
    expect(await otherCode.json()).toMatchObject({
      issue: [{ code: 'business-rule', expression: ['ServiceRequest.code'] }],
    });
    const row = (
      await h.db.query(
        `SELECT patient_id, request FROM orders WHERE placer_order_number = 'FHIR-SEM-1'`,
      )
    ).rows[0];
    expect(row.patient_id).toBe('SEM-1');
    expect(row.request.products).toEqual(['head-ct-hemorrhage']);

    // the study found by accession: another ACSN identifier is 409 at ServiceRequest.identifier
    await h.db.query(
      `UPDATE orders SET state = 'study-ready' WHERE placer_order_number = 'FHIR-SEM-1'`,
    );
    const acsn = {
      type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'ACSN' }] },
      system: 'http://ehr.example/accession',
      value: 'ACC-SEM-OTHER',
    };
    const otherAccession = await put({ ...sr, identifier: [...sr.identifier, acsn] });
    expect(otherAccession.status).toBe(409);
    expect(await otherAccession.json()).toMatchObject({
      issue: [{ code: 'business-rule', expression: ['ServiceRequest.identifier'] }],
    });
  });
});
