import { encodeField, encodeMessage, encodeSegment, formatHl7Timestamp } from './hl7-builder';
import { parseHl7 } from './hl7-message';

describe('hl7 builder', () => {
  it('encodes components, subcomponents and repetitions, escaping every leaf', () => {
    expect(encodeField('a|b')).toBe('a\\F\\b');
    expect(encodeField(['DOE', 'JO^HN', undefined, undefined])).toBe('DOE^JO\\S\\HN');
    expect(encodeField([undefined, ['1.2.3', 'ISO']])).toBe('^1.2.3&ISO');
    expect(encodeField({ repetitions: [['A1', '', '', 'H'], 'B~2'] })).toBe('A1^^^H~B\\R\\2');
  });

  it('writes MSH-1/MSH-2 from the delimiters and drops trailing empty fields', () => {
    const msh = encodeSegment({ id: 'MSH', fields: ['APP', 'FAC', undefined, undefined] });
    expect(msh).toBe('MSH|^~\\&|APP|FAC');
  });

  it('builds messages the parser reads back value for value', () => {
    const text = encodeMessage([
      {
        id: 'MSH',
        fields: ['A', 'B', 'C', 'D', '20260101', undefined, ['ORU', 'R01'], 'X1', 'P', '2.5.1'],
      },
      { id: 'NTE', fields: ['1', 'L', 'Müller & Söhne | 50% ^ up ~ \\ done\nline 2'] },
    ]);
    expect(text.endsWith('\r')).toBe(true);
    const m = parseHl7(text);
    expect(m.get('MSH-9.2')).toBe('R01');
    expect(m.get('NTE-3')).toBe('Müller & Söhne | 50% ^ up ~ \\ done\nline 2');
    expect(m.quirks).toEqual([]);
  });

  it('formats timestamps as UTC DTM with offset', () => {
    expect(formatHl7Timestamp(new Date('2026-02-03T04:05:06.789Z'))).toBe('20260203040506+0000');
  });
});
