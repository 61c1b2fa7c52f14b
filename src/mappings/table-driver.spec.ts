import type { MappedField } from '../domain/order-request';
import { applyRow } from './table-driver';

describe('applyRow', () => {
  it('writes the value at the dotted target and one lineage line per part', () => {
    const values: Record<string, unknown> = { patient: { identifiers: [] } };
    const lineage: MappedField[] = [];
    applyRow(
      values,
      lineage,
      { target: 'patient.name', ruleId: 'r.name' },
      { family: 'Doe', given: ['Jane'] },
      [
        { suffix: '.family', source: 'PID-5.1', value: 'Doe' },
        { suffix: '.given[0]', source: 'PID-5.2', value: 'Jane' },
      ],
    );
    expect(values).toEqual({
      patient: { identifiers: [], name: { family: 'Doe', given: ['Jane'] } },
    });
    expect(lineage).toEqual([
      { target: 'patient.name.family', source: 'PID-5.1', value: 'Doe', ruleId: 'r.name' },
      { target: 'patient.name.given[0]', source: 'PID-5.2', value: 'Jane', ruleId: 'r.name' },
    ]);
  });
});
