import type { MappedField, OrderRequest } from './order-request';
import { NAME_PART_MAX_CHARS, NOTE_MAX_CHARS, textBoundProblems } from './text-bounds';

const order = (changes: Partial<OrderRequest>): Partial<OrderRequest> => ({
  source: 'hl7v2',
  action: 'create',
  patient: { identifiers: [{ value: 'PAT-1' }] },
  products: [],
  ...changes,
});

describe('textBoundProblems (one table for the order model)', () => {
  it('takes every value at its bound, counted in code points', () => {
    // 1,000 code points of a character outside the BMP: 2,000 UTF-16 units, still taken
    const emoji = '\u{1F600}'.repeat(NAME_PART_MAX_CHARS);
    expect(
      textBoundProblems(
        order({
          patient: { identifiers: [], name: { family: emoji, given: ['A'.repeat(1000)] } },
          notes: ['n'.repeat(NOTE_MAX_CHARS)],
          procedure: { code: 'c'.repeat(199), display: 'd'.repeat(1000) },
        }),
        [],
      ),
    ).toEqual([]);
  });

  it('refuses each value over its bound, naming where it was read and never the value', () => {
    const lineage: MappedField[] = [
      { target: 'patient.name.given[1]', source: 'PID-5.3', value: '', ruleId: 'r' },
      { target: 'notes[2]', source: 'NTE[3]-3', value: '', ruleId: 'r' },
    ];
    const problems = textBoundProblems(
      order({
        patient: { identifiers: [], name: { family: 'OK', given: ['A', 'G'.repeat(1001)] } },
        orderingProvider: { name: { prefix: 'P'.repeat(1001) } },
        reasonForStudy: [{ display: 'fine' }, { code: 'C'.repeat(200) }],
        modality: 'M'.repeat(65),
        notes: ['a', 'b', 'N'.repeat(NOTE_MAX_CHARS + 1)],
      }),
      lineage,
    );
    expect(problems.map((p) => [p.target, p.source, p.severity])).toEqual([
      ['patient.name.given[1]', 'PID-5.3', 'refuse'],
      ['orderingProvider.name.prefix', undefined, 'refuse'],
      ['reasonForStudy[1].code', undefined, 'refuse'],
      ['modality', undefined, 'refuse'],
      ['notes[2]', 'NTE[3]-3', 'refuse'],
    ]);
    expect(problems[0]!.message).toBe(
      "PID-5.3: the patient's given name is 1001 characters, more than the 1000 it may have (no name part is that long; HL7 v2.5.1 XPN holds 250 in all); send it as the record holds it",
    );
    for (const p of problems) {
      expect(p.message).not.toMatch(/GGGG|PPPP|CCCC|MMMM|NNNN/);
      // a v2.3/2.4 MSA-3 is ST 80
      expect([...p.brief!].length).toBeLessThanOrEqual(80);
    }
  });

  it('names the length of a 9 MB name, not the name', () => {
    const problems = textBoundProblems(
      order({ patient: { identifiers: [], name: { family: 'X'.repeat(9 * 1024 * 1024) } } }),
      [],
    );
    expect(problems).toHaveLength(1);
    expect(problems[0]!.message).toMatch(/9437184 characters/);
    expect(problems[0]!.message.length).toBeLessThan(300);
  });
});
