import { checkUpstreamReport } from './upstream-documents.check';

const expected = {
  upstreamOrderId: '3f1b2c4d-0000-4000-8000-0000000000aa',
  studyUids: ['1.2.826.0.1.3680043.8.498.1'],
};
const json = (kind: 'results' | 'failure' | 'qc', body: unknown) => ({
  kind,
  reportType: kind === 'qc' ? 'results' : 'JSON',
  body: Buffer.from(JSON.stringify(body)),
});

describe('checkUpstreamReport', () => {
  it('a PDF: the %PDF- header within the first 1024 bytes (ISO 32000-1 §7.5.2), nothing else', () => {
    const pdf = (bytes: string) => ({
      kind: 'results' as const,
      reportType: 'PDF',
      body: Buffer.from(bytes),
    });
    expect(checkUpstreamReport(pdf('%PDF-1.7\n%âãÏÓ\n'), expected).accepted).toBe(true);
    expect(checkUpstreamReport(pdf(`${' '.repeat(1024)}%PDF-1.4`), expected).accepted).toBe(true);
    expect(checkUpstreamReport(pdf(`${' '.repeat(1025)}%PDF-1.4`), expected)).toMatchObject({
      accepted: false,
      foreign: false,
    });
    expect(checkUpstreamReport(pdf('<!DOCTYPE html><title>502</title>'), expected)).toEqual({
      accepted: false,
      foreign: false,
      reason: 'not a PDF (no %PDF- header in its first 1024 bytes)',
    });
  });

  it('our order id in upper case and our study UID with its DICOM padding are ours', () => {
    const body = {
      order_id: expected.upstreamOrderId.toUpperCase(),
      study_uid: `${expected.studyUids[0]}\u0000`,
    };
    expect(checkUpstreamReport(json('results', body), expected).accepted).toBe(true);
    expect(
      checkUpstreamReport(
        json('results', { ...body, study_uid: `${expected.studyUids[0]}1` }),
        expected,
      ),
    ).toMatchObject({ accepted: false, foreign: true });
  });

  it('a results or failure report saying it is another kind (report_kind) is refused with what came with it', () => {
    const ours = { order_id: expected.upstreamOrderId, study_uid: expected.studyUids[0] };
    expect(
      checkUpstreamReport(json('results', { ...ours, report_kind: 'failure' }), expected),
    ).toEqual({
      accepted: false,
      foreign: true,
      reason: 'is a failure report (its report_kind), not the results asked for',
    });
    expect(
      checkUpstreamReport(json('failure', { ...ours, report_kind: ' Results ' }), expected),
    ).toMatchObject({ accepted: false, foreign: true });
    // its own kind, a kind we do not know, and a QC report (report_type `results`) pass
    for (const [kind, said] of [
      ['results', 'results'],
      ['failure', 'failure'],
      ['results', 'volumetry'],
      ['qc', 'results'],
    ] as const) {
      const body =
        kind === 'qc'
          ? { round: 'latest', report: { report_kind: said } }
          : { ...ours, report_kind: said };
      expect(checkUpstreamReport(json(kind, body), expected).accepted).toBe(true);
    }
  });

  it('a JSON report: an object, about our order and study when it names them', () => {
    const ours = { order_id: expected.upstreamOrderId, study_uid: expected.studyUids[0] };
    expect(checkUpstreamReport(json('results', { ...ours, findings: [] }), expected).accepted).toBe(
      true,
    );
    expect(checkUpstreamReport(json('results', { findings: [] }), expected).accepted).toBe(true);
    expect(checkUpstreamReport(json('failure', [ours]), expected)).toMatchObject({
      accepted: false,
      reason: 'not a JSON object',
    });
    expect(
      checkUpstreamReport(
        { kind: 'results', reportType: 'JSON', body: Buffer.from('{"a":NaNa}') },
        expected,
      ),
    ).toMatchObject({ accepted: false, reason: 'not JSON' });
    // Python's json.dumps writes a float that is not finite as a bare NaN: a value that is not
    // a number (left out when it is a measurement), not a report that is not JSON
    expect(
      checkUpstreamReport(
        { kind: 'results', reportType: 'JSON', body: Buffer.from('{"a":NaN}') },
        expected,
      ),
    ).toMatchObject({ accepted: true });
    expect(
      checkUpstreamReport(
        json('results', { ...ours, order_id: '7d0c1e52-9b7a-4c1e-8f3a-2b6d5e4c3a21' }),
        expected,
      ),
    ).toMatchObject({ accepted: false, foreign: true });
    expect(
      checkUpstreamReport(
        json('qc', { round: 'latest', report: { ...ours, study_uid: '1.2.3' } }),
        expected,
      ),
    ).toMatchObject({
      accepted: false,
      foreign: true,
      reason: expect.stringMatching(/another study/),
    });
    // No study of our own known yet: the study is not compared.
    expect(
      checkUpstreamReport(json('results', { ...ours, study_uid: '1.2.3' }), {
        ...expected,
        studyUids: [],
      }).accepted,
    ).toBe(true);
  });

  it('a JSON report naming a patient or accession: ours (any of the patient IDs, padding aside), or refused as foreign', () => {
    const ours = { ...expected, patientIds: ['PAT-1', '123456789'], accessionNumber: 'ACC-1' };
    const report = (extra: Record<string, unknown>) =>
      json('results', { order_id: expected.upstreamOrderId, ...extra });
    expect(
      checkUpstreamReport(report({ patient_id: 'PAT-1 ', accession_number: 'ACC-1\u0000' }), ours)
        .accepted,
    ).toBe(true);
    expect(checkUpstreamReport(report({ patient_id: 123456789 }), ours).accepted).toBe(true);
    expect(
      checkUpstreamReport(report({ patient_id: null, accession_number: '' }), ours).accepted,
    ).toBe(true);
    expect(checkUpstreamReport(report({ patient_id: 'PAT-2' }), ours)).toEqual({
      accepted: false,
      foreign: true,
      reason: "names another patient (its patient_id is not the order's)",
    });
    expect(checkUpstreamReport(report({ accession_number: 'ACC-10' }), ours)).toEqual({
      accepted: false,
      foreign: true,
      reason: "names another accession (its accession_number is not the order's)",
    });
    // An order without a patient ID or accession of its own has nothing to compare.
    expect(
      checkUpstreamReport(report({ patient_id: 'PAT-2', accession_number: 'X' }), expected)
        .accepted,
    ).toBe(true);
    expect(
      checkUpstreamReport(
        {
          kind: 'results',
          reportType: 'JSON',
          body: Buffer.from('{"patient_id":"PAT-2","patient_id":"PAT-1"}'),
        },
        ours,
      ),
    ).toMatchObject({ accepted: false, foreign: true });
  });

  it('a JSON report naming a key twice in one object has no one meaning: refused by its path', () => {
    const raw = (text: string) => ({
      kind: 'results' as const,
      reportType: 'JSON',
      body: Buffer.from(text),
    });
    // JSON.parse keeps the last order_id (ours); the service's own log, or any reader that
    // keeps the first, says the report is about another order.
    const other = '7d0c1e52-9b7a-4c1e-8f3a-2b6d5e4c3a21';
    expect(
      checkUpstreamReport(
        raw(`{"order_id":"${other}","order_id":"${expected.upstreamOrderId}","findings":[]}`),
        expected,
      ),
    ).toEqual({
      accepted: false,
      foreign: true,
      reason: 'names order_id twice in one object (no one meaning)',
    });
    expect(
      checkUpstreamReport(
        raw(
          `{"order_id":"${expected.upstreamOrderId}","measurements":[{"name":"volume","value":1,"value":999}]}`,
        ),
        expected,
      ),
    ).toEqual({
      accepted: false,
      foreign: false,
      reason: 'names measurements[0].value twice in one object (no one meaning)',
    });
  });
});
