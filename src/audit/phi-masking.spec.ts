import {
  maskDate,
  maskEventDetail,
  maskHl7Text,
  maskIdentifier,
  maskJson,
  maskName,
  maskUpstreamReport,
  ruleForTarget,
} from './phi-masking';

/** An HL7 message of these segments (CR-separated), masked, split back into its segments. */
function maskSegments(segments: string[]): string[] {
  return maskHl7Text(segments.join('\r')).split('\r');
}

describe('PHI masking', () => {
  it.each([
    { mask: maskName, value: 'SCHMIDT', shown: 'S***' },
    { mask: maskName, value: 'Anna Maria', shown: 'A*** M***' },
    { mask: maskName, value: 'Élodie', shown: 'É***' },
    { mask: maskDate, value: '1956-02-14', shown: '1956-**-**' },
    { mask: maskDate, value: '19560214', shown: '1956****' },
    { mask: maskDate, value: '198507', shown: '1985**' },
    { mask: maskDate, value: 'unknown', shown: '***' },
    { mask: maskIdentifier, value: 'PAT-4711', shown: '***11' },
    { mask: maskIdentifier, value: 'B-771', shown: '***' }, // too short to show any of it
  ])(
    'keeps initials, the birth year and the last two identifier characters: $value → $shown',
    ({ mask, value, shown }) => {
      expect(mask(value)).toBe(shown);
    },
  );

  it.each([
    ['patient.name.family', 'name'],
    ['patient.birthDate', 'date'],
    ['patient.identifiers[0].value', 'id'],
    ['priorIdentifiers[1].value', 'id'],
    ['notes[0]', 'full'],
    ['patient.sex', undefined],
    ['accessionNumber', undefined],
    ['placerOrderNumber.value', undefined],
  ])(
    'decides by lineage target (%s → %s); sex and order identifiers stay readable',
    (target, rule) => {
      expect(ruleForTarget(target)).toBe(rule);
    },
  );

  it('masks raw HL7 free text like the mapped view: NTE-3 and OBR-13 hidden, OBR-31 codes shown', () => {
    const masked = maskSegments([
      'MSH|^~\\&|RIS|H|AI|H|20240318144217||ORM^O01|M1|P|2.5.1',
      'OBR|1|PLC-1^RIS||24627-2^CT Chest^LN|||||||||Persistent cough, 30 pack-years|||||ACC-1||||||CT|||||||R05.9^Cough, unspecified^I10~Z87.891^History of nicotine dependence^I10',
      'NTE|1|P|Pt claustrophobic \\F\\ needs lorazepam|RE',
    ]);
    expect(masked[1]).toContain('|***|');
    expect(masked[1]).not.toContain('cough');
    expect(masked[1]!.split('|')[31]).toBe('R05.9^***^I10~Z87.891^***^I10');
    expect(masked[2]).toBe('NTE|1|P|***|RE');
  });

  it('shows the Study Instance UID of the IHE ZDS segment like IPC-3; other Z-segments stay hidden', () => {
    // IHE RAD TF-2 (SWF ORM^O01): ZDS-1 is the Study Instance UID (RP: UID^application^type^subtype)
    const masked = maskSegments([
      'MSH|^~\\&|RADIS1|IHEDEMO|DSS_OF|IHEDEMO|20240318144217||ORM^O01|M1|P|2.3.1',
      'ZDS|1.2.276.0.7230010.3.1.2.2831176988.12345.1710769337.1^DSS_OF^Application^DICOM|SCHMIDT',
      'ZPI|1.2.3^PAT-4711',
    ]);
    expect(masked[1]).toBe(
      'ZDS|1.2.276.0.7230010.3.1.2.2831176988.12345.1710769337.1^DSS_OF^Application^DICOM|***',
    );
    expect(masked[2]).toBe('ZPI|***^***');
  });

  it("masks the upstream's report JSON by allow-list: patient data and measurements hidden", () => {
    expect(
      maskUpstreamReport({
        report_kind: 'failure',
        status: 'FAILED',
        reason: 'fewer than 20 slices',
        patient_name: 'SCHMIDT ANNA',
        patient: { birth_date: '1956-02-14' },
        findings: [{ structure: 'hippocampus', volume_ml: 3.1 }],
        qc_bypassed: false,
      }),
    ).toEqual({
      report_kind: 'failure',
      status: 'FAILED',
      reason: 'fewer than 20 slices',
      patient_name: '***',
      patient: { birth_date: '***' },
      findings: [{ structure: '***', volume_ml: '***' }],
      qc_bypassed: false,
    });
  });

  it("masks an upstream report nested deeper than it shows (a finding's flag 20,000 levels deep) without running out of stack", () => {
    // The results fetch keeps such a report (test/hostile/upstream-results.test.ts); its
    // masked view on the audit page read "(not valid JSON; hidden while masked)".
    let flag: unknown = 'x';
    for (let i = 0; i < 20_000; i++) flag = [flag];
    const masked = maskUpstreamReport({
      report_kind: 'results',
      patient_name: 'SCHMIDT ANNA',
      findings: [{ structure: 'hippocampus', flag }],
    }) as { report_kind: string; patient_name: string; findings: Array<{ flag: unknown }> };
    expect(masked.report_kind).toBe('results');
    expect(masked.patient_name).toBe('***');
    let level = masked.findings[0]!.flag;
    let depth = 0;
    while (Array.isArray(level)) {
      level = level[0];
      depth++;
    }
    expect(depth).toBeLessThan(64);
    expect(level).toBe('*** (nested deeper than 64 levels)');
    expect(() => JSON.stringify(masked)).not.toThrow();
  });

  it('masks the conversion rule of a PHI lineage line (it quotes the source text)', () => {
    expect(
      maskJson({
        target: 'patient.birthDate',
        source: 'PID-7',
        value: '1956-02-14',
        ruleId: 'hl7.patient.birth-date',
        rule: 'HL7 DT: 19560214 → 1956-02-14',
      }),
    ).toEqual({
      target: 'patient.birthDate',
      source: 'PID-7',
      value: '1956-**-**',
      ruleId: 'hl7.patient.birth-date',
      rule: 'HL7 DT: ***',
    });
    const product = {
      target: 'products[0]',
      source: 'OBR-4.1',
      value: 'brain-mr-volumetry',
      ruleId: 'hl7.order.products',
      rule: 'product-table: 24590-2^LN → brain-mr-volumetry',
    };
    expect(maskJson(product)).toEqual(product);
  });

  it('masks HL7 PID, NK1, MRG and PV1 fields by position, leaving the structure intact', () => {
    // IHE SWF fixture shape (v2.3.1, CR separators), with NK1 and MRG added.
    const segments = [
      'MSH|^~\\&|RADIS1|IHEDEMO|DSS_OF|IHEDEMO|20240318144217||ORM^O01|MSGID20240318144217|P|2.3.1',
      'PID|||PAT-4711^^^HOSPA^MR~998877665^^^SSA^SS||SCHMIDT^ANNA^MARIA^^^^L||19560214|F|||Hauptstrasse 12^^Berlin^^10115^DE||^PRN^PH^^49^30^5551234|||||ACCT-77001',
      'NK1|1|SCHMIDT^PETER|SPO^Spouse^HL70063|Hauptstrasse 12^^Berlin',
      'MRG|PAT-4700^^^HOSPA^MR',
      'PV1||O|RAD^^^RADIOLOGY|||||1234^WELBY^MARCUS^^^DR|||||||||||V-2024-0815^^^HOSPA^VN',
      'OBR|1|PLC-100234^RADIS1|FIL-55012^DSS_OF|24627-2^CT Chest^LN||||||||||||||ACC-20240318-0042',
    ];
    const masked = maskSegments(segments);
    expect(masked[0]).toBe(segments[0]);
    expect(masked[1]).toBe(
      'PID|||***11^^^HOSPA^MR~***65^^^SSA^SS||S***^A***^M***^^^^L||1956****|F|||***^^***^^***^***||^***^***^^***^***^***|||||***01',
    );
    expect(masked[2]).toBe('NK1|1|S***^P***|SPO^Spouse^HL70063|***^^***');
    expect(masked[3]).toBe('MRG|***00^^^HOSPA^MR');
    expect(masked[4]).toContain('|***15^^^HOSPA^VN');
    expect(masked[4]).toContain('1234^WELBY^MARCUS'); // the referring doctor is not the patient
    expect(masked[5]).toBe(segments[5]);
  });

  it('honours the message delimiters (v2.8 truncation character) and LF separators', () => {
    const text =
      'MSH|^~\\&#|EPIC|NW|AI|RAD|20260112161722-0500||OMI^O23^OMI_O23|8817261|P|2.8\nPID|1||E4410029^^^EPI^MR||NGUYEN^THANH^V^JR||19710305|M\n';
    expect(maskHl7Text(text)).toBe(
      'MSH|^~\\&#|EPIC|NW|AI|RAD|20260112161722-0500||OMI^O23^OMI_O23|8817261|P|2.8\nPID|1||***29^^^EPI^MR||N***^T***^V***^J***||1971****|M',
    );
  });

  it('masks our OrderRequest, lineage lines, FHIR person resources and embedded HL7', () => {
    const masked = maskJson({
      request: {
        patient: {
          identifiers: [{ value: 'PAT-4711', system: 'HOSPA', type: 'MR' }],
          name: { family: 'SCHMIDT', given: ['ANNA'] },
          birthDate: '1956-02-14',
          sex: 'female',
        },
        accessionNumber: 'ACC-20240318-0042',
        notes: ['call Mrs Schmidt on 555-1234'],
      },
      lineage: [
        { target: 'patient.name.family', source: 'PID-5.1', value: 'SCHMIDT', ruleId: 'r1' },
        { target: 'accessionNumber', source: 'OBR-18', value: 'ACC-1', ruleId: 'r2' },
      ],
      bundle: {
        resourceType: 'Bundle',
        entry: [
          {
            resource: {
              resourceType: 'Patient',
              identifier: [{ system: 'urn:oid:1.2.3', value: '7800123' }],
              name: [{ use: 'official', family: 'DUBOIS', given: ['HÉLÈNE'] }],
              telecom: [{ system: 'phone', value: '+33 4 72 00 00 00' }],
              birthDate: '1985-07',
              contact: [{ name: { family: 'DUBOIS', given: ['Marc'] } }],
            },
          },
          {
            resource: {
              resourceType: 'ServiceRequest',
              subject: { reference: 'Patient/p1', display: 'Hélène Dubois' },
              identifier: [{ value: 'DP-776120' }],
            },
          },
        ],
      },
      hl7: 'MSH|^~\\&|A|B|C|D|20240318||ORU^R01|X1|P|2.5.1\rPID|1||PAT-4711^^^HOSPA^MR||SCHMIDT^ANNA',
    });
    const text = JSON.stringify(masked);
    for (const phi of [
      'SCHMIDT',
      'Schmidt',
      'ANNA',
      '1956-02-14',
      'PAT-4711',
      'DUBOIS',
      'HÉLÈNE',
      'Hélène',
      '7800123',
      '+33',
      'Marc',
      '555-1234',
    ]) {
      expect(text).not.toContain(phi);
    }
    const m = masked as {
      request: {
        patient: { identifiers: unknown[]; name: unknown; sex: string };
        accessionNumber: string;
      };
      lineage: Array<{ value: string }>;
      bundle: { entry: Array<{ resource: Record<string, unknown> }> };
    };
    expect(m.request.patient.identifiers).toEqual([
      { value: '***11', system: 'HOSPA', type: 'MR' },
    ]);
    expect(m.request.patient.name).toEqual({ family: 'S***', given: ['A***'] });
    expect(m.request.patient.sex).toBe('female');
    expect(m.request.accessionNumber).toBe('ACC-20240318-0042');
    expect(m.lineage.map((l) => l.value)).toEqual(['S***', 'ACC-1']);
    expect(m.bundle.entry[0]!.resource.name).toEqual([
      { use: 'official', family: 'D***', given: ['H***'] },
    ]);
    expect(m.bundle.entry[0]!.resource.birthDate).toBe('1985-**');
    // a ServiceRequest's own identifier is the order's, not the patient's
    expect(m.bundle.entry[1]!.resource.identifier).toEqual([{ value: 'DP-776120' }]);
    expect(m.bundle.entry[1]!.resource.subject).toEqual({
      reference: 'Patient/p1',
      display: 'H*** D***',
    });
  });
});

describe('an upstream.call error for an analyst: the upstream code, never its words', () => {
  const call = (error: Record<string, unknown>) =>
    (
      maskEventDetail('upstream.call', { operation: 'new-order', error }) as {
        error: { message: string };
      }
    ).error.message;

  it('a refusal with words: the code stays, the words point to the timeline', () => {
    expect(
      call({
        code: 'client_error',
        upstreamCode: 'invalid_metadata',
        message:
          'new-order: upstream answered 422 (invalid_metadata: no Erika Mustermann born 12.08.1964)',
      }),
    ).toBe(
      "new-order: upstream answered 422 (invalid_metadata: [the upstream's words: on the order's timeline])",
    );
  });

  it('a refusal with a code only is shown as it is; one without a code hides all it said', () => {
    expect(
      call({
        code: 'conflict',
        upstreamCode: 'order_not_pending',
        message: 'upload-single: upstream answered 409 (order_not_pending)',
      }),
    ).toBe('upload-single: upstream answered 409 (order_not_pending)');
    expect(
      call({
        code: 'client_error',
        message: 'new-order: upstream answered 400 (Mustermann: unknown)',
      }),
    ).toBe("new-order: upstream answered 400 ([the upstream's words: on the order's timeline])");
  });

  it('our note on the answer (a redirect not followed) stays after the code or the hidden words', () => {
    const adapterNote =
      'a redirect to host other.example that is not followed (IMAGING_BASE_URL must be the final address)';
    expect(
      call({
        code: 'redirected',
        upstreamCode: 'moved',
        adapterNote,
        message: `new-order: upstream answered 302 (moved), ${adapterNote}`,
      }),
    ).toBe(`new-order: upstream answered 302 (moved), ${adapterNote}`);
    expect(
      call({
        code: 'redirected',
        upstreamCode: 'moved',
        adapterNote,
        message: `new-order: upstream answered 302 (moved: Erika Mustermann), ${adapterNote}`,
      }),
    ).toBe(
      `new-order: upstream answered 302 (moved: [the upstream's words: on the order's timeline]), ${adapterNote}`,
    );
  });

  it('our own words go through the free-text rule', () => {
    expect(
      call({
        code: 'server_error',
        message: 'new-order: gave up after 6 attempts (last: status 500)',
      }),
    ).toBe('new-order: gave up after 6 attempts (last: status 500)');
  });
});
