import {
  encodeField,
  encodeMessage,
  encodeSegment,
  formatHl7Timestamp,
  isoToHl7Dtm,
} from './hl7-builder';
import { recodeHexData } from './hl7-escape';
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

  it('writes an ISO date or dateTime as a DTM of the same precision and offset, without a Date', () => {
    expect(isoToHl7Dtm('2026')).toBe('2026');
    expect(isoToHl7Dtm('2026-11')).toBe('202611');
    expect(isoToHl7Dtm('2026-11-25')).toBe('20261125');
    expect(isoToHl7Dtm('2026-11-25T10:30:00.123+01:00')).toBe('20261125103000+0100');
    expect(isoToHl7Dtm('2024-03-18T15:00:00.000Z')).toBe('20240318150000+0000');
    expect(isoToHl7Dtm('2026-12-31T23:59:60Z')).toBe('20261231235959+0000');
    expect(isoToHl7Dtm('+010000-01-01T11:00:00.000Z')).toBeUndefined();
    expect(isoToHl7Dtm('not a date')).toBeUndefined();
  });

  it('rewrites hexadecimal data of another charset as text, other escapes untouched', () => {
    expect(recodeHexData('M\\XE9\\nard', 'latin1')).toBe('Ménard');
    // \XE9\ inside an escaped escape is text, not hexadecimal data
    expect(recodeHexData('\\E\\XE9\\E\\ \\X0D\\\\F\\', 'latin1')).toBe(
      '\\E\\XE9\\E\\ \\X0D\\\\F\\',
    );
    // a sequence mixing a delimiter byte and a Latin-1 letter: the delimiter escaped again
    expect(recodeHexData('\\X7CE9\\', 'latin1')).toBe('\\F\\é');
  });
});
