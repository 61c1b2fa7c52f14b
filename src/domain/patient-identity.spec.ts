import { primaryIdentifier } from './patient-identity';

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

  it('nothing for a patient without identifiers', () => {
    expect(primaryIdentifier({ identifiers: [] })).toBeUndefined();
    expect(primaryIdentifier(undefined)).toBeUndefined();
  });
});
