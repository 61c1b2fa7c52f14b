import { MllpClient, parseHl7 } from '../../src/hl7';
import { TEST_TOKENS } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, expressions, postFhir, type Json } from '../helpers/fhir-fixtures';
import { ackSummary, hl7Fixture } from '../helpers/hl7-fixtures';

jest.setTimeout(180_000);

/**
 * The free-text values of an order (names, procedure and reason texts, notes, modality) have a
 * bound, as its identifiers do (src/domain/text-bounds.ts), applied once to the order model for
 * HL7 and FHIR: over it, the message is refused at the field and kept; within it, the value is
 * kept whole. Before: a 9 MB PID-5 family name was taken and stored as the patient's name
 * (and written back in the ORU's PID-5), and a 200,000-character cancel reason was stored on
 * the order and in the audit log.
 * Over real MLLP and FHIR REST against a running adapter, into PostgreSQL.
 */
describe('hostile: free-text bounds of the order model (real adapter, MLLP, FHIR REST)', () => {
  let h: FhirHarness;
  let mllp: MllpClient;

  beforeAll(async () => {
    h = await startFhirHarness();
    mllp = new MllpClient({
      host: '127.0.0.1',
      port: h.adapter.mllpPort,
      responseTimeoutMs: 60_000,
    });
  });
  afterAll(async () => {
    await mllp?.close();
    await h?.close();
  });

  const edited = (raw: Buffer, pairs: [string, string][]): Buffer => {
    let text = raw.toString('latin1');
    for (const [from, to] of pairs) {
      if (!text.includes(from)) throw new Error(`${from} not in the fixture`);
      text = text.split(from).join(to);
    }
    return Buffer.from(text, 'latin1');
  };
  const order = (control: string, placer: string, pairs: [string, string][]) =>
    edited(hl7Fixture('orm-o01-v231-ihe-swf-zds'), [
      ['MSGID20240318144217', control],
      ['PLC-100234', placer],
      ...pairs,
    ]);
  const ordersUnder = async (placer: string) =>
    (
      await h.db.query<{ id: string; request: Json; cancel_reason: string | null }>(
        `SELECT id, request, cancel_reason FROM orders WHERE placer_order_number = $1`,
        [placer],
      )
    ).rows;
  const outcomeOf = async (control: string) =>
    (
      await h.db.query<{ outcome: string; size: number }>(
        `SELECT outcome, octet_length(raw) AS size FROM inbound_messages WHERE message_control_id = $1`,
        [control],
      )
    ).rows;

  it('HL7: a 9 MB family name, a 1,001-character reason for study (OBR-31.2) and a 70,000-character note are AE 102 at their field, kept, no order; a 300-character name is taken whole', async () => {
    const huge = 'X'.repeat(9 * 1024 * 1024);
    const cases: Array<[string, string, [string, string][], RegExp, RegExp]> = [
      [
        'TXT-NAME',
        'PLC-TXT-NAME',
        [['SCHMIDT^ANNA', `${huge}^ANNA`]],
        /^PID\^1\^5\^102&/,
        /family name is 9437184 characters, more than the 1000/,
      ],
      [
        'TXT-OBR31',
        'PLC-TXT-OBR31',
        [['Cough, unspecified', 'c'.repeat(1001)]],
        /^OBR\^1\^31\^102&/,
        /reason-for-study text is 1001 characters, more than the 1000/,
      ],
      [
        'TXT-NTE',
        'PLC-TXT-NTE',
        [['ZDS|', `NTE|1||${'n'.repeat(70_000)}\rZDS|`]],
        /^NTE\^1\^3\^102&/,
        /note is 70000 characters, more than the 65536/,
      ],
    ];
    for (const [control, placer, pairs, err, text] of cases) {
      const reply = await mllp.send(order(control, placer, pairs));
      const ack = ackSummary(reply);
      expect({ control, code: ack.code }).toEqual({ control, code: 'AE' });
      expect(ack.errors).toEqual([expect.stringMatching(err)]);
      expect(parseHl7(reply).get('MSA-3')).toMatch(text);
      expect(await ordersUnder(placer)).toEqual([]);
      // the message is kept whole (its bytes), answered as refused
      const [kept] = await outcomeOf(control);
      expect(kept?.outcome).toBe('rejected');
    }
    expect((await outcomeOf('TXT-NAME'))[0]!.size).toBeGreaterThan(9 * 1024 * 1024);

    // Long but real: a 300-character family name (more than XPN's 250 in v2.5.1) is taken and
    // kept whole in our record.
    const long = `SCHMIDT-${'VONDERHEIDE-'.repeat(24)}ENDE`.slice(0, 300);
    const ok = ackSummary(
      await mllp.send(order('TXT-LONG', 'PLC-TXT-LONG', [['SCHMIDT^ANNA', `${long}^ANNA`]])),
    );
    expect(ok).toMatchObject({ code: 'AA', errors: [] });
    const [taken] = await ordersUnder('PLC-TXT-LONG');
    expect((taken!.request as { patient: { name: { family: string } } }).patient.name.family).toBe(
      long,
    );
  });

  it('HL7: an ADT^A08 renaming the patient, or an ADT^A40 merging into one, with a 5,000-character family name is AE 102 at PID-5', async () => {
    const a08 = edited(hl7Fixture('adt-a08-v251-update'), [
      ['SCHMIDT-BERGER^ANNA', `${'B'.repeat(5000)}^ANNA`],
    ]);
    const ack = ackSummary(await mllp.send(a08));
    expect(ack.code).toBe('AE');
    // v2.5.1: ERR-2 the location (PID-5.1.1, FN.1 surname), ERR-3 the condition 102
    expect(ack.errors).toEqual([
      expect.stringMatching(/^\|PID\^1\^5\^1\^1\|102\^.*family name is 5000 characters/),
    ]);
    const a40 = edited(hl7Fixture('adt-a40-v251-merge'), [
      ['SCHMIDT-BERGER^ANNA', `${'B'.repeat(5000)}^ANNA`],
    ]);
    const merge = ackSummary(await mllp.send(a40));
    expect(merge.code).toBe('AE');
    expect(merge.errors).toEqual([
      expect.stringMatching(/^\|PID\^1\^5\^1\^1\|102\^.*family name is 5000 characters/),
    ]);
  });

  it('FHIR: a contained Patient family name of 100,000 characters, a procedure display of 5,000 and a note of 70,000 are 422 on the element, kept, no order; a 300-character name is taken', async () => {
    const patient = (family: string) => ({
      contained: [
        {
          resourceType: 'Patient',
          id: 'p',
          identifier: [{ system: 'urn:example:mrn', value: 'MRN-TXT-1' }],
          name: [{ family, given: ['Anna'] }],
        },
      ],
      subject: { reference: '#p' },
    });
    const cases: Array<[string, string, Json, string, RegExp]> = [
      [
        'name',
        'FHIR-TXT-NAME',
        patient('Y'.repeat(100_000)),
        'ServiceRequest.contained[0].name[0].family',
        /family name is 100000 characters, more than the 1000/,
      ],
      [
        'procedure',
        'FHIR-TXT-PROC',
        {
          code: {
            coding: [{ system: 'http://loinc.org', code: '24627-2', display: 'd'.repeat(5000) }],
          },
        },
        'ServiceRequest.code.coding[0].display',
        /procedure text is 5000 characters, more than the 1000/,
      ],
      [
        'note',
        'FHIR-TXT-NOTE',
        { note: [{ text: 'ok' }, { text: 'n'.repeat(70_000) }] },
        'ServiceRequest.note[1].text',
        /note is 70000 characters, more than the 65536/,
      ],
      [
        // a requester known by its display only: its name is split from the display, and the
        // refusal names the display (diagnostics said `requester.display.family`, no element)
        'requester',
        'FHIR-TXT-REQ',
        { requester: { display: `Dr. Adam ${'R'.repeat(1500)}` } },
        'ServiceRequest.requester.display',
        /ordering provider's family name is 1500 characters, more than the 1000/,
      ],
    ];
    for (const [what, placer, changes, path, text] of cases) {
      const res = await postFhir(
        h.adapter,
        '/fhir/ServiceRequest',
        chestCtRequest(placer, changes),
      );
      expect({ what, status: res.status, at: expressions(res.body) }).toEqual({
        what,
        status: 422,
        at: [path],
      });
      expect(JSON.stringify(res.body)).toMatch(text);
      // the diagnostics name the element the expression names, not an inner source path
      const issues = (res.body as { issue: Array<{ diagnostics: string }> }).issue;
      expect({ what, diagnostics: issues.map((i) => i.diagnostics.split(': ')[0]) }).toEqual({
        what,
        diagnostics: [path],
      });
      expect(await ordersUnder(placer)).toEqual([]);
    }
    const long = 'L'.repeat(300);
    const ok = await postFhir(
      h.adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('FHIR-TXT-LONG', patient(long)),
    );
    expect(ok.status).toBe(201);
    const [taken] = await ordersUnder('FHIR-TXT-LONG');
    expect((taken!.request as { patient: { name: { family: string } } }).patient.name.family).toBe(
      long,
    );
  });

  it('API: a 200,000-character cancel reason is 400 naming the bound, nothing stored; 1,000 characters are taken', async () => {
    expect(ackSummary(await mllp.send(order('TXT-CA', 'PLC-TXT-CA', []))).code).toBe('AA');
    const [o] = await ordersUnder('PLC-TXT-CA');
    const cancel = (reason: string) =>
      // an order over HL7 carries no sender token: admin cancels it through the API
      fetch(`${h.adapter.httpUrl}/api/orders/${o!.id}/cancel`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.admin}`,
          'content-type': 'application/json',
        },
        body: JSON.stringify({ reason }),
      });
    const refused = await cancel('r'.repeat(200_000));
    expect(refused.status).toBe(400);
    expect(refused.headers.get('content-type')).toMatch(/problem\+json/);
    expect(JSON.stringify(await refused.json())).toMatch(/reason: at most 1000 characters/);
    expect((await ordersUnder('PLC-TXT-CA'))[0]!.cancel_reason).toBeNull();
    const audited = await h.db.query(
      `SELECT count(*)::int AS n FROM audit_events WHERE length(coalesce(detail::text, '') || summary) > 100000`,
    );
    expect(audited.rows[0].n).toBe(0);

    const taken = await cancel('r'.repeat(1000));
    expect(taken.status).toBe(202);
    expect((await ordersUnder('PLC-TXT-CA'))[0]!.cancel_reason).toBe(`API: ${'r'.repeat(1000)}`);
  });
});
