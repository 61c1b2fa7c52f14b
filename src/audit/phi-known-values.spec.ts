import { maskFreeText } from './phi-masking.free-text';
import { knownPhiOf, maskKnownValues } from './phi-known-values';

const order = {
  patient: {
    identifiers: [
      { value: 'PAT-4711' },
      { value: '40004711', system: 'urn:oid:1.2.276' },
      { value: '4711' },
    ],
    name: { family: 'Mustermann-Gabler', given: ['Erika', 'L'] },
    birthDate: '1964-08-12',
  },
};

describe('known values of an order in free text (upstream words)', () => {
  const known = knownPhiOf(order);

  it('masks the patient named in prose, in any case; the orderer stays (the page shows orderers too)', () => {
    expect(
      maskKnownValues(
        'patient Erika MUSTERMANN-GABLER (ordered by Dr. Paula Arzt) not found',
        known,
      ),
    ).toBe('patient E*** M*** (ordered by Dr. Paula Arzt) not found');
  });

  it('masks a name part alone, identifiers short and long, and the birth date as people write it', () => {
    expect(maskKnownValues('family Gabler, mrn PAT-4711, id 4711, born 12.08.1964', known)).toBe(
      'family G***, mrn ***11, id ***, born ***',
    );
  });

  it('leaves words that only contain a value, and one-letter initials, alone', () => {
    expect(maskKnownValues('Erikas Arztpraxis L ok', known)).toBe('Erikas Arztpraxis L ok');
  });

  it('together with the patterns: a PN stays masked once, ISO dates keep their year', () => {
    expect(
      maskFreeText('patient_name MUSTERMANN-GABLER^ERIKA born 1964-08-12 (Erika)', known),
    ).toBe('patient_name M***^E*** born 1964-**-** (E***)');
  });

  it('stays linear: a 1 MB text with many near-misses is masked in well under a second', () => {
    const text = 'Erik Musterman PAT-471 '.repeat(45_000);
    const started = performance.now();
    expect(maskKnownValues(text, known)).toBe(text);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('an order without a patient, or values too short or too long, masks nothing', () => {
    expect(knownPhiOf(undefined)).toEqual({ names: [], ids: [], dates: [] });
    const odd = knownPhiOf({
      patient: { identifiers: [{ value: 'x'.repeat(500) }, { value: 'A' }] },
    });
    expect(odd.ids).toEqual([]);
  });
});
