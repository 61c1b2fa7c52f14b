import { ackSummary, hl7Fixture } from '../helpers/hl7-fixtures';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';

jest.setTimeout(90_000);

/**
 * ADT^A08 and ADT^A40 over the real MLLP front door into PostgreSQL, in a network where two
 * facilities number their patients independently (PID-3 CX-4 `HOSPA` and `CLINB`): an ADT
 * feed broadcasts every patient's updates and merges, and patient numbers collide. The
 * messages are the fixtures adt-a08-v251-update and adt-a40-v251-merge (HL7 v2.5.1 chapter 3
 * A08/A40 shapes) with the assigning authority of the other facility.
 */
describe('ADT patient events: which open orders each one changes', () => {
  let h: MllpHarness;

  beforeAll(async () => {
    h = await startMllpHarness();
  });
  afterAll(async () => {
    await h?.close();
  });

  const orderByPlacer = async (placer: string) =>
    (await h.db.query(`SELECT * FROM orders WHERE placer_order_number = $1`, [placer])).rows[0];
  const edited = (name: string, pairs: [string, string][]): Buffer => {
    let text = hl7Fixture(name).toString('latin1');
    for (const [from, to] of pairs) text = text.split(from).join(to);
    return Buffer.from(text, 'latin1');
  };

  it("an A08 and an A40 of another facility's patient with the same number leave the order alone; the order's own facility's A08 applies", async () => {
    // HOSPA's RIS orders a CT for PAT-4711 of HOSPA (SCHMIDT, ANNA, F, 1956).
    expect(ackSummary(await h.mllp.send(hl7Fixture('orm-o01-v231-ihe-swf-zds')))).toMatchObject({
      code: 'AA',
    });
    const before = await orderByPlacer('PLC-100234');
    expect(before.patient_id).toBe('PAT-4711');

    // CLINB's ADT updates its own patient PAT-4711 (another person).
    // Before: AA and HOSPA's order renamed KOWALSKI, JAN, male, born 1990.
    const a08 = edited('adt-a08-v251-update', [
      ['ADT20240319081500-0007', 'CLINB-A08-1'],
      ['|HOSPA|', '|CLINB|'],
      ['PAT-4711^^^HOSPA^MR', 'PAT-4711^^^CLINB^MR'],
      [
        'SCHMIDT-BERGER^ANNA^MARIA^^^^L~SCHMIDT^ANNA^MARIA^^^^B||19560214|F',
        'KOWALSKI^JAN^^^^^L||19900101|M',
      ],
    ]);
    expect(ackSummary(await h.mllp.send(a08))).toMatchObject({ code: 'AA', errors: [] });
    const afterA08 = await orderByPlacer('PLC-100234');
    expect(afterA08.request.patient).toEqual(before.request.patient);

    // CLINB merges its PAT-4711 into its PAT-5000.
    // Before: AA and HOSPA's order moved to CLINB's PAT-5000 (its result filed under him).
    const a40 = edited('adt-a40-v251-merge', [
      ['MPI-20240320-000112', 'CLINB-A40-1'],
      ['|HOSPA|', '|CLINB|'],
      ['PAT-4711^^^HOSPA^MR', 'PAT-5000^^^CLINB^MR'],
      ['PAT-9902^^^HOSPA^MR', 'PAT-4711^^^CLINB^MR'],
    ]);
    expect(ackSummary(await h.mllp.send(a40))).toMatchObject({ code: 'AA', errors: [] });
    const afterA40 = await orderByPlacer('PLC-100234');
    expect(afterA40.patient_id).toBe('PAT-4711');
    expect(afterA40.request.patient).toEqual(before.request.patient);
    const moved = await h.db.query(
      `SELECT count(*)::int AS n FROM audit_events WHERE order_id = $1 AND kind = 'order.updated'`,
      [before.id],
    );
    expect(moved.rows[0].n).toBe(0);
    // Its timeline says why the two messages left it alone (the authorities named, not the patient).
    const refused = await h.db.query(
      `SELECT summary, detail FROM audit_events WHERE order_id = $1 AND kind = 'order.change-refused' ORDER BY id`,
      [before.id],
    );
    expect(refused.rows.map((r) => r.detail)).toEqual([
      expect.objectContaining({
        event: 'patient-update',
        reason: 'other-assigning-authority',
        messageAuthorities: ['CLINB'],
        orderAuthority: 'HOSPA',
      }),
      expect.objectContaining({ event: 'patient-merge', reason: 'other-assigning-authority' }),
    ]);
    expect(JSON.stringify(refused.rows)).not.toContain('KOWALSKI');

    // HOSPA's own A08 for PAT-4711 (name change) still applies.
    expect(ackSummary(await h.mllp.send(hl7Fixture('adt-a08-v251-update')))).toMatchObject({
      code: 'AA',
    });
    expect((await orderByPlacer('PLC-100234')).request.patient.name).toMatchObject({
      family: 'SCHMIDT-BERGER',
    });
  });

  it('an A40 of two PID/MRG pairs (ADT_A39 repeats the PATIENT group) moves each prior patient’s orders to its own surviving patient', async () => {
    const orderFor = (n: string, pid3: string, name: string) =>
      edited('orm-o01-v231-ihe-swf-zds', [
        ['MSGID20240318144217', `MERGE2-NW-${n}`],
        ['PLC-100234', `PLC-M2-${n}`],
        ['ACC-20240318-0042', `ACC-M2-${n}`],
        ['PAT-4711^^^HOSPA^MR~998877665^^^SSA^SS||SCHMIDT^ANNA^MARIA^^^^L', `${pid3}||${name}`],
      ]);
    for (const [n, pid3, name] of [
      ['A', 'PAT-8001^^^HOSPA^MR', 'ALPHA^ANNE'],
      ['B', 'PAT-8002^^^HOSPA^MR', 'BETA^BEN'],
    ] as const)
      expect(ackSummary(await h.mllp.send(orderFor(n, pid3, name))).code).toBe('AA');

    // The MPI merges PAT-8001 into PAT-9001 and PAT-8002 into PAT-9002 in one message.
    const fixture = hl7Fixture('adt-a40-v251-merge').toString('latin1');
    const [msh, evn] = fixture.split('\r');
    const a40 = Buffer.from(
      [
        msh!.replace('MPI-20240320-000112', 'MERGE2-A40'),
        evn,
        'PID|1||PAT-9001^^^HOSPA^MR||ALPHA^ANNE^^^^^L||19560214|F',
        'MRG|PAT-8001^^^HOSPA^MR',
        'PID|2||PAT-9002^^^HOSPA^MR||BETA^BEN^^^^^L||19610101|M',
        'MRG|PAT-8002^^^HOSPA^MR',
        '',
      ].join('\r'),
      'latin1',
    );
    expect(ackSummary(await h.mllp.send(a40))).toMatchObject({ code: 'AA', errors: [] });
    // Before: both orders ended under PAT-9002 (BETA, BEN): every pair was applied to the
    // orders of both prior patients, the last one winning.
    const a = await orderByPlacer('PLC-M2-A');
    const b = await orderByPlacer('PLC-M2-B');
    expect(a.patient_id).toBe('PAT-9001');
    expect(a.request.patient.name).toMatchObject({ family: 'ALPHA' });
    expect(b.patient_id).toBe('PAT-9002');
    expect(b.request.patient.name).toMatchObject({ family: 'BETA' });
  });

  it('after an A40, the RIS’s change and cancel naming the record number the merge retired are this patient’s order', async () => {
    // The RIS ordered for PAT-8101; the MPI merges PAT-8101 into PAT-9101 (IHE PAM ITI-30) and
    // tells us first: the RIS, which applies merges later or not to scheduled exams, changes and
    // cancels the order under PAT-8101. Before, both were AE 204 "Not this patient's order:
    // merge patients by ADT^A40", though that merge is what happened: the exam the RIS called
    // off went on being analysed.
    const order = (n: string, control: string) =>
      edited('orm-o01-v231-ihe-swf-zds', [
        ['MSGID20240318144217', `MERGE3-${n}`],
        ['ORC|NW|', `ORC|${control}|`],
        ['PLC-100234', 'PLC-M3'],
        ['ACC-20240318-0042', 'ACC-M3'],
        ['PAT-4711^^^HOSPA^MR~998877665^^^SSA^SS', 'PAT-8101^^^HOSPA^MR~998877665^^^SSA^SS'],
      ]);
    expect(ackSummary(await h.mllp.send(order('NW', 'NW'))).code).toBe('AA');
    const a40 = edited('adt-a40-v251-merge', [
      ['MPI-20240320-000112', 'MERGE3-A40'],
      ['PAT-4711^^^HOSPA^MR', 'PAT-9101^^^HOSPA^MR'],
      ['PAT-9902^^^HOSPA^MR', 'PAT-8101^^^HOSPA^MR'],
    ]);
    expect(ackSummary(await h.mllp.send(a40))).toMatchObject({ code: 'AA', errors: [] });
    const merged = await orderByPlacer('PLC-M3');
    expect(merged.patient_id).toBe('PAT-9101');

    const xo = ackSummary(await h.mllp.send(order('XO', 'XO')));
    expect(xo).toMatchObject({ code: 'AA', errors: [] });
    const changed = await orderByPlacer('PLC-M3');
    // the change applies, and the order stays known by the surviving record
    expect(changed.patient_id).toBe('PAT-9101');
    expect(changed.request.patient.identifiers.map((i: { value: string }) => i.value)).toEqual([
      'PAT-9101',
      '998877665',
    ]);
    const ca = ackSummary(await h.mllp.send(order('CA', 'CA')));
    expect(ca).toMatchObject({ code: 'AA', errors: [] });
    expect((await orderByPlacer('PLC-M3')).cancel_requested_at).not.toBeNull();
  });

  it('after an A40, a cancel naming a third patient’s record number is still refused', async () => {
    const order = (n: string, control: string, pid3: string) =>
      edited('orm-o01-v231-ihe-swf-zds', [
        ['MSGID20240318144217', `MERGE4-${n}`],
        ['ORC|NW|', `ORC|${control}|`],
        ['PLC-100234', 'PLC-M4'],
        ['ACC-20240318-0042', 'ACC-M4'],
        ['PAT-4711^^^HOSPA^MR~998877665^^^SSA^SS', pid3],
      ]);
    expect(ackSummary(await h.mllp.send(order('NW', 'NW', 'PAT-8201^^^HOSPA^MR'))).code).toBe('AA');
    const a40 = edited('adt-a40-v251-merge', [
      ['MPI-20240320-000112', 'MERGE4-A40'],
      ['PAT-4711^^^HOSPA^MR', 'PAT-9201^^^HOSPA^MR'],
      ['PAT-9902^^^HOSPA^MR', 'PAT-8201^^^HOSPA^MR'],
    ]);
    expect(ackSummary(await h.mllp.send(a40)).code).toBe('AA');
    // the retired number in another facility's domain is another patient, as is a third number
    for (const [n, pid3] of [
      ['CA1', 'PAT-8201^^^CLINB^MR'],
      ['CA2', 'PAT-8299^^^HOSPA^MR'],
    ] as const) {
      const ca = ackSummary(await h.mllp.send(order(n, 'CA', pid3)));
      expect(ca.code).toBe('AE');
      expect(ca.errors.join(' ')).toMatch(/204/);
    }
    expect((await orderByPlacer('PLC-M4')).cancel_requested_at).toBeNull();
  });

  it('an A47 that corrects the temporary record number of an emergency patient moves the order to the corrected number, keeping the rest', async () => {
    // An unconscious patient is registered as TMP-… and a CT head ordered at once; once known,
    // the MPI corrects the identifier (IHE PAM ITI-30, ADT^A47^ADT_A30: MRG-1 the incorrect
    // number, PID-3 the correct one; fixture adt-a47-v251-change-id). Before: AR 201 "Event
    // ADT^A47 not supported", and the order stayed under a number that no longer exists: the
    // ORU and SR were filed under it, and the RIS's later cancel under the right number was
    // AE 204 as another patient's.
    const nw = edited('orm-o01-v231-ihe-swf-zds', [
      ['MSGID20240318144217', 'A47-NW'],
      ['PLC-100234', 'PLC-A47'],
      ['ACC-20240318-0042', 'ACC-A47'],
      ['PAT-4711^^^HOSPA^MR~998877665^^^SSA^SS', 'TMP-20240318-0093^^^HOSPA^MR~998877665^^^SSA^SS'],
    ]);
    expect(ackSummary(await h.mllp.send(nw)).code).toBe('AA');
    const a47 = edited('adt-a47-v251-change-id', [['PAT-4711^^^HOSPA^MR', 'PAT-A47^^^HOSPA^MR']]);
    const ack = ackSummary(await h.mllp.send(a47));
    expect(ack).toMatchObject({ code: 'AA', errors: [] });
    const changed = await orderByPlacer('PLC-A47');
    expect(changed.patient_id).toBe('PAT-A47');
    expect(changed.request.patient.identifiers).toEqual([
      { value: 'PAT-A47', system: 'HOSPA', type: 'MR' },
      { value: '998877665', system: 'SSA', type: 'SS' },
    ]);
    expect(changed.retired_patient_identifiers).toEqual([
      { value: 'TMP-20240318-0093', system: 'HOSPA', type: 'MR' },
    ]);
    const { rows } = await h.db.query(
      `SELECT summary FROM audit_events WHERE order_id = $1 AND kind = 'order.updated'`,
      [changed.id],
    );
    expect(rows.map((r) => r.summary)).toEqual([
      "patient identifier changed (ADT^A47): the order is known by the patient's corrected identifier",
    ]);
    // the RIS, told too, cancels under the corrected number: the order's patient
    const ca = edited('orm-o01-v231-ihe-swf-zds', [
      ['MSGID20240318144217', 'A47-CA'],
      ['ORC|NW|', 'ORC|CA|'],
      ['PLC-100234', 'PLC-A47'],
      ['ACC-20240318-0042', 'ACC-A47'],
      ['PAT-4711^^^HOSPA^MR', 'PAT-A47^^^HOSPA^MR'],
    ]);
    expect(ackSummary(await h.mllp.send(ca))).toMatchObject({ code: 'AA', errors: [] });
    expect((await orderByPlacer('PLC-A47')).cancel_requested_at).not.toBeNull();
  });

  it('merges back and forth between two records (an MPI undoing and redoing a link) keep each retired number once', async () => {
    const nw = edited('orm-o01-v231-ihe-swf-zds', [
      ['MSGID20240318144217', 'PINGPONG-NW'],
      ['PLC-100234', 'PLC-PP'],
      ['ACC-20240318-0042', 'ACC-PP'],
      ['PAT-4711^^^HOSPA^MR~998877665^^^SSA^SS', 'PAT-PP-A^^^HOSPA^MR'],
    ]);
    expect(ackSummary(await h.mllp.send(nw)).code).toBe('AA');
    for (let i = 0; i < 6; i++) {
      const [from, to] = i % 2 === 0 ? ['PAT-PP-A', 'PAT-PP-B'] : ['PAT-PP-B', 'PAT-PP-A'];
      const a40 = edited('adt-a40-v251-merge', [
        ['MPI-20240320-000112', `PINGPONG-${i}`],
        ['PAT-4711^^^HOSPA^MR', `${to}^^^HOSPA^MR`],
        ['PAT-9902^^^HOSPA^MR', `${from}^^^HOSPA^MR`],
      ]);
      expect(ackSummary(await h.mllp.send(a40)).code).toBe('AA');
    }
    const order = await orderByPlacer('PLC-PP');
    expect(order.patient_id).toBe('PAT-PP-A');
    expect(order.retired_patient_identifiers.map((i: { value: string }) => i.value)).toEqual([
      'PAT-PP-A',
      'PAT-PP-B',
    ]);
  });

  it('an A31 from the MPI’s identity feed (IHE PAM ITI-30) renames the open order, as an A08 does', async () => {
    // The emergency patient's order went out as UNBEKANNT, FRAU; the MPI, once she is known,
    // sends her person data as ADT^A31^ADT_A05 (fixture adt-a31-v251-person-update), not A08.
    // Before: AR 201 "Event ADT^A31 not supported", and the upstream, the ORU and the SR kept
    // the placeholder name and no birth date.
    const nw = edited('orm-o01-v231-ihe-swf-zds', [
      ['MSGID20240318144217', 'A31-NW'],
      ['PLC-100234', 'PLC-A31'],
      ['ACC-20240318-0042', 'ACC-A31'],
      [
        'PAT-4711^^^HOSPA^MR~998877665^^^SSA^SS||SCHMIDT^ANNA^MARIA^^^^L||19560214|F',
        'PAT-A31^^^HOSPA^MR||UNBEKANNT^FRAU^^^^^L|||F',
      ],
    ]);
    expect(ackSummary(await h.mllp.send(nw)).code).toBe('AA');
    expect((await orderByPlacer('PLC-A31')).request.patient.name).toMatchObject({
      family: 'UNBEKANNT',
    });
    const a31 = edited('adt-a31-v251-person-update', [
      ['PAT-4711^^^HOSPA^MR', 'PAT-A31^^^HOSPA^MR'],
    ]);
    expect(ackSummary(await h.mllp.send(a31))).toMatchObject({ code: 'AA', errors: [] });
    const renamed = await orderByPlacer('PLC-A31');
    expect(renamed.request.patient).toMatchObject({
      name: { family: 'SCHMIDT-BERGER', given: ['ANNA', 'MARIA'] },
      birthDate: '1956-02-14',
      sex: 'female',
    });
    expect(renamed.patient_id).toBe('PAT-A31');
    const { rows } = await h.db.query(
      `SELECT summary FROM audit_events WHERE order_id = $1 AND kind = 'order.updated'`,
      [renamed.id],
    );
    expect(rows.map((r) => r.summary)).toEqual(['demographics updated (ADT^A31)']);
  });
});
