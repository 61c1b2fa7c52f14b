import { flattenFormatting, DEFAULT_DELIMITERS, unescapeValue } from './hl7-escape';
import { QuirkCollector } from './hl7-quirk';

describe('unescapeValue: \\.sp<n>\\', () => {
  it('gives at most 10 line breaks, with one quirk whatever the counts written', () => {
    const quirks = new QuirkCollector();
    const raw = Array.from({ length: 1000 }, (_, i) => `\\.sp${11 + i}\\`).join('');
    const text = unescapeValue(raw, {
      delimiters: DEFAULT_DELIMITERS,
      encoding: 'utf-8',
      quirks,
      location: 'OBR-13',
    });
    expect(text).toBe('\n'.repeat(10 * 1000));
    // the count is the sender's text: one quirk per place, not one per count
    expect(quirks.quirks).toEqual([
      { code: 'formatting-escape', detail: 'OBR-13: \\.sp\\ of more than 10 lines read as 10' },
    ]);
    expect(unescapeValue('a\\.sp3\\b', { delimiters: DEFAULT_DELIMITERS, encoding: 'utf-8' })).toBe(
      'a\n\n\nb',
    );
  });
});

describe('unescapeValue: \\Xhh\\ hexadecimal data', () => {
  const read = (raw: string, encoding: string, quirks = new QuirkCollector()) =>
    unescapeValue(raw, { delimiters: DEFAULT_DELIMITERS, encoding, quirks, location: 'NTE-3' });

  it('reads bytes that are no UTF-8 in a UTF-8 message as ISO 8859-1, saying so once per place', () => {
    const quirks = new QuirkCollector();
    expect(read('Ger\\XE4\\t, M\\XFC\\ller, \\X80\\', 'utf-8', quirks)).toBe('Gerät, Müller, €');
    expect(quirks.quirks).toEqual([
      {
        code: 'hex-data-not-utf8',
        detail: 'NTE-3: \\X..\\ bytes are no UTF-8; read as ISO 8859-1',
      },
    ]);
  });

  it('reads UTF-8 bytes in a UTF-8 message, and every byte in its own charset otherwise, with no quirk', () => {
    const quirks = new QuirkCollector();
    expect(read('Ren\\XC3A9\\e', 'utf-8', quirks)).toBe('Renée');
    expect(read('Ger\\XE4\\t', 'latin1', quirks)).toBe('Gerät');
    expect(read('\\XD8\\', 'iso-8859-2', quirks)).toBe('Ř');
    expect(quirks.quirks).toEqual([]);
  });
});

describe('flattenFormatting (formatting commands of an echoed field outside FT)', () => {
  it('writes \\.br\\ and \\.sp\\ as one space, the other commands as nothing, other escapes kept', () => {
    expect(flattenFormatting('MEIER\\.br\\JR^\\H\\HANS\\N\\\\.sp2\\X^^^^^L')).toBe(
      'MEIER JR^HANS X^^^^^L',
    );
    expect(flattenFormatting('Weg 1\\.br\\Hof\\.in+4\\^^Bonn')).toBe('Weg 1 Hof^^Bonn');
    // no space at a leaf's end or beside one; delimiter and hex escapes untouched
    expect(flattenFormatting('\\.br\\A \\.br\\B\\.br\\&C\\S\\D\\X0D\\')).toBe('A B&C\\S\\D\\X0D\\');
    // a lone escape character before a separator is no sequence
    expect(flattenFormatting('A\\^\\.br\\B')).toBe('A\\^B');
  });
});
