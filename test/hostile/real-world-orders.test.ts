import { parseHl7 } from '../../src/hl7';
import { encodeText } from '../../src/hl7/hl7-charset';
import { ackSummary, hl7Fixture } from '../helpers/hl7-fixtures';
import { TEST_TOKENS } from '../helpers/adapter';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';

jest.setTimeout(90_000);

/**
 * Orders shaped like the ones real RIS, EHR and interface engines send (IHE Scheduled Workflow
 * test messages, a Polish HIS, a Chinese-market RIS, EHR order feeds), each over the real MLLP
 * front door into PostgreSQL: mapped as the sender means it, or refused saying where and why.
 * Every case here was answered wrongly before: AE for a procedure the product table knows, AE
 * for a filler's cancel, AA with the priority dropped, AA with the patient's name misread, or an
 * AE naming a field of the wrong order.
 */
describe('real-world order shapes over MLLP (real adapter, real socket, real PostgreSQL)', () => {
  let h: MllpHarness;

  beforeAll(async () => {
    h = await startMllpHarness();
  });
  afterAll(async () => {
    await h?.close();
  });

  const orderByPlacer = async (placer: string) =>
    (await h.db.query(`SELECT * FROM orders WHERE placer_order_number = $1`, [placer])).rows[0];
  const lineageOf = async (orderId: string) =>
    (
      await h.db.query(
        `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'mapping.applied'`,
        [orderId],
      )
    ).rows[0].detail.lineage as { target: string; source: string; value: string }[];
  const quirksOf = async (controlId: string) =>
    (
      await h.db.query(`SELECT quirks FROM inbound_messages WHERE message_control_id = $1`, [
        controlId,
      ])
    ).rows[0].quirks as { code: string }[];
  /** A fixture with text replaced (byte-wise: the fixtures below are ASCII where edited). */
  const edited = (name: string, pairs: [string, string][]): Buffer => {
    let text = hl7Fixture(name).toString('latin1');
    for (const [from, to] of pairs) text = text.split(from).join(to);
    return Buffer.from(text, 'latin1');
  };

  /** POSTs a ServiceRequest as the sender (R4 REST create). */
  const postServiceRequest = (resource: Record<string, unknown>) =>
    fetch(`${h.adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(resource),
    });

  it('IHE SWF puts the procedure in OBR-4 components 4-6 (`^^^24627-2^CT Chest^LN`): AA, products from OBR-4.4, and the filler cancels it with ORC-1 OC', async () => {
    // Before: AE 101 "Requested procedure code missing" (products read OBR-4.1 only).
    const ack = ackSummary(await h.mllp.send(hl7Fixture('orm-o01-v231-ihe-obr4-alternate')));
    expect(ack).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('PO-88120');
    expect(order.request).toMatchObject({
      procedure: { code: '24627-2', system: 'LN' },
      products: ['lung-nodule-ct'],
      priority: 'stat',
      accessionNumber: 'RW-ACC-77310',
      studyInstanceUid: '1.2.826.0.1.3680043.9.7781.20261012.77310',
    });
    expect(await lineageOf(order.id)).toContainEqual(
      expect.objectContaining({ target: 'products[0]', source: 'OBR-4.4' }),
    );

    // ORC-1 OC (order canceled, table 0119), as a RIS acting as the filler sends it.
    // Before: AE 103 "OC is not acted on here".
    const reply = await h.mllp.send(hl7Fixture('orm-o01-v231-filler-cancel-oc'));
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [] });
    expect(parseHl7(reply).get('ORC-1')).toBe('CR');
    expect((await orderByPlacer('PO-88120')).cancel_requested_at).not.toBeNull();
  });

  it('a local code with LOINC as the alternate, CPT in OBR-44: the first code the product table knows chooses the products', async () => {
    // Before: AE 103 "Procedure code IMG3310 has no AI product configured".
    const ack = ackSummary(await h.mllp.send(hl7Fixture('orm-o01-v24-local-code-cpt-alternate')));
    expect(ack.code).toBe('CA'); // MSH-15 AL
    const order = await orderByPlacer('LK-44127');
    expect(order.request).toMatchObject({
      procedure: { code: 'IMG3310', system: 'EAP' }, // what was ordered, as sent
      products: ['lung-nodule-ct'],
    });
    expect(await lineageOf(order.id)).toContainEqual(
      expect.objectContaining({ target: 'products[0]', source: 'OBR-4.4' }),
    );

    // Only OBR-44 is known (a site's table keyed on its local code): OBR-44.1 chooses.
    const only44 = edited('orm-o01-v24-local-code-cpt-alternate', [
      ['LK20261012101544-3', 'LK20261012101544-4'],
      ['LK-44127', 'LK-44128'],
      ['^24627-2^CT Chest^LN|', '|'],
      ['71250^CT THORAX W/O DYE^C4', 'CTTHX^CT THORAX^L'],
    ]);
    expect(ackSummary(await h.mllp.send(only44)).code).toBe('CA');
    const second = await orderByPlacer('LK-44128');
    expect(second.request.products).toEqual(['lung-nodule-ct']);
    expect(await lineageOf(second.id)).toContainEqual(
      expect.objectContaining({ target: 'products[0]', source: 'OBR-44.1' }),
    );

    // None known: AE 103 at the first code, naming every code tried and where it was.
    const none = edited('orm-o01-v24-local-code-cpt-alternate', [
      ['LK20261012101544-3', 'LK20261012101544-5'],
      ['LK-44127', 'LK-44129'],
      ['24627-2^CT Chest^LN', '99999-9^Unknown^LN'],
    ]);
    const refusedReply = await h.mllp.send(none);
    const refused = ackSummary(refusedReply);
    expect(refused.code).toBe('CE');
    expect(refused.errors).toEqual(['OBR^1^4^103&Table value not found&HL70357']); // v2.4 ERR-1
    // v2.4 MSA-3 is ST of 80: the sentence (… have no AI product configured) in short, not
    // cut before it says what is wrong (`… (OBR-44.1) have no A`)
    expect(parseHl7(refusedReply).get('MSA-3')).toBe(
      'No AI product configured for procedure codes IMG3310, 99999-9, 71250',
    );
    expect(await orderByPlacer('LK-44129')).toBeUndefined();
  });

  it('PID-8 `m` and a priority `s` (table codes in lower case): read as M and S, each recorded as a quirk naming the case', async () => {
    // Tables 0001 (IS) and 0027 (ID) are case-sensitive, as MSH-9, MSH-11 and ORC-1 are read
    // here; free text in their place is tolerated and recorded (free-text-sex, -priority).
    // Before: `m` and `s` were upper-cased and read silently, so the interface that writes
    // them was never pointed at, while `male` or `STAT` in the same place were recorded.
    const lower = edited('orm-o01-v231-ihe-obr4-alternate', [
      ['OF-20261012-0412', 'LC-CODES-1'],
      ['PO-88120', 'PO-LC-1'],
      ['FO-51277', 'FO-LC-1'],
      ['RW-ACC-77310', 'ACC-LC-1'],
      ['20261012.77310', '20261012.77399'],
      ['|19580917|M|', '|19580917|m|'],
      ['^20261012090000^^S|', '^20261012090000^^s|'],
    ]);
    const ack = ackSummary(await h.mllp.send(lower));
    expect(ack).toMatchObject({ code: 'AA', errors: [] });
    expect((await orderByPlacer('PO-LC-1')).request).toMatchObject({
      priority: 'stat',
      patient: expect.objectContaining({ sex: 'male' }),
    });
    const quirks = (await quirksOf('LC-CODES-1')) as { code: string; detail?: string }[];
    expect(quirks).toContainEqual(
      expect.objectContaining({
        code: 'free-text-sex',
        detail: expect.stringMatching(/PID-8 .*case-sensitive \(M\)/),
      }),
    );
    expect(quirks).toContainEqual(
      expect.objectContaining({
        code: 'free-text-priority',
        detail: expect.stringMatching(/ORC-7\.6 .*case-sensitive \(S\)/),
      }),
    );
  });

  it('priority written as a word in TQ-6 (`^STAT`): stored stat, recorded as a quirk', async () => {
    // Before: AA, priority left out (a v2.3 ACK carries no warning): the order ran routine.
    const ack = ackSummary(await h.mllp.send(hl7Fixture('orm-o01-v23-priority-words')));
    expect(ack.code).toBe('CA');
    expect((await orderByPlacer('EC-10178403')).request.priority).toBe('stat');
    expect((await quirksOf('EC-32032871')).map((q) => q.code)).toContain('free-text-priority');

    // A word that names no priority is still left out, not guessed.
    const odd = edited('orm-o01-v23-priority-words', [
      ['EC-32032871', 'EC-32032872'],
      ['EC-10178403', 'EC-10178404'],
      ['^STAT', '^SOON'],
    ]);
    expect(ackSummary(await h.mllp.send(odd)).code).toBe('CA');
    expect((await orderByPlacer('EC-10178404')).request.priority).toBeUndefined();
  });

  it('MSH-18 CP1250 (a Polish HIS): names decoded as Windows-1250, the ACK in the same bytes', async () => {
    // Before: AA with `Ma³ecka` / `£ucja` (decoded as Latin-1).
    const reply = await h.mllp.send(hl7Fixture('orm-o01-v23-cp1250'));
    const ack = ackSummary(reply);
    expect(ack.code).toBe('CA');
    const order = await orderByPlacer('PL-55120');
    expect(order.request.patient.name).toEqual({
      family: 'Małecka',
      given: ['Łucja', 'Żaneta'],
    });
    expect(order.request.procedure.display).toBe('TK głowy bez kontrastu');
    expect(parseHl7(reply).get('MSH-18')).toBe('CP1250');
  });

  it('one ORC followed by two OBRs: AE 100 at the OBR without its ORC, nothing stored', async () => {
    // Before: AE 101 "ORC-1 required (action) but empty" at ORC^1^1, the first order's ORC,
    // which holds NW.
    const ack = ackSummary(await h.mllp.send(hl7Fixture('broken-orm-two-obr-one-orc')));
    expect(ack.code).toBe('AE');
    expect(ack.errors).toHaveLength(1);
    expect(ack.errors[0]).toMatch(/^OBR\^2\^1\^100/);
    expect(ack.errors[0]).not.toContain('ORC');
    expect(await orderByPlacer('NG-ORD-771')).toBeUndefined();
    expect(await orderByPlacer('NG-ORD-772')).toBeUndefined();
  });

  it('PID-3 with the national insurance number (NH) before the hospital record number (PI): the order is known by the PI', async () => {
    // Before: orders.patient_id (searched, compared with the study's DICOM PatientID) and the
    // upstream's patient_id were the NIR, the first repetition.
    const ack = ackSummary(await h.mllp.send(hl7Fixture('omi-o23-v251-nir-before-pi')));
    expect(ack).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('DMP-20771');
    expect(order.patient_id).toBe('M-0048812');
    // Both identifiers are kept on the order, as sent.
    expect(order.request.patient.identifiers.map((i: { type: string }) => i.type)).toEqual([
      'NH',
      'PI',
    ]);
  });

  it('FHIR: a contained Patient listing an untyped SSN before the EHR record number is known by the record number', async () => {
    // Before: 201, and orders.patient_id (and the upstream's patient_id) was the SSN.
    const res = await postServiceRequest({
      resourceType: 'ServiceRequest',
      contained: [
        {
          resourceType: 'Patient',
          id: 'pat',
          identifier: [
            { system: 'http://hl7.org/fhir/sid/us-ssn', value: '999-44-5555' },
            { system: 'urn:oid:1.2.840.114350.1.13.0.1.7.5.737384.0', value: 'E7001' },
          ],
        },
      ],
      identifier: [{ system: 'http://ehr.example/placer', value: 'FHIR-SSN-1' }],
      status: 'active',
      intent: 'order',
      code: { coding: [{ system: 'http://loinc.org', code: '24725-4' }] },
      subject: { reference: '#pat' },
    });
    expect(res.status).toBe(201);
    expect((await orderByPlacer('FHIR-SSN-1')).patient_id).toBe('E7001');
  });

  it('FHIR: the time to perform written as occurrenceTiming.repeat.boundsPeriod is the requested time, not authoredOn', async () => {
    // Before: requestedAt = authoredOn (2026-11-25T14:12:44Z), the day before the scheduled window.
    const res = await postServiceRequest({
      resourceType: 'ServiceRequest',
      identifier: [{ system: 'http://ehr.example/placer', value: 'FHIR-TIMING-1' }],
      status: 'active',
      intent: 'order',
      code: { coding: [{ system: 'http://loinc.org', code: '24725-4' }] },
      subject: { identifier: { system: 'http://ehr.example/mrn', value: 'T-1' } },
      occurrenceTiming: {
        repeat: {
          boundsPeriod: { start: '2026-11-26T09:00:00+01:00', end: '2026-11-26T12:00:00+01:00' },
        },
      },
      authoredOn: '2026-11-25T09:12:44-05:00',
    });
    expect(res.status).toBe(201);
    expect((await orderByPlacer('FHIR-TIMING-1')).request.requestedAt).toBe(
      '2026-11-26T08:00:00.000Z',
    );
  });

  it('an order known only by its filler number (walk-in): a resend is the same order, and another RIS numbering its orders alike cannot cancel it', async () => {
    // A RIS-originated order (walk-in): no placer number, the RIS's filler number in ORC-3.
    const msg = (app: string, id: string, control: string, patient: string) =>
      Buffer.from(
        [
          `MSH|^~\\&|${app}|${app}_SITE|AI_ADAPTER|AI|20261012120000||ORM^O01|${id}|P|2.3.1`,
          `PID|1||${patient}^^^${app}_SITE^MR||PATIENT^${app}||19700101|F`,
          `ORC|${control}||WALKIN-2001^${app}||${control === 'NW' ? 'SC' : 'CA'}`,
          `OBR|1||WALKIN-2001^${app}|24725-4^CT Head^LN||||||||||||||${app}-ACC-2001`,
        ].join('\r') + '\r',
        'latin1',
      );
    expect(ackSummary(await h.mllp.send(msg('RIS_NORTH', 'N-1', 'NW', 'N-PAT-1'))).code).toBe('AA');
    // The RIS resends it under a new MSH-10 (its counter restarted, or an engine replays):
    // before, a second order and a second analysis; now the same order, AA.
    expect(ackSummary(await h.mllp.send(msg('RIS_NORTH', 'N-1b', 'NW', 'N-PAT-1'))).code).toBe(
      'AA',
    );
    const north = (
      await h.db.query(`SELECT id FROM orders WHERE filler_order_number = 'WALKIN-2001'`)
    ).rows;
    expect(north).toHaveLength(1);

    // Before: AA, ORC-1 CR, and RIS_NORTH's order (another patient) was cancelled.
    const foreign = await h.mllp.send(msg('RIS_SOUTH', 'S-1', 'CA', 'S-PAT-9'));
    expect(ackSummary(foreign).code).toBe('AE');
    expect(ackSummary(foreign).errors.join('\n')).toContain('204');
    const after = (
      await h.db.query(`SELECT cancel_requested_at FROM orders WHERE id = $1`, [north[0].id])
    ).rows[0];
    expect(after.cancel_requested_at).toBeNull();

    // Its own RIS cancels it by the same filler number.
    const own = await h.mllp.send(msg('RIS_NORTH', 'N-2', 'CA', 'N-PAT-1'));
    expect(parseHl7(own).get('ORC-1')).toBe('CR');
  });

  it('a LOINC code sent without its coding system (`24627-2^CT Chest`): AE 103 saying the table has it under LN', async () => {
    // Before: "Procedure code 24627-2 has no AI product configured" while the table shows 24627-2.
    const reply = await h.mllp.send(
      Buffer.from(
        [
          'MSH|^~\\&|RIS_H|HOSP_H|AI_ADAPTER|HOSP_H|20261012120000||ORM^O01|H-1|P|2.5.1',
          'PID|1||MH1^^^HOSP_H^MR||PATIENT^H||19700101|M',
          'ORC|NW|PL-H1|||SC',
          'OBR|1|PL-H1||24627-2^CT Chest',
        ].join('\r') + '\r',
        'latin1',
      ),
    );
    const ack = ackSummary(reply);
    expect(ack.code).toBe('AE');
    expect(ack.errors.join('\n')).toContain(
      'the product table lists 24627-2 for coding system LN; OBR-4.1 came with no coding system',
    );
    expect(await orderByPlacer('PL-H1')).toBeUndefined();
  });

  it('coding systems under their other names: HL7 `^LNC` and a FHIR LOINC OID system find the LN row', async () => {
    // Before: AE 103 "no AI product configured" (HL7) and 422 (FHIR) for a code the table has.
    const reply = await h.mllp.send(
      Buffer.from(
        [
          'MSH|^~\\&|RIS_L|HOSP_L|AI_ADAPTER|HOSP_L|20261012120000||ORM^O01|L-1|P|2.5.1',
          'PID|1||ML1^^^HOSP_L^MR||PATIENT^L||19700101|M',
          'ORC|NW|PL-L1|||SC',
          'OBR|1|PL-L1||24627-2^CT Chest^LNC',
        ].join('\r') + '\r',
        'latin1',
      ),
    );
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [] });
    expect((await orderByPlacer('PL-L1')).request.products).toEqual(['lung-nodule-ct']);

    const res = await postServiceRequest({
      resourceType: 'ServiceRequest',
      identifier: [{ system: 'http://ehr.example/placer', value: 'FHIR-OID-1' }],
      status: 'active',
      intent: 'order',
      code: { coding: [{ system: 'urn:oid:2.16.840.1.113883.6.1', code: '24725-4' }] },
      subject: { identifier: { system: 'http://ehr.example/mrn', value: 'O-1' } },
    });
    expect(res.status).toBe(201);
    expect((await orderByPlacer('FHIR-OID-1')).request.products).toEqual(['head-ct-hemorrhage']);
  });

  it('FHIR: identifiers as an HL7v2-to-FHIR converter writes them (visit number first, then FILL, no PLAC): each order of one visit is its own order', async () => {
    // Modelled on the LinuxForHealth hl7v2-fhir-converter ServiceRequest template: identifier
    // VN (PV1-19, else PID-18, else MSH-7) first, then FILL from ORC-3, PLAC only when ORC-2 was
    // valued; a filler-numbered RIS order has none. Before: the VN identifier was taken as the
    // placer number, so the second CT of visit V-7788 was answered 200 with the first order.
    const v2 = 'http://terminology.hl7.org/CodeSystem/v2-0203';
    const converted = (filler: string, loinc: string) => ({
      resourceType: 'ServiceRequest',
      identifier: [
        {
          type: { coding: [{ system: v2, code: 'VN', display: 'Visit number' }] },
          system: 'urn:id:extVisitID',
          value: 'V-7788',
        },
        {
          type: { coding: [{ system: v2, code: 'FILL', display: 'Filler Identifier' }] },
          system: 'urn:id:RIS',
          value: filler,
        },
      ],
      status: 'active',
      intent: 'order',
      code: { coding: [{ system: 'http://loinc.org', code: loinc }] },
      subject: { identifier: { system: 'http://ehr.example/mrn', value: 'VN-1' } },
      authoredOn: '2026-11-26T08:15:00+01:00',
    });
    const first = await postServiceRequest(converted('RIS-FILL-881', '24627-2'));
    const second = await postServiceRequest(converted('RIS-FILL-882', '24725-4'));
    expect([first.status, second.status]).toEqual([201, 201]);
    const [a, b] = await Promise.all([
      first.json() as Promise<{ id: string }>,
      second.json() as Promise<{ id: string }>,
    ]);
    expect(a.id).not.toBe(b.id);
    const rows = (
      await h.db.query(
        `SELECT placer_order_number, filler_order_number FROM orders WHERE id = ANY($1) ORDER BY filler_order_number`,
        [[a.id, b.id]],
      )
    ).rows;
    expect(rows).toEqual([
      { placer_order_number: null, filler_order_number: 'RIS-FILL-881' },
      { placer_order_number: null, filler_order_number: 'RIS-FILL-882' },
    ]);
    // A resend of the first is still the first order.
    const again = await postServiceRequest(converted('RIS-FILL-881', '24627-2'));
    expect(again.status).toBe(200);
    expect(((await again.json()) as { id: string }).id).toBe(a.id);
  });

  it('FHIR: a requester that is an Organization or a Device is no ordering provider (its display is not split into a name)', async () => {
    // R4 ServiceRequest.requester takes Organization | Device | Patient | RelatedPerson too; a
    // referral names the originating facility (as community-health referral feeds do:
    // requester Organization/580 with the site's name), an AI triage tool names its Device.
    // Before: 201 with orderingProvider {family: 'Department', given: ['Radiology']}, sent on
    // as the referring physician.
    const referral = (placer: string, requester: Record<string, unknown>) => ({
      resourceType: 'ServiceRequest',
      identifier: [{ system: 'http://ehr.example/placer', value: placer }],
      status: 'active',
      intent: 'order',
      code: { coding: [{ system: 'http://loinc.org', code: '24725-4' }] },
      subject: { identifier: { system: 'http://ehr.example/mrn', value: 'ORG-1' } },
      requester,
    });
    const fromSite = await postServiceRequest(
      referral('FHIR-REQ-ORG-1', {
        reference: 'Organization/580',
        display: 'Radiology Department',
      }),
    );
    const fromDevice = await postServiceRequest(
      referral('FHIR-REQ-DEV-1', { type: 'Device', display: 'Stroke AI triage' }),
    );
    expect([fromSite.status, fromDevice.status]).toEqual([201, 201]);
    for (const placer of ['FHIR-REQ-ORG-1', 'FHIR-REQ-DEV-1']) {
      const order = await orderByPlacer(placer);
      expect(order.request.orderingProvider).toBeUndefined();
      const [msg] = (
        await h.db.query(`SELECT quirks FROM inbound_messages WHERE id = $1`, [
          order.inbound_message_id,
        ])
      ).rows;
      expect(msg.quirks.map((q: { code: string }) => q.code)).toContain(
        'fhir-requester-not-a-practitioner',
      );
    }
  });

  it('FHIR: a requester that is a PractitionerRole (US Core) gives the ordering provider of its practitioner', async () => {
    // Before: 201 with no orderingProvider (only a Practitioner requester was read).
    const res = await postServiceRequest({
      resourceType: 'ServiceRequest',
      contained: [
        {
          resourceType: 'Practitioner',
          id: 'pr',
          identifier: [{ system: 'http://hl7.org/fhir/sid/us-npi', value: '1111111112' }],
          name: [{ family: 'Role', given: ['Rita'] }],
        },
        { resourceType: 'PractitionerRole', id: 'role', practitioner: { reference: '#pr' } },
      ],
      identifier: [{ system: 'http://ehr.example/placer', value: 'FHIR-ROLE-1' }],
      status: 'active',
      intent: 'order',
      code: { coding: [{ system: 'http://loinc.org', code: '24725-4' }] },
      subject: { identifier: { system: 'http://ehr.example/mrn', value: 'R-1' } },
      requester: { reference: '#role' },
    });
    expect(res.status).toBe(201);
    expect((await orderByPlacer('FHIR-ROLE-1')).request.orderingProvider).toEqual({
      identifier: { system: 'http://hl7.org/fhir/sid/us-npi', value: '1111111112' },
      name: { family: 'Role', given: ['Rita'] },
    });
  });
  it('a RIS reports the exam discontinued with ORC-1 SC and ORC-5 DC: the order is cancelled (ORR CR), not only recorded', async () => {
    // Before: AA, "status recorded", and the order went on to be analysed and its result
    // published for an exam the RIS had called off (dcm4chee-arc reads SC_DC as DISCONTINUED).
    const renumber: [string, string][] = [
      ['PO-88120', 'PO-88130'],
      ['FO-51277', 'FO-51287'],
      ['RW-ACC-77310', 'RW-ACC-77330'],
      ['20261012.77310', '20261012.77330'],
    ];
    const placed = await h.mllp.send(
      edited('orm-o01-v231-ihe-obr4-alternate', [...renumber, ['OF-20261012-0412', 'SC-NW-1']]),
    );
    expect(ackSummary(placed)).toMatchObject({ code: 'AA', errors: [] });
    const reply = await h.mllp.send(edited('orm-o01-v231-status-sc-dc', renumber));
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [], type: 'ORR' });
    expect(parseHl7(reply).get('ORC-1')).toBe('CR');
    const order = await orderByPlacer('PO-88130');
    expect(order.cancel_requested_at).not.toBeNull();

    // SC with any other status (IP: in process) is still recorded only.
    const inProcess = await h.mllp.send(
      edited('orm-o01-v231-status-sc-dc', [
        ...renumber,
        ['OF-20261012-0533', 'SC-IP-1'],
        ['||DC||', '||IP||'],
      ]),
    );
    expect(ackSummary(inProcess)).toMatchObject({ code: 'AA', type: 'ACK' });
  });

  it('ORC-1 SC whose ORC-5 is no table 0038 code (`dc`, `XX`): recorded only, with a warning ERR 103 at ORC-5 and a quirk; the order not cancelled', async () => {
    // Table 0038 (ID) is case-sensitive, as every table code read here: `dc` is not DC, and the
    // order is not cancelled on a guess. Before: AA with no ERR and no quirk, so a RIS writing
    // `dc` for an exam it had called off was never told why the order went on.
    const renumber: [string, string][] = [
      ['PO-88120', 'PO-88140'],
      ['FO-51277', 'FO-51297'],
      ['RW-ACC-77310', 'RW-ACC-77340'],
      ['20261012.77310', '20261012.77340'],
      ['|P|2.3.1', '|P|2.5.1'],
    ];
    const placed = await h.mllp.send(
      edited('orm-o01-v231-ihe-obr4-alternate', [...renumber, ['OF-20261012-0412', 'SC5-NW-1']]),
    );
    expect(ackSummary(placed)).toMatchObject({ code: 'AA', errors: [] });
    for (const [id, status, hint] of [
      ['SC5-dc', 'dc', /table 0038: its codes are case-sensitive \(DC\)/],
      ['SC5-XX', 'XX', /not in HL7 table 0038/],
    ] as const) {
      const reply = await h.mllp.send(
        edited('orm-o01-v231-status-sc-dc', [
          ...renumber,
          ['OF-20261012-0533', id],
          ['||DC||', `||${status}||`],
        ]),
      );
      const ack = ackSummary(reply);
      expect(ack).toMatchObject({ code: 'AA', type: 'ACK' });
      expect(ack.errors).toEqual([
        expect.stringMatching(/^\|ORC\^1\^5\^1\|103\^Table value not found\^HL70357\|W\|/),
      ]);
      expect(reply.toString('latin1')).toMatch(hint);
      expect((await quirksOf(id)).map((q) => q.code)).toContain('value-not-mapped');
    }
    expect((await orderByPlacer('PO-88140')).cancel_requested_at).toBeNull();
  });

  it('a Dutch EHR writes MSH-7 with +0100 and the exam start without offset: the start is 09:15 local, not 09:15 UTC', async () => {
    // Before: requestedAt 2026-03-12T09:15:00+00:00 (OBR-7 of the ORU an hour late).
    const ack = ackSummary(await h.mllp.send(hl7Fixture('orm-o01-v24-nl-msh7-offset')));
    expect(ack).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('ORDRAD4471');
    expect(new Date(order.request.requestedAt).toISOString()).toBe('2026-03-12T08:15:00.000Z');
  });

  it('NUL padding after the last segment (inside the MLLP frame) is dropped, not read as part of OBR-4', async () => {
    // Before: AE 103 "... OBR-4.1 came with coding system LN\X0A\\X00\\X00\".
    const [msh, pid, pv1, orc] = hl7Fixture('orm-o01-v24-nl-msh7-offset')
      .toString('latin1')
      .split('\r');
    const lines = [
      msh.replace('RAD20260312-0081', 'RAD20260312-0082'),
      pid,
      pv1,
      orc.replace('ORDRAD4471', 'ORDRAD4472'),
      'OBR|1|ORDRAD4472^EPIC||24590-2^MRI hersenen^LN', // OBR-4.3 the last field
    ];
    const padded = Buffer.from(`${lines.join('\r')}\r\0\0\0\0`, 'latin1');
    expect(ackSummary(await h.mllp.send(padded))).toMatchObject({ code: 'AA', errors: [] });
    expect((await orderByPlacer('ORDRAD4472')).request.products).toEqual(['brain-mr-volumetry']);
    expect(await quirksOf('RAD20260312-0082')).toContainEqual(
      expect.objectContaining({ code: 'nul-padding' }),
    );
  });
  it('a change sent as the ORC alone (new start and priority, no OBR): ORR XR, the order keeps its procedure and products', async () => {
    // Before: AE 101 "Requested procedure code missing" at OBR-4, an OBR the XO did not have.
    const renumber: [string, string][] = [
      ['PLC-100234', 'PLC-100777'],
      ['FIL-55012', 'FIL-55777'],
      ['ACC-20240318-0042', 'ACC-20240318-0777'],
    ];
    const nw = edited('orm-o01-v231-ihe-swf-zds', [
      ...renumber,
      ['MSGID20240318144217', 'ORC-ONLY-NW'],
    ]);
    expect(ackSummary(await h.mllp.send(nw))).toMatchObject({ code: 'AA', errors: [] });
    const xo = edited('orm-o01-v251-change-xo', [
      ...renumber,
      ['MSGID20240318152210', 'ORC-ONLY-XO'],
    ])
      .toString('latin1')
      .split('\r')
      .filter((l) => !/^(OBR|ZDS)\|/.test(l))
      .join('\r');
    // The dry run answers it too (its request carries no products to send upstream).
    const dry = await fetch(`${h.adapter.httpUrl}/api/mappings/dry-run`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.analyst}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({ hl7: xo }),
    });
    expect(dry.status).toBe(200);
    const reply = await h.mllp.send(Buffer.from(xo, 'latin1'));
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [], type: 'ORR' });
    expect(parseHl7(reply).get('ORC-1')).toBe('XR');
    const order = await orderByPlacer('PLC-100777');
    expect(order.request).toMatchObject({
      priority: 'stat',
      requestedAt: '2024-03-18T15:30:00+00:00',
      procedure: { code: '24627-2', system: 'LN' },
      products: ['lung-nodule-ct'],
      accessionNumber: 'ACC-20240318-0777',
    });
  });
  it("a ZDS written after PV1, before the ORC, of a message with one order: its Study Instance UID is the order's", async () => {
    // Before: AA and the UID dropped without a word (the ZDS was in no order group).
    const lines = edited('orm-o01-v231-ihe-swf-zds', [
      ['MSGID20240318144217', 'ZDS-EARLY-1'],
      ['PLC-100234', 'PLC-100888'],
      ['ACC-20240318-0042', 'ACC-20240318-0888'],
    ])
      .toString('latin1')
      .split('\r');
    const zds = lines.find((l) => l.startsWith('ZDS|'))!;
    const moved = lines.filter((l) => l !== zds);
    moved.splice(
      moved.findIndex((l) => l.startsWith('ORC|')),
      0,
      zds,
    );
    const ack = ackSummary(await h.mllp.send(Buffer.from(moved.join('\r'), 'latin1')));
    expect(ack).toMatchObject({ code: 'AA', errors: [] });
    expect((await orderByPlacer('PLC-100888')).request.studyInstanceUid).toBe(
      '1.2.276.0.7230010.3.1.2.2831176988.12345.1710769337.1',
    );
    expect(await quirksOf('ZDS-EARLY-1')).toContainEqual(
      expect.objectContaining({ code: 'segment-outside-order' }),
    );
  });

  it('an EHR reason for exam typed on several lines, its line breaks unescaped inside OBR-13: the OBR fields after the breaks are kept', async () => {
    // Before: AA, but everything after the first break was read as more OBR-13 text: no
    // accession (OBR-18), no ordering provider (OBR-16), no modality (OBR-24), and a reason for
    // study holding "|||3307" (a field separator and the provider's number).
    const ack = ackSummary(await h.mllp.send(hl7Fixture('orm-o01-v231-ehr-obr13-line-breaks')));
    expect(ack).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('77102977');
    expect(order.accession_number).toBe('MG-ACC-26-119012');
    expect(order.request).toMatchObject({
      accessionNumber: 'MG-ACC-26-119012',
      modality: 'CT',
      orderingProvider: { identifier: { value: '3307' }, name: { family: 'NAKASHIMA' } },
      requestedAt: '2026-10-15T11:00:00+00:00',
    });
    expect(JSON.stringify(order.request)).not.toContain('|');
    expect(await lineageOf(order.id)).toContainEqual(
      expect.objectContaining({ target: 'accessionNumber', source: 'OBR-18' }),
    );
    expect(await quirksOf('Q6612101533T7802')).toContainEqual({
      code: 'mixed-separators',
      detail: 'line break inside OBR-13 joined',
    });
  });

  it('a v2.3.1 order over a parse bound in OBR-31 (150 components): MSA-3 says what to send in 80 characters, not a sentence cut mid-word', async () => {
    // Before: MSA-3 `OBR-31 has 150 components in one repetition; at most 100 are accepted (HL7_MAX_C`
    // (the sentence cut at ST 80). The whole sentence stays in the audit record.
    const reply = await h.mllp.send(
      edited('orm-o01-v231-ihe-swf-zds', [
        ['MSGID20240318144217', 'BRIEF-COMP-1'],
        ['PLC-100234', 'PLC-BRIEF-1'],
        ['R05.9^Cough, unspecified^I10', `R05.9${'^x'.repeat(149)}`],
      ]),
    );
    expect(ackSummary(reply).code).toBe('AR');
    expect(parseHl7(reply).get('MSA-3')).toBe('Send at most 100 components: OBR-31 has 150');
  });

  it('a hand-edited order whose PV1 and OBR lines start lowercase (`pv1|`, `obr|`): AA, each read as its segment with a quirk, never joined to the field before it', async () => {
    // Before: `pv1|...` was taken for a line break inside PID-18 and `obr|...` for one inside
    // ORC-12: the order had no OBR, so no procedure, accession or modality (AE 101), and PID-18
    // held a field separator and the whole PV1.
    const controlId = 'LC-SEG-1';
    const reply = await h.mllp.send(
      edited('orm-o01-v231-ihe-swf-zds', [
        ['MSGID20240318144217', controlId],
        ['PLC-100234', 'PLC-LC-1'],
        ['FIL-55012', 'FIL-LC-1'],
        ['ACC-20240318-0042', 'ACC-LC-1'],
        ['\rPV1|', '\rpv1|'],
        ['\rOBR|', '\robr|'],
      ]),
    );
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('PLC-LC-1');
    expect(order.request).toMatchObject({
      accessionNumber: 'ACC-LC-1',
      procedure: { code: '24627-2', system: 'LN' },
      modality: 'CT',
    });
    const quirks = await quirksOf(controlId);
    expect(quirks).toContainEqual({
      code: 'lowercase-segment-id',
      detail: 'line 3 starts "pv1|": read as the PV1 segment',
    });
    expect(quirks).toContainEqual({
      code: 'lowercase-segment-id',
      detail: 'line 5 starts "obr|": read as the OBR segment',
    });
    expect(quirks).not.toContainEqual(expect.objectContaining({ code: 'mixed-separators' }));
  });

  it('an OMI^O23 whose segments after MSH are indented (a sender building it from an indented template literal): AA, each line read as its segment', async () => {
    // Modelled on a published Node.js sample (mllp-node) sending an OMI^O23 to dcm4chee-arc:
    // LF separators and four spaces before PID, ORC and OBR. Before: each indented line was
    // taken for a line break inside the field before it, so PID, ORC and OBR all became text
    // of MSH-18 and the sender was told AE 100 "No ORC/OBR order group" (with its PID on the
    // MSH-12 line instead, AR 203 "Version 2.5.1\X0A\    PID not supported"), though
    // whitespace before MSH was already tolerated.
    const reply = await h.mllp.send(hl7Fixture('omi-o23-v251-indented-segments'));
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('13044');
    expect(order.patient_id).toBe('DDS-40311');
    expect(order.accession_number).toBe('OMRP202603071710');
    expect(order.request).toMatchObject({
      procedure: { code: '24627-2', system: 'LN' },
      products: ['lung-nodule-ct'],
      modality: 'CT',
      patient: { name: { family: 'LIN', given: ['MEI'] }, sex: 'female' },
      fillerOrderNumber: { value: '13866', system: 'IHE_OM_OF' },
    });
    const quirks = await quirksOf('20260307171125');
    for (const [line, id] of [
      [2, 'PID'],
      [3, 'ORC'],
      [4, 'OBR'],
    ])
      expect(quirks).toContainEqual({
        code: 'leading-whitespace',
        detail: `line ${line}: whitespace before ${id}`,
      });
    expect(quirks).not.toContainEqual(expect.objectContaining({ code: 'mixed-separators' }));
  });

  it('an EHR discontinues its order (ORC-1 DC): ORR answers DR (discontinued as requested), and UD once the order has ended, not CR/UC', async () => {
    // Table 0119 answers DC with DR / UD as it answers CA with CR / UC. Before: `ORC|CR|`,
    // the answer to a cancel the EHR never sent, and `ORC|UC|` for an order already ended.
    const dc = (id: string, placer: string) =>
      edited('orm-o01-v23-ehr-discontinue-dc', [
        ['1064057101.1.771204.001', id],
        ['771204.001', placer],
      ]);
    const nw = (id: string, placer: string) =>
      edited('orm-o01-v23-ehr-discontinue-dc', [
        ['1064057101.1.771204.001', id],
        ['771204.001', placer],
        ['ORC|DC|', 'ORC|NW|'],
        ['||DC||', '||SC||'],
      ]);
    expect(ackSummary(await h.mllp.send(nw('DC-NW-1', '771204.101'))).code).toBe('CA');
    const reply = await h.mllp.send(dc('DC-DC-1', '771204.101'));
    expect(ackSummary(reply).code).toBe('CA');
    const text = reply.toString('latin1');
    expect(text).toMatch(/^MSH\|[^\r]*\|ORR\^O02\|/);
    expect(text).toMatch(/\rORC\|DR\|771204\.101\|771204\.101(\r|$)/);
    expect((await orderByPlacer('771204.101')).cancel_requested_at).not.toBeNull();

    expect(ackSummary(await h.mllp.send(nw('DC-NW-2', '771204.102'))).code).toBe('CA');
    await h.db.query(
      `UPDATE orders SET state = 'delivered' WHERE placer_order_number = '771204.102'`,
    );
    const late = await h.mllp.send(dc('DC-DC-2', '771204.102'));
    expect(late.toString('latin1')).toMatch(/\rORC\|UD\|771204\.102\|771204\.102(\r|$)/);
    expect((await orderByPlacer('771204.102')).cancel_requested_at).toBeNull();
  });

  it('a RIS acting as filler reports the order discontinued (ORC-1 OD): ORR answers DR, and UD once it has ended, as for DC; OC stays CR/UC', async () => {
    // Table 0119: OD "order/service discontinued" is the filler's discontinue, as OC is its
    // cancel; DR / UD answer a discontinue, CR / UC a cancel. Before: an OD was answered
    // `ORC|CR|` (canceled as requested) and `ORC|UC|`, the answers to a cancel, while the
    // placer's DC of the same order was answered DR / UD.
    const order = (id: string, placer: string, filler: string, acc: string) =>
      edited('orm-o01-v231-ihe-obr4-alternate', [
        ['PO-88120', placer],
        ['FO-51277', filler],
        ['RW-ACC-77310', acc],
        ['OF-20261012-0412', id],
        ['20261012.77310', `20261012.${placer.length}${id.length}${acc.slice(-1)}`],
      ]);
    const od = (id: string, placer: string, filler: string) =>
      edited('orm-o01-v231-filler-cancel-oc', [
        ['OF-20261012-0498', id],
        ['PO-88120', placer],
        ['FO-51277', filler],
        ['ORC|OC|', 'ORC|OD|'],
        ['||CA||', '||DC||'],
      ]);
    expect(
      ackSummary(await h.mllp.send(order('OD-NW-1', 'PO-OD-1', 'FO-OD-1', 'ACC-OD-1'))).code,
    ).toBe('AA');
    const reply = await h.mllp.send(od('OD-OD-1', 'PO-OD-1', 'FO-OD-1'));
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [] });
    expect(reply.toString('latin1')).toMatch(
      /\rORC\|DR\|PO-OD-1\^RIS_PLACER\|FO-OD-1\^DSS_OF(\r|$)/,
    );
    expect((await orderByPlacer('PO-OD-1')).cancel_requested_at).not.toBeNull();

    expect(
      ackSummary(await h.mllp.send(order('OD-NW-2', 'PO-OD-2', 'FO-OD-2', 'ACC-OD-2'))).code,
    ).toBe('AA');
    await h.db.query(`UPDATE orders SET state = 'delivered' WHERE placer_order_number = 'PO-OD-2'`);
    const late = await h.mllp.send(od('OD-OD-2', 'PO-OD-2', 'FO-OD-2'));
    expect(late.toString('latin1')).toMatch(
      /\rORC\|UD\|PO-OD-2\^RIS_PLACER\|FO-OD-2\^DSS_OF(\r|$)/,
    );
    expect((await orderByPlacer('PO-OD-2')).cancel_requested_at).toBeNull();
  });

  it('a line shaped like a segment whose ID is no segment (`wks|...`): AR naming the line, not joined to the field before it', async () => {
    // Before: AA, the line joined to ZDS-1 as a line break inside it (a Study Instance UID
    // holding `\nwks|`, dropped as no UID). A line with a segment's shape is never another
    // segment's text: the sender is told which line it could not place.
    const reply = await h.mllp.send(
      edited('orm-o01-v231-ihe-swf-zds', [
        ['MSGID20240318144217', 'LC-SEG-2'],
        ['PLC-100234', 'PLC-LC-2'],
        ['FIL-55012', 'FIL-LC-2'],
        ['\rZDS|', '\rwks|1|2\rZDS|'],
      ]),
    );
    const ack = ackSummary(reply);
    expect(ack.code).toBe('AR');
    expect(ack.errors).toHaveLength(1);
    expect(ack.errors[0]).toMatch(/100&Segment sequence error/);
    expect(parseHl7(reply).get('MSA-3')).toBe(
      'Escape the | or send a segment: line 6 starts "wks|", no segment ID',
    );
    expect(await orderByPlacer('PLC-LC-2')).toBeUndefined();
  });

  it('an interface engine that re-encoded a German RIS feed to UTF-8 and kept MSH-18 8859/1: names read as written, \\XE4\\ still in Latin-1', async () => {
    // Before: AA and the patient stored as MÃ¼LLER, JÃ¼RGEN (each UTF-8 byte read as a
    // Latin-1 letter), in the upstream metadata, the ORU and the DICOM SR alike.
    const ack = ackSummary(await h.mllp.send(hl7Fixture('orm-o01-v24-utf8-under-8859-1')));
    expect(ack).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('AUF-2023-118902');
    expect(order.request.patient.name).toMatchObject({ family: 'MÜLLER', given: ['JÜRGEN'] });
    expect(order.request.procedure.display).toBe('CT Schädel nativ');
    expect(order.request.notes).toEqual(['Patient ist ansprechbar; Gerät am Bett']);
    expect(await quirksOf('ORB230611091004002')).toContainEqual(
      expect.objectContaining({ code: 'utf8-despite-declared-charset' }),
    );
  });

  it("the same feed after an engine that also set MSH-18 to UNICODE UTF-8: the RIS's \\XE4\\ is still Latin-1, read as ä, not U+FFFD", async () => {
    // The engine re-encodes the text and rewrites MSH-18, but the \XE4\ the RIS wrote names a
    // Latin-1 byte, which is no UTF-8. Before: AA and the note stored as `Ger\uFFFDt am Bett`,
    // the letter lost without a quirk saying so.
    const ack = ackSummary(await h.mllp.send(hl7Fixture('orm-o01-v24-utf8-msh18-latin1-hex')));
    expect(ack).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('AUF-2023-119377');
    expect(order.request.patient.name).toMatchObject({ family: 'MÜLLER', given: ['JÜRGEN'] });
    expect(order.request.notes).toEqual(['Patient ist ansprechbar; Gerät am Bett']);
    expect(await quirksOf('ORB230611142207017')).toContainEqual({
      code: 'hex-data-not-utf8',
      detail: 'NTE-3.1.1: \\X..\\ bytes are no UTF-8; read as ISO 8859-1',
    });
  });

  it('an accession number scanned with the TAB a barcode scanner appends, escaped by the RIS (\\X09\\): AE 102 at OBR-18, not an AA for an order no study can match', async () => {
    // A keyboard-wedge scanner set to end each read with TAB (or CR) puts it in the RIS's
    // accession field, and the RIS writes it escaped. Before: AA, the order stored under
    // `ACC-20240318-0077<TAB>`, which no DICOM Accession Number (SH: no control characters)
    // can equal: its study was never matched, and nobody told the sender.
    const reply = await h.mllp.send(
      edited('orm-o01-v231-ihe-swf-zds', [
        ['MSGID20240318144217', 'ACC-TAB-1'],
        ['PLC-100234', 'PLC-100977'],
        ['FIL-55012', 'FIL-55077'],
        ['ACC-20240318-0042', 'ACC-20240318-0077\\X09\\'],
      ]),
    );
    expect(ackSummary(reply)).toMatchObject({
      code: 'AE',
      errors: ['OBR^1^18^102&Data type error&HL70357'],
    });
    // v2.3.1: MSA-3 (80) says what and what to do
    expect(parseHl7(reply).get('MSA-3')).toBe(
      'Remove the control character from the accession number (OBR-18)',
    );
    expect(await orderByPlacer('PLC-100977')).toBeUndefined();
    // The same accession sent without the TAB is taken.
    const clean = edited('orm-o01-v231-ihe-swf-zds', [
      ['MSGID20240318144217', 'ACC-TAB-2'],
      ['PLC-100234', 'PLC-100977'],
      ['FIL-55012', 'FIL-55077'],
      ['ACC-20240318-0042', 'ACC-20240318-0077'],
    ]);
    expect(ackSummary(await h.mllp.send(clean)).code).toBe('AA');
    expect((await orderByPlacer('PLC-100977')).accession_number).toBe('ACC-20240318-0077');
  });

  it.each([
    [
      'the patient ID used for matching (PID-3 MR) with an escaped TAB',
      'PAT-4711^',
      'PAT-4711\\X09\\^',
      'PID^1^3^102&Data type error&HL70357',
      'Remove the control character from the patient identifier (PID-3)',
    ],
    [
      'the patient ID used for matching with a raw BEL byte',
      'PAT-4711^',
      'PAT-4711\x07^',
      'PID^1^3^102&Data type error&HL70357',
      'Remove the control character from the patient identifier (PID-3)',
    ],
    [
      'the placer order number (ORC-2 and OBR-2) with an escaped CR',
      'PLC-100234^',
      'PLC-100234\\X0D\\^',
      'ORC^1^2^102&Data type error&HL70357',
      'Remove the control character from the placer order number (ORC-2)',
    ],
    [
      'the filler order number with a line break (\\.br\\)',
      'FIL-55012^',
      'FIL-55012\\.br\\^',
      'ORC^1^3^102&Data type error&HL70357',
      'Remove the control character from the filler order number (ORC-3)',
    ],
  ])(
    'an order identifier holding a control character: %s is AE 102 at the field, not an AA for an order no study or message can match',
    async (what, from, to, err, brief) => {
      // Before: AA, the order stored with the TAB/CR/LF in its patient ID or order number; the
      // patient ID never equals a study's Patient ID (LO holds no control character), and the
      // RIS's later messages never name the stored order number: the order waited for ever.
      const placer = `PLC-CTL-${what.length}`;
      const reply = await h.mllp.send(
        edited('orm-o01-v231-ihe-swf-zds', [
          [from, to],
          ['MSGID20240318144217', `ID-CTL-${what.length}`],
          ['PLC-100234', placer],
          ['FIL-55012', `FIL-CTL-${what.length}`],
          ['ACC-20240318-0042', `ACC-CTL-${what.length}`],
        ]),
      );
      expect(ackSummary(reply)).toMatchObject({ code: 'AE', errors: [err] });
      expect(parseHl7(reply).get('MSA-3')).toBe(brief);
      expect(await orderByPlacer(placer)).toBeUndefined();
      expect(await orderByPlacer(`${placer}\r`)).toBeUndefined();
    },
  );

  it('formatting commands (\\.br\\ \\.sp\\ \\.in\\ \\H\\) in a name, a code text, a provider and ST text: one space or nothing, with a quirk naming the place; NTE-3 (FT) keeps its line break', async () => {
    // Before: PID-5 `SCHMIDT\.br\JR` was stored as `SCHMIDT<LF>JR`, a line break in the
    // patient's family name (upstream, FHIR Patient.name, the ORU's PID-5 as \X0A\).
    // Formatting commands belong to FT only (v2.5.1 §2.7.6).
    const controlId = 'ID-FMT-1';
    const reply = await h.mllp.send(
      edited('orm-o01-v231-ihe-swf-zds', [
        ['MSGID20240318144217', controlId],
        ['PLC-100234', 'PLC-100979'],
        ['FIL-55012', 'FIL-55079'],
        ['ACC-20240318-0042', 'ACC-20240318-0080'],
        ['SCHMIDT^ANNA^MARIA', 'SCHMIDT\\.br\\JR^\\H\\ANNA\\N\\^MARIA\\.in+4\\'],
        ['^CT Chest^LN', '^CT\\.sp2\\Chest^LN'],
        ['^WELBY^MARCUS^^^DR^MD^^HOSPA|||', '^WELBY\\.br\\^MARCUS^^^DR^MD^^HOSPA|||'],
        ['Persistent cough, 30 pack-years', 'Persistent cough,\\.br\\30 pack-years'],
        ['\rZDS|', '\rNTE|1|P|Claustrophobic\\.br\\needs lorazepam\rZDS|'],
      ]),
    );
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('PLC-100979');
    expect(order.request.patient.name).toEqual({ family: 'SCHMIDT JR', given: ['ANNA', 'MARIA'] });
    expect(order.request.procedure).toMatchObject({ code: '24627-2', display: 'CT Chest' });
    expect(order.request.orderingProvider.name).toMatchObject({ family: 'WELBY' });
    expect(JSON.stringify(order.request.reasonForStudy ?? [])).not.toContain('\\n');
    expect(order.request.notes).toEqual(['Claustrophobic\nneeds lorazepam']);
    const quirks = await quirksOf(controlId);
    expect(quirks).toContainEqual({
      code: 'formatting-escape',
      detail: 'PID-5.1.1: \\.br\\ outside formatted text (FT) read as a space',
    });
    expect(quirks).toContainEqual({
      code: 'formatting-escape',
      detail: 'PID-5.2.1: \\H\\ highlighting dropped',
    });
    expect(quirks).toContainEqual({
      code: 'formatting-escape',
      detail: 'OBR-4.2.1: \\.sp\\ outside formatted text (FT) read as a space',
    });
    expect(JSON.stringify(order.request)).not.toMatch(/\\n(?!needs)/);
  });

  it('a control character in a PID-3 repetition the order is not matched by (an SS number): AA, that repetition dropped with a quirk, the MR kept', async () => {
    // Before: AA with `998877665<TAB>` stored as an identifier of the patient, sent on in the
    // ORU's PID-3 and the FHIR Patient. It is not the identifier studies are matched by.
    const controlId = 'ID-CTL-SS';
    const reply = await h.mllp.send(
      edited('orm-o01-v231-ihe-swf-zds', [
        ['MSGID20240318144217', controlId],
        ['PLC-100234', 'PLC-100978'],
        ['FIL-55012', 'FIL-55078'],
        ['ACC-20240318-0042', 'ACC-20240318-0079'],
        ['998877665^^^SSA^SS', '998877665\\X09\\^^^SSA^SS'],
      ]),
    );
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('PLC-100978');
    expect(order.patient_id).toBe('PAT-4711');
    expect(order.request.patient.identifiers).toEqual([
      { value: 'PAT-4711', system: 'HOSPA', type: 'MR' },
    ]);
    expect(await quirksOf(controlId)).toContainEqual(
      expect.objectContaining({ code: 'identifier-control-character' }),
    );
  });

  it('a v2.3.1 ZDS-1 that is not a DICOM UID (a component with a leading zero): AA without it, and the audit log says why', async () => {
    // Before: AA, the order without its Study Instance UID, and nothing anywhere saying so (the
    // warning ERR cannot travel in a v2.3.1 ACK, and no quirk was recorded).
    const ack = ackSummary(
      await h.mllp.send(
        edited('orm-o01-v231-ihe-swf-zds', [
          ['MSGID20240318144217', 'ZDS-BADUID-1'],
          ['PLC-100234', 'PLC-100901'],
          ['ACC-20240318-0042', 'ACC-20240318-0901'],
          ['.12345.1710769337.1^', '.012345.1710769337.1^'],
        ]),
      ),
    );
    expect(ack).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('PLC-100901');
    expect(order.study_instance_uid).toBeNull();
    expect(await quirksOf('ZDS-BADUID-1')).toContainEqual({
      code: 'value-not-mapped',
      detail: 'ZDS-1 is not a DICOM UID',
    });
    const audited = await h.db.query(
      `SELECT detail FROM audit_events WHERE kind = 'inbound.quirks'
          AND inbound_message_id = (SELECT id FROM inbound_messages WHERE message_control_id = $1)`,
      ['ZDS-BADUID-1'],
    );
    expect(JSON.stringify(audited.rows[0].detail)).toContain('ZDS-1 is not a DICOM UID');
  });

  it('MSH-18 8859/1 from a Windows-based EHR whose text holds code-page punctuation (0x92, 0x93/0x94, 0x96): read as Windows-1252, not C1 control codes', async () => {
    // Before: AA and the family name stored as O + U+0092 + NEILL (a C1 control code) in the
    // upstream metadata, FHIR and the DICOM SR; the quotes and dash of OBR-13 likewise.
    const raw = edited('orm-o01-v231-ehr-dg1-reason', [
      ['Q6612093012T7781', 'Q6612093012T7790'],
      ['77102345', '77102390'],
      ['MG-ACC-26-118830', 'MG-ACC-26-118890'],
      ['OKAFOR^GRACE', 'O\x92NEILL^GRACE'],
      ['Fall at home, on apixaban', '\x93Fall at home\x94 \x96 on apixaban'],
    ]);
    const reply = await h.mllp.send(raw);
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', errors: [] });
    const order = await orderByPlacer('77102390');
    expect(order.request.patient.name.family).toBe('O\u2019NEILL');
    expect(await quirksOf('Q6612093012T7790')).toContainEqual(
      expect.objectContaining({ code: 'windows-1252-bytes' }),
    );
    // Written back to this sender (its message was read as Windows-1252), ’ is the byte it
    // sent (0x92), not `?`; to a receiver of plain 8859/1 it is ', never a C1 control byte.
    expect(encodeText('O\u2019NEILL', '8859/1', 'windows-1252')).toEqual(
      Buffer.from('O\x92NEILL', 'latin1'),
    );
    expect(encodeText('O\u2019NEILL', '8859/1')).toEqual(Buffer.from("O'NEILL", 'latin1'));
  });
  it('bytes that read as C1 control characters (Windows-1252 undefined 0x81 0x8D 0x8F 0x90 0x9D; UTF-8 C2 80-C2 9F) in text: stored as U+FFFD as C0 controls are; in an identifier: AE 102 as C0 controls are', async () => {
    // Before: AA and U+0081, U+008D, U+009D stored in the name and the reason, and from there
    // in the upstream metadata, FHIR, the ORU and the SR.
    const windows = edited('orm-o01-v231-ehr-dg1-reason', [
      ['Q6612093012T7781', 'Q6612093012T7791'],
      ['77102345', '77102391'],
      ['MG-ACC-26-118830', 'MG-ACC-26-118891'],
      ['OKAFOR^GRACE', 'O\x92NEILL\x81^GRACE\x8d'],
      [
        'Long term (current) use of anticoagulants',
        '\x93Long term\x94 \x96 use of\x9d\x8f\x90 anticoagulants',
      ],
    ]);
    expect(ackSummary(await h.mllp.send(windows))).toMatchObject({ code: 'AA', errors: [] });
    const stored = await orderByPlacer('77102391');
    expect(stored.request.patient.name).toMatchObject({
      family: 'O\u2019NEILL\uFFFD',
      given: ['GRACE\uFFFD', 'N'],
    });
    expect(await quirksOf('Q6612093012T7791')).toContainEqual(
      expect.objectContaining({ code: 'unstorable-characters-replaced' }),
    );
    const all = JSON.stringify(stored.request);
    expect(all).toContain('\u201cLong term\u201d \u2013 use of\uFFFD\uFFFD\uFFFD anticoagulants');
    // eslint-disable-next-line no-control-regex -- no control character of either set is stored
    expect(all).not.toMatch(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]/);
    // the same feed re-encoded to UTF-8 by an engine: C2 81, C2 85 (NEL), C2 9D
    const utf8 = Buffer.from(
      edited('orm-o01-v231-ehr-dg1-reason', [
        ['Q6612093012T7781', 'Q6612093012T7792'],
        ['77102345', '77102392'],
        ['MG-ACC-26-118830', 'MG-ACC-26-118892'],
        ['|8859/1', '|UNICODE UTF-8'],
      ])
        .toString('latin1')
        .replace('OKAFOR^GRACE', 'OKAFOR\u0081^GRACE\u0085')
        .replace('use of anticoagulants', 'use of\u009d anticoagulants'),
      'utf8',
    );
    expect(ackSummary(await h.mllp.send(utf8))).toMatchObject({ code: 'AA', errors: [] });
    const fromUtf8 = await orderByPlacer('77102392');
    expect(fromUtf8.request.patient.name).toMatchObject({
      family: 'OKAFOR\uFFFD',
      given: ['GRACE\uFFFD', 'N'],
    });
    expect(JSON.stringify(fromUtf8.request)).toContain('use of\uFFFD anticoagulants');
    // an order number holding one is refused as one holding a C0 control is (no RIS names its
    // order by it again, no study's accession equals it)
    for (const [control, bytes] of [
      ['Q6612093012T7793', '77102393\x8d'],
      ['Q6612093012T7794', '77102394\xc2\x85'],
    ] as const) {
      const refused = edited('orm-o01-v231-ehr-dg1-reason', [
        ['Q6612093012T7781', control],
        ['77102345', bytes],
        ...(bytes.endsWith('\x85') ? ([['|8859/1', '|UNICODE UTF-8']] as [string, string][]) : []),
      ]);
      const ack = ackSummary(await h.mllp.send(refused));
      expect({ control, code: ack.code }).toEqual({ control, code: 'AE' });
      expect(ack.errors).toEqual([expect.stringMatching(/\^102/)]);
    }
  });
});
