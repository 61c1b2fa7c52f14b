import {
  mergedIdentifiers,
  namesAnotherPatient,
  namesRecord,
  primaryIdentifier,
} from './patient-identity';

const ids = (...types: (string | undefined)[]) => ({
  identifiers: types.map((type, i) => ({ value: `id-${i}`, ...(type ? { type } : {}) })),
});

describe('primaryIdentifier (the identifier an order is known by)', () => {
  it.each([
    ['MR anywhere wins', ids('SS', 'PI', 'MR'), 'id-2'],
    ['PI after a national health number', ids('NH', 'PI'), 'id-1'],
    ['MRN (sent by EHRs, not table 0203) before PI', ids('PI', 'MRN'), 'id-1'],
    ['an untyped identifier before a passport', ids('PPN', undefined), 'id-1'],
    ['a country national identifier (NNFRA) is skipped', ids('NNFRA', 'XX'), 'id-1'],
    ['only national numbers: the first', ids('SS', 'NH'), 'id-0'],
    ['the first when nothing is typed', ids(undefined, undefined), 'id-0'],
    ['types compared in any case', ids('ss', 'pi'), 'id-1'],
  ])('%s', (_label, patient, expected) => {
    expect(primaryIdentifier(patient)?.value).toBe(expected);
  });

  it.each([
    ['http://hl7.org/fhir/sid/us-ssn'],
    ['urn:oid:2.16.840.1.113883.4.1'],
    ['urn:oid:1.2.250.1.213.1.4.8'],
    ['http://fhir.nhs.uk/Id/nhs-number'],
  ])('an untyped national number (%s) gives way to the hospital number', (system) => {
    const patient = {
      identifiers: [
        { value: 'national', system },
        { value: 'hospital', system: 'urn:oid:1.2.840.114350.1.13.0.1.7.5.737384.0' },
      ],
    };
    expect(primaryIdentifier(patient)?.value).toBe('hospital');
  });

  it('nothing for a patient without identifiers', () => {
    expect(primaryIdentifier({ identifiers: [] })).toBeUndefined();
    expect(primaryIdentifier(undefined)).toBeUndefined();
  });
});

describe('namesRecord (does a patient message name the record an order is known by)', () => {
  const record = { value: '4711', system: 'HOSPA', type: 'MR' };

  it('needs the same number and, when both say one, the same assigning authority', () => {
    expect(namesRecord([{ value: '4711', system: 'HOSPA', type: 'MR' }], record)).toBe(true);
    expect(namesRecord([{ value: '4711', system: 'hospa ' }], record)).toBe(true);
    expect(namesRecord([{ value: '4711', system: 'CLINB', type: 'MR' }], record)).toBe(false);
    expect(namesRecord([{ value: '4712', system: 'HOSPA' }], record)).toBe(false);
  });

  it('takes a number without authority on either side as naming it (a RIS that sends none)', () => {
    expect(namesRecord([{ value: '4711' }], record)).toBe(true);
    expect(namesRecord([{ value: '4711', system: 'CLINB' }], { value: '4711' })).toBe(true);
    expect(
      namesRecord([{ value: '4711', system: 'urn:oid:1.2.3' }], { value: '4711', system: '1.2.3' }),
    ).toBe(true);
    expect(namesRecord([{ value: '4711' }], undefined)).toBe(false);
  });
});

describe('mergedIdentifiers (ADT^A40: MRG-1 retired, PID-3 surviving)', () => {
  it('replaces only the retired identifiers, the surviving ones first, the others kept', () => {
    const order = [
      { value: '9902', system: 'HOSPA', type: 'MR' },
      { value: 'K-1', system: 'CLINB', type: 'MR' },
      { value: '123', system: 'SSA', type: 'SS' },
    ];
    expect(
      mergedIdentifiers(
        order,
        [{ value: '9902', system: 'HOSPA', type: 'MR' }],
        [
          { value: '4711', system: 'HOSPA', type: 'MR' },
          { value: '123', system: 'SSA', type: 'SS' },
        ],
      ),
    ).toEqual([
      { value: '4711', system: 'HOSPA', type: 'MR' },
      { value: '123', system: 'SSA', type: 'SS' },
      { value: 'K-1', system: 'CLINB', type: 'MR' },
    ]);
  });

  it("keeps another authority's identifier with the retired number", () => {
    expect(
      mergedIdentifiers(
        [
          { value: '9902', system: 'HOSPA' },
          { value: '9902', system: 'CLINB' },
        ],
        [{ value: '9902', system: 'HOSPA' }],
        [{ value: '4711', system: 'HOSPA' }],
      ),
    ).toEqual([
      { value: '4711', system: 'HOSPA' },
      { value: '9902', system: 'CLINB' },
    ]);
  });
});

describe('namesAnotherPatient (does an order message name another patient than its order)', () => {
  const order = {
    identifiers: [
      { value: '4711', system: 'HOSPA', type: 'MR' },
      { value: 'K-1', system: 'CLINB', type: 'MR' },
    ],
  };

  it('reads PID-3 repetitions as a set: a record number the order holds is its patient', () => {
    expect(namesAnotherPatient({ identifiers: [...order.identifiers].reverse() }, order)).toBe(
      false,
    );
    expect(
      namesAnotherPatient({ identifiers: [{ value: 'K-1', system: 'CLINB', type: 'MR' }] }, order),
    ).toBe(false);
  });

  it('a record number the order does not hold, or under another authority, is another patient', () => {
    expect(
      namesAnotherPatient({ identifiers: [{ value: 'K-2', system: 'CLINB', type: 'MR' }] }, order),
    ).toBe(true);
    expect(
      namesAnotherPatient({ identifiers: [{ value: 'K-1', system: 'HOSPA', type: 'MR' }] }, order),
    ).toBe(true);
  });
});
