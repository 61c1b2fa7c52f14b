import { authorityMismatch, hasMatchingCharacters, identityMismatches } from './study-identity';

const BOTH = ['accession-number', 'patient-id'] as const;

describe('study identity: a study is used only when its identifiers match the order', () => {
  it.each([
    {
      name: 'matches exactly, ignoring the padding DICOM allows around SH/LO values',
      order: { accessionNumber: 'ACC-20240318-0042', patientId: '12345' },
      study: { accessionNumber: 'ACC-20240318-0042 ', patientId: ' 12345' },
      mismatches: [],
    },
    {
      name: 'names each differing field, masked',
      order: { accessionNumber: 'ACC-0042', patientId: '12345' },
      study: { accessionNumber: 'ACC-0043', patientId: '99999' },
      mismatches: [
        { field: 'accession-number', order: 'A******2', study: 'A******3' },
        { field: 'patient-id', order: '1***5', study: '9***9' },
      ],
    },
  ])('$name', ({ order, study, mismatches }) => {
    expect(identityMismatches(order, study, BOTH)).toEqual(mismatches);
  });

  it('a NUL-terminated value padded with a SPACE is padding; NULs and lone surrogates never reach the audit entry', () => {
    expect(
      identityMismatches({ accessionNumber: 'ACC1' }, { accessionNumber: 'ACC1\0 ' }, BOTH),
    ).toEqual([]);
    // A PACS's DICOM JSON can hold "\u0000" or "\ud800": PostgreSQL jsonb refuses both.
    expect(
      identityMismatches(
        { accessionNumber: 'ACC1', patientId: 'P1', patientIdIssuer: 'HOSPA' },
        { accessionNumber: '\0CC9', patientId: 'P1', issuerOfPatientId: 'HOSP\ud800\0B' },
        ['accession-number', 'patient-id', 'patient-id-issuer'],
      ),
    ).toEqual([
      { field: 'accession-number', order: 'A**1', study: '?**9' },
      { field: 'patient-id-issuer', order: 'HOSPA', study: 'HOSP\ufffd?B' },
    ]);
  });

  it('the same Patient ID in another ID domain is another patient (Issuer of Patient ID)', () => {
    const all = ['accession-number', 'patient-id', 'patient-id-issuer'] as const;
    const order = { patientId: 'P1', patientIdIssuer: 'HOSPA' };
    expect(
      identityMismatches(order, { patientId: 'P1', issuerOfPatientId: 'HOSP_B' }, all),
    ).toEqual([{ field: 'patient-id-issuer', order: 'HOSPA', study: 'HOSP_B' }]);
    // one domain: case, padding and the urn:oid: prefix do not count
    expect(
      identityMismatches(order, { patientId: 'P1', issuerOfPatientId: 'hospa ' }, all),
    ).toEqual([]);
    expect(
      identityMismatches(
        { patientId: 'P1', patientIdIssuer: 'urn:oid:1.2.840.113619.6.197' },
        { patientId: 'P1', issuerOfPatientId: '1.2.840.113619.6.197' },
        all,
      ),
    ).toEqual([]);
    expect(
      identityMismatches(
        { patientId: 'P1', patientIdIssuer: 'urn:oid:1.2.840.113619.6.197' },
        { patientId: 'P1', issuerOfPatientId: '1.2.840.113619.6.198' },
        all,
      ).map((m) => m.field),
    ).toEqual(['patient-id-issuer']);
    // several values are compared whole, of the kind of their first: not the order's domain
    for (const [o, s] of [
      ['HOSPA', 'HOSPA\\HOSP_B'],
      ['urn:oid:1.2.840.113619.6.197', '1.2.840.113619.6.197\\1.2.840.113619.6.198'],
    ] as const) {
      expect(
        identityMismatches(
          { patientId: 'P1', patientIdIssuer: o },
          { patientId: 'P1', issuerOfPatientId: s },
          all,
        ).map((m) => m.field),
      ).toEqual(['patient-id-issuer']);
    }
    // names of two kinds cannot be compared by spelling: a FHIR system URL or an OID against a
    // PACS's namespace, a namespace against an OID
    for (const [o, s] of [
      ['http://hospital.smarthealthit.org', 'HOSPA'],
      ['urn:oid:1.2.840.113619.6.197', 'HOSPA'],
      ['HOSPA', '1.2.840.113619.6.197'],
    ])
      expect(
        identityMismatches(
          { patientId: 'P1', patientIdIssuer: o },
          { patientId: 'P1', issuerOfPatientId: s },
          all,
        ),
      ).toEqual([]);
    // compared only when both name a domain, the patient IDs are compared, and the site asks
    expect(identityMismatches(order, { patientId: 'P1' }, all)).toEqual([]);
    expect(
      identityMismatches({ patientId: 'P1' }, { patientId: 'P1', issuerOfPatientId: 'X' }, all),
    ).toEqual([]);
    expect(identityMismatches(order, { issuerOfPatientId: 'HOSP_B' }, all)).toEqual([]);
    expect(
      identityMismatches(order, { patientId: 'P1', issuerOfPatientId: 'HOSP_B' }, BOTH),
    ).toEqual([]);
    // a different patient ID is that mismatch alone
    expect(
      identityMismatches(order, { patientId: 'P2', issuerOfPatientId: 'HOSP_B' }, all).map(
        (m) => m.field,
      ),
    ).toEqual(['patient-id']);
  });

  it('a study without an accession number does not match an order that has one', () => {
    expect(identityMismatches({ accessionNumber: 'A1' }, {}, BOTH)).toHaveLength(1);
  });

  it('is case-sensitive (a different accession in another case is another study)', () => {
    expect(
      identityMismatches({ accessionNumber: 'acc1' }, { accessionNumber: 'ACC1' }, BOTH),
    ).toHaveLength(1);
  });

  it('the patient ID counts only when both carry one, and only when the site requires it', () => {
    expect(identityMismatches({ patientId: 'P1' }, {}, BOTH)).toEqual([]);
    expect(
      identityMismatches({ patientId: 'P1' }, { patientId: 'P2' }, ['accession-number']),
    ).toEqual([]);
  });

  it.each([
    { study: 'ACC1\t', near: 'whitespace-or-control' },
    { study: 'ACC1\r', near: 'whitespace-or-control' },
    { study: '\nACC1', near: 'whitespace-or-control' },
    { study: 'ACC1\u00a0', near: 'whitespace-or-control' },
    { study: 'ACC1\u3000', near: 'whitespace-or-control' },
    { study: 'acc1', near: 'case' },
    { study: '0ACC1', near: 'leading-zeros' },
    { study: 'ACC1\\ACC2', near: undefined },
  ])('only SPACE is padding: study $study is not ACC1 (near miss: $near)', ({ study, near }) => {
    const [m] = identityMismatches({ accessionNumber: 'ACC1' }, { accessionNumber: study }, BOTH);
    expect(m).toBeDefined();
    expect(m!.nearMiss).toBe(near);
  });

  it('a trailing NUL (a common writer mistake) and spaces on both sides are padding', () => {
    expect(
      identityMismatches({ accessionNumber: 'ACC1' }, { accessionNumber: ' ACC1 \0' }, BOTH),
    ).toEqual([]);
  });

  it.each(['*', 'ACC*', 'A?C', 'ACC1\\ACC2'])('%s holds DICOM matching characters', (v) => {
    expect(hasMatchingCharacters(v)).toBe(true);
  });

  it('ordinary accession numbers do not', () => {
    expect(hasMatchingCharacters('ACC-20240318-0042')).toBe(false);
    expect(hasMatchingCharacters('2024.03/18 #42')).toBe(false);
  });

  describe('issuer of the accession number (0008,0051 against IPC-1 EI / the ACSN system)', () => {
    const ALL = ['accession-number', 'accession-issuer'] as const;
    it('another authority, same accession: accession-issuer, both named', () => {
      expect(
        identityMismatches(
          { accessionNumber: 'A1', accessionIssuer: { namespace: 'RIS_A' } },
          { accessionNumber: 'A1', issuerOfAccessionNumber: { namespace: 'RIS_B' } },
          ALL,
        ),
      ).toEqual([{ field: 'accession-issuer', order: 'RIS_A', study: 'RIS_B' }]);
    });
    it('the universal IDs decide when both sides carry one', () => {
      expect(
        authorityMismatch(
          { namespace: 'RIS', universalId: 'urn:oid:1.2.3' },
          { namespace: 'ris-local', universalId: '1.2.3' },
        ),
      ).toBeUndefined();
      expect(
        authorityMismatch({ universalId: '1.2.3' }, { namespace: 'RIS', universalId: '1.2.4' }),
      ).toEqual({ order: '1.2.3', study: '1.2.4' });
    });
    it('no issuer on a side, different parts, or names of different kinds: no mismatch', () => {
      expect(authorityMismatch(undefined, { namespace: 'RIS_B' })).toBeUndefined();
      expect(authorityMismatch({ namespace: 'RIS_A' }, undefined)).toBeUndefined();
      expect(authorityMismatch({ namespace: 'RIS_A' }, { universalId: '1.2.3' })).toBeUndefined();
      expect(
        authorityMismatch({ universalId: 'http://ris.example/acc' }, { universalId: '1.2.3' }),
      ).toBeUndefined();
    });
    it('not compared when left out of the rule', () => {
      expect(
        identityMismatches(
          { accessionNumber: 'A1', accessionIssuer: { namespace: 'RIS_A' } },
          { accessionNumber: 'A1', issuerOfAccessionNumber: { namespace: 'RIS_B' } },
          ['accession-number'],
        ),
      ).toEqual([]);
    });
  });
});
