import { readFileSync } from 'node:fs';
import path from 'node:path';

import { Hl7Error } from './hl7.error';
import { DEFAULT_DELIMITERS, escapeValue, unescapeValue } from './hl7-escape';
import { formattingModeOf } from './hl7-formatting';
import { QuirkCollector } from './hl7-quirk';
import { formatLocation, parseLocation } from './hl7-location';
import { parseHl7 } from './hl7-message';

const FIXTURES = path.join(__dirname, '../../test/fixtures/hl7');
const fixture = (name: string): Buffer => readFileSync(path.join(FIXTURES, name));
const codes = (m: { quirks: readonly { code: string }[] }): string[] => m.quirks.map((q) => q.code);

const BASIC = [
  'MSH|^~\\&|RIS|HOSP|AI|HOSP|20240318144217||ORM^O01^ORM_O01|CTRL1|P|2.5.1',
  'PID|1||A1^^^HOSP^MR~B2^^^&1.2.3&ISO^PI||DOE^JOHN^Q||19700101|M',
  'ORC|NW|P1^RIS',
  'OBR|1|P1^RIS||CT1^CT Head^L',
].join('\r');

describe('parseHl7: access by location', () => {
  const m = parseHl7(BASIC);

  it('reads fields, repetitions, components and subcomponents, 1-based', () => {
    expect(m.get('PID-3')).toBe('A1');
    expect(m.get('PID-3[2].1')).toBe('B2');
    expect(m.get('PID-3[2].4.2')).toBe('1.2.3');
    expect(m.get('PID-3.5')).toBe('MR');
    expect(m.get('OBR-4.2')).toBe('CT Head');
    expect(m.getAll('PID-3')).toEqual(['A1', 'B2']);
    expect(m.get('PID-30')).toBeUndefined();
    expect(m.get('ZZZ-1')).toBeUndefined();
  });

  it('numbers MSH as the standard does (MSH-1 separator, MSH-2 encoding characters)', () => {
    expect(m.get('MSH-1')).toBe('|');
    expect(m.get('MSH-2')).toBe('^~\\&');
    expect(m.get('MSH-9.2')).toBe('O01');
    expect(m.messageType).toEqual({ code: 'ORM', trigger: 'O01', structure: 'ORM_O01' });
    expect(m.controlId).toBe('CTRL1');
    expect(m.version).toBe('2.5.1');
  });

  it('keys duplicates by sender and control ID', () => {
    expect(m.duplicateKey).toBe('RIS|HOSP|CTRL1');
  });

  it('records no quirk for a clean message', () => {
    expect(m.quirks).toEqual([]);
  });

  it('parses and formats locations', () => {
    expect(parseLocation('PID-3[2].4')).toEqual({
      segment: 'PID',
      segmentOrdinal: undefined,
      field: 3,
      repetition: 2,
      component: 4,
      subcomponent: undefined,
    });
    expect(formatLocation(parseLocation('ORC[2]-1'))).toBe('ORC[2]-1');
    expect(() => parseLocation('PID3')).toThrow(Hl7Error);
    expect(() => parseLocation('PID-0')).toThrow(/1-based/);
  });
});

describe('parseHl7: tolerated quirks', () => {
  it('accepts LF, CRLF and mixed separators', () => {
    expect(codes(parseHl7(BASIC.replace(/\r/g, '\n')))).toEqual(['lf-separators']);
    expect(codes(parseHl7(BASIC.replace(/\r/g, '\r\n')))).toEqual(['crlf-separators']);
    const mixed = parseHl7(BASIC.replace('\rPID', '\nPID'));
    expect(codes(mixed)).toEqual(['mixed-separators']);
    expect(mixed.get('PID-3')).toBe('A1');
  });

  it('strips a UTF-8 BOM, blank lines, trailing spaces and notes trailing separators', () => {
    const text = `\uFEFF${BASIC.replace('\rORC', '\r\r  \rORC')}|  \r`;
    const m = parseHl7(Buffer.from(text, 'utf8'));
    expect(codes(m)).toEqual(
      expect.arrayContaining([
        'bom',
        'blank-lines',
        'trailing-whitespace',
        'trailing-field-separator',
      ]),
    );
    expect(m.segments.map((s) => s.id)).toEqual(['MSH', 'PID', 'ORC', 'OBR']);
    expect(m.get('OBR-4.2')).toBe('CT Head');
  });

  it('drops NUL padding after the last segment, with or without a separator before it', () => {
    // Before: the padding was a stray line joined to OBR-4.3 ("L\n\0\0"), the procedure's
    // coding system no longer matched and a known procedure was refused AE 103.
    for (const tail of ['\r\0\0\0', '\0\0', '\r\n\0\r\n\0 \r']) {
      const m = parseHl7(Buffer.from(`${BASIC}${tail}`, 'latin1'));
      expect(m.segments.map((s) => s.id)).toEqual(['MSH', 'PID', 'ORC', 'OBR']);
      expect(m.get('OBR-4.3')).toBe('L');
      expect(codes(m)).toContain('nul-padding');
      expect(codes(m)).not.toContain('mixed-separators');
    }
    // A NUL inside a value is data, not padding: kept (and stored as U+FFFD later).
    expect(
      parseHl7(Buffer.from(`${BASIC.replace('CT Head', 'CT\0Head')}\r`, 'latin1')).get('OBR-4.2'),
    ).toBe('CT\0Head');
  });

  it('records Z-segments and keeps them addressable', () => {
    const m = parseHl7(`${BASIC}\rZDS|1.2.3.4^APP^Application^DICOM`);
    expect(codes(m)).toContain('z-segment');
    expect(m.get('ZDS-1')).toBe('1.2.3.4');
  });

  it('joins an unescaped line break inside a field to the previous segment', () => {
    const m = parseHl7(`${BASIC}\rNTE|1||first line\nsecond line`);
    expect(m.get('NTE-3')).toBe('first line\nsecond line');
    expect(codes(m)).toContain('mixed-separators');
  });

  it('reads custom encoding characters from MSH-1/MSH-2', () => {
    const m = parseHl7(
      'MSH#:*!@#RIS#H#AI#H#20240101##ORM:O01#C1#P#2.4\rPID#1##X1:::H:MR*X2##DOE:JANE',
    );
    expect(codes(m)).toContain('custom-encoding-characters');
    expect(m.get('PID-3[2].1')).toBe('X2');
    expect(m.get('PID-5.2')).toBe('JANE');
    expect(m.messageType.trigger).toBe('O01');
  });

  it('distinguishes empty fields from the explicit null ""', () => {
    const m = parseHl7(`${BASIC}\rPV1|1|""|`);
    const pv1 = m.segment('PV1');
    expect(pv1?.value(2)).toBeUndefined();
    expect(pv1?.isExplicitNull(2)).toBe(true);
    expect(pv1?.isExplicitNull(3)).toBe(false);
  });

  it('refuses input without an MSH segment', () => {
    expect(() => parseHl7('PID|1||X')).toThrow(
      expect.objectContaining({ code: 'HL7_MISSING_MSH' }),
    );
    expect(() => parseHl7('  ')).toThrow(expect.objectContaining({ code: 'HL7_EMPTY_MESSAGE' }));
  });
});

describe('parseHl7: a line break inside a field (sent unescaped)', () => {
  // An EHR's multi-line reason for exam (OBR-13) sent with its line breaks as they were typed
  // (fixture orm-o01-v231-ehr-obr13-line-breaks): the text continues OBR-13 and the fields after
  // it stay the OBR's own fields.
  const m = parseHl7(
    [
      'MSH|^~\\&|EHR|H|AI|H|20261015101533||ORM^O01|LB1|P|2.3.1',
      'PID|1||A1^^^H^MR',
      'ORC|NW|P1^EHR',
      'OBR|1|P1^EHR||24725-4^CT Head^LN|||||||||Found on floor.',
      'New confusion.|||3307^NAKASHIMA^KEN||ACC-1||||||CT',
    ].join('\r'),
  );

  it('keeps the text in the field and reads the fields after the break as fields', () => {
    expect(m.get('OBR-13')).toBe('Found on floor.\nNew confusion.');
    expect(m.get('OBR-16.2')).toBe('NAKASHIMA');
    expect(m.get('OBR-18')).toBe('ACC-1');
    expect(m.get('OBR-24')).toBe('CT');
    expect(m.quirks).toContainEqual({
      code: 'mixed-separators',
      detail: 'line break inside OBR-13 joined',
    });
  });

  it('never joins a line with a segment shape: a lowercase known ID is that segment, another is refused', () => {
    // Before: `pv1|` and `obr|` continued PID-18 and ORC-12 as line breaks inside them.
    const lower = parseHl7(
      'MSH|^~\\&|EHR|H|AI|H|20261015101533||ORM^O01|LC1|P|2.3.1\rPID|1||A1^^^H^MR\rpv1||O\rORC|NW|P1\rObr|1|P1||X^Y^L',
    );
    expect(lower.segments.map((x) => x.id)).toEqual(['MSH', 'PID', 'PV1', 'ORC', 'OBR']);
    expect(lower.get('PV1-2')).toBe('O');
    expect(lower.get('OBR-4.1')).toBe('X');
    expect(lower.quirks).toContainEqual({
      code: 'lowercase-segment-id',
      detail: 'line 5 starts "Obr|": read as the OBR segment',
    });
    const unknown = parseHl7(
      'MSH|^~\\&|EHR|H|AI|H|20261015101533||ORM^O01|LC2|P|2.3.1\rPID|1||A1\r3rd|x',
    );
    expect(unknown.segments.map((x) => x.id)).toEqual(['MSH', 'PID']);
    expect(unknown.limitViolations).toEqual([
      expect.objectContaining({ kind: 'segment-id', brief: expect.stringContaining('line 3') }),
    ]);
  });

  it('counts the repetitions after the break toward HL7_MAX_REPETITIONS', () => {
    const wrapped = parseHl7(
      `MSH|^~\\&|EHR|H|AI|H|20261015101533||ORM^O01|LB2|P|2.3.1\rPID|1||A1^^^H^MR\r${'~'.repeat(1500)}`,
    );
    expect(wrapped.limitViolations).toEqual([
      expect.objectContaining({ kind: 'repetitions', location: 'PID-3' }),
    ]);
  });
});

describe('escape sequences (HL7 v2.5.1 section 2.7)', () => {
  const ctx = { delimiters: DEFAULT_DELIMITERS, encoding: 'utf-8' };

  it('unescapes delimiters, hex data and formatting commands', () => {
    expect(unescapeValue('a\\F\\b\\S\\c\\T\\d\\R\\e\\E\\f', ctx)).toBe('a|b^c&d~e\\f');
    expect(unescapeValue('Ger\\XC3A4\\t', ctx)).toBe('Gerät');
    expect(unescapeValue('Ger\\XE4\\t', { ...ctx, encoding: 'latin1' })).toBe('Gerät');
    expect(unescapeValue('line1\\.br\\line2\\.sp2\\x', ctx)).toBe('line1\nline2\n\nx');
    expect(unescapeValue('\\H\\bold\\N\\', ctx)).toBe('bold');
  });

  it('outside FT, reads \\.br\\ and \\.sp\\ as one space between words, the other commands as nothing (§2.7.6)', () => {
    const quirks = new QuirkCollector();
    const text = { ...ctx, formatting: 'text' as const, quirks, location: 'PID-5.1.1' };
    expect(unescapeValue('SCHMIDT\\.br\\JR', text)).toBe('SCHMIDT JR');
    expect(unescapeValue('CT\\.sp5\\Chest', text)).toBe('CT Chest');
    expect(unescapeValue('\\.br\\WELBY\\.br\\', text)).toBe('WELBY');
    expect(unescapeValue('A \\.br\\B\\.br\\ C\\.br\\\\.sp\\D', text)).toBe('A B C D');
    expect(unescapeValue('MARIA\\.in+4\\\\.ce\\', text)).toBe('MARIA');
    expect(quirks.quirks).toContainEqual({
      code: 'formatting-escape',
      detail: 'PID-5.1.1: \\.br\\ outside formatted text (FT) read as a space',
    });
    // identifiers keep the line break, for the identifier rule to refuse (AE 102)
    expect(unescapeValue('FIL-1\\.br\\', { ...ctx, formatting: 'identifier' })).toBe('FIL-1\n');
    expect(formattingModeOf('NTE', 3)).toBe('lines');
    expect(formattingModeOf('OBX', 5, 'FT')).toBe('lines');
    expect(formattingModeOf('OBX', 5, 'ST')).toBe('text');
    expect(formattingModeOf('PID', 5)).toBe('text');
    expect(formattingModeOf('ORC', 3)).toBe('identifier');
  });

  it('reads hexadecimal data in the message charset, ASCII bytes alike in all of them', () => {
    expect(unescapeValue('\\X41\\\\X0D0A\\z', ctx)).toBe('A\r\nz');
    // a run mixing ASCII and non-ASCII bytes is decoded as a whole
    expect(unescapeValue('\\X41C3A4\\', ctx)).toBe('Aä');
    expect(unescapeValue('\\X41E4\\', { ...ctx, encoding: 'latin1' })).toBe('Aä');
    expect(unescapeValue('\\X82A0\\', { ...ctx, encoding: 'shift_jis' })).toBe('あ');
    // text between sequences is copied as it is, however long
    const long = 'x'.repeat(100_000);
    expect(unescapeValue(`${long}\\E\\${long}`, ctx)).toBe(`${long}\\${long}`);
  });

  it('keeps unknown escapes literally (nothing lost) and records them; drops a locally defined \\Z..\\', () => {
    // \Zdddd\ means what only its sender knows (v2.5.1 §2.7): dropped, recorded; the raw
    // message keeps it
    const m = parseHl7(`${BASIC}\rNTE|1||see \\Zlocal\\ and C:\\path`);
    expect(m.get('NTE-3')).toBe('see  and C:\\path');
    expect(codes(m)).toEqual(expect.arrayContaining(['unknown-escape-sequence', 'local-escape']));
  });

  it('unescapes after splitting, so escaped delimiters never split values', () => {
    const m = parseHl7(`${BASIC}\rNTE|1||a\\S\\b^second\\T\\part`);
    expect(m.get('NTE-3.1')).toBe('a^b');
    expect(m.get('NTE-3.2')).toBe('second&part');
  });

  it('escapes every delimiter and line breaks, round-tripping through the parser', () => {
    const nasty = 'O|Brien^Jr & Sons ~ \\ test\r\nnext';
    const escaped = escapeValue(nasty);
    expect(escaped).not.toMatch(/[|^&~\r\n]/);
    const m = parseHl7(`${BASIC}\rNTE|1||${escaped}`);
    expect(m.get('NTE-3')).toBe(nasty);
  });

  it('writes control characters as hexadecimal data: none reaches the wire (VT/FS would end the MLLP frame)', () => {
    const value = 'A\u000bB\u001cC\u0007D\u001bE\u007fF\tG';
    const escaped = escapeValue(value);
    expect(escaped).toBe('A\\X0B\\B\\X1C\\C\\X07\\D\\X1B\\E\\X7F\\F\\X09\\G');
    // eslint-disable-next-line no-control-regex -- the point of the test
    expect(escaped).not.toMatch(/[\u0000-\u001f\u007f]/);
    expect(parseHl7(`${BASIC}\rNTE|1||${escaped}`).get('NTE-3')).toBe(value);
  });
});

describe('character sets (MSH-18, table 0211)', () => {
  it('decodes 8859/1 bytes as Latin-1', () => {
    const m = parseHl7(fixture('orm-o01-v24-latin1-crlf.hl7'));
    expect(m.encoding).toBe('latin1');
    expect(m.get('PID-5')).toBe('MÜLLER');
    expect(m.get('PID-11')).toBe('Bahnhofstraße 5');
    expect(m.get('NTE-3')).toBe('Patient ist ansprechbar; Gerät am Bett');
    expect(codes(m)).toContain('latin1-charset');
  });

  it('decodes UNICODE UTF-8', () => {
    const m = parseHl7(fixture('omi-o23-v251-ihe-ipc.hl7'));
    expect(m.encoding).toBe('utf-8');
    expect(m.get('PID-5.2')).toBe('HÉLÈNE');
  });

  it('falls back for undeclared 8-bit bytes and records it', () => {
    const latin = Buffer.from(`${BASIC.replace('DOE', 'MÜLLER')}`, 'latin1');
    const m = parseHl7(latin);
    expect(m.get('PID-5')).toBe('MÜLLER');
    expect(codes(m)).toContain('undeclared-charset-non-ascii');
    const utf8 = parseHl7(Buffer.from(BASIC.replace('DOE', 'MÜLLER'), 'utf8'));
    expect(utf8.get('PID-5')).toBe('MÜLLER');
  });

  it('reports an unknown charset and still decodes', () => {
    const text = BASIC.replace('|2.5.1', '|2.5.1||||||ISO IR87');
    const m = parseHl7(Buffer.from(text, 'utf8'));
    expect(m.charsetKnown).toBe(false);
    expect(m.declaredCharset).toBe('ISO IR87');
    expect(codes(m)).toContain('unknown-charset');
  });

  it('decodes a UTF-8 declared message that is really Latin-1 without crashing', () => {
    const text = BASIC.replace('|2.5.1', '|2.5.1||||||UNICODE UTF-8').replace('DOE', 'MÜLLER');
    const m = parseHl7(Buffer.from(text, 'latin1'));
    expect(m.get('PID-5')).toBe('MÜLLER');
    expect(codes(m)).toContain('invalid-utf8');
  });
});

describe('order groups', () => {
  it('iterates ORC groups with their TQ1/OBR/NTE/IPC segments in order', () => {
    const m = parseHl7(fixture('omi-o23-v28-multi-order.hl7'));
    const groups = m.orderGroups();
    expect(groups.map((g) => g.segments.map((s) => s.id))).toEqual([
      ['ORC', 'TQ1', 'OBR', 'IPC'],
      ['ORC', 'TQ1', 'OBR', 'NTE', 'IPC'],
    ]);
    expect(groups[1].obr?.locationOf(4, undefined, 1)).toBe('OBR[2]-4.1');
  });

  it('starts a group at an OBR without ORC and records it', () => {
    const m = parseHl7(`${BASIC}\rOBR|2|P2^RIS||CT2^CT Chest^L`);
    expect(m.orderGroups().map((g) => g.segments.map((s) => s.id))).toEqual([
      ['ORC', 'OBR'],
      ['OBR'],
    ]);
    expect(codes(m)).toContain('obr-without-orc');
  });
});
