import { withValidEchoes } from './hl7-result.echo';

/** A segment with `values` at their field numbers, the fields between empty. */
function segment(id: string, values: Record<number, string>, last: number): string {
  return [id, ...Array.from({ length: last }, (_, i) => values[i + 1] ?? '')].join('|');
}

describe('withValidEchoes (PID/PV1 fields the intake does not read)', () => {
  it('keeps values valid for their type, nulls and empty fields', () => {
    const pid = segment(
      'PID',
      { 3: 'P1^^^H^MR', 24: 'Y', 29: '20261120', 30: 'N', 31: '""', 33: '202611251030.5+0100^S' },
      33,
    );
    expect(withValidEchoes(pid)).toBe(pid);
    const pv1 = segment('PV1', { 2: 'O', 25: '20261101~202612', 45: '20261125~20261126' }, 45);
    expect(withValidEchoes(pv1)).toBe(pv1);
  });

  it('writes empty what is not (words, ISO 8601, month 13, an offset of 25 hours, a bad repetition)', () => {
    expect(
      withValidEchoes(
        segment('PID', { 3: 'P1', 24: 'J', 29: 'abc', 30: 'yes', 31: 'n', 33: '2026-11-25' }, 33),
      ),
    ).toBe(segment('PID', { 3: 'P1' }, 33));
    expect(
      withValidEchoes(
        segment(
          'PV1',
          {
            2: 'O',
            25: '20261101~soon',
            29: '20261301',
            44: '202611251030+2500',
            45: '20261125^X',
          },
          45,
        ),
      ),
    ).toBe(segment('PV1', { 2: 'O' }, 45));
  });

  it('leaves other segments alone', () => {
    expect(withValidEchoes('OBR|1|||||abc')).toBe('OBR|1|||||abc');
  });
});
