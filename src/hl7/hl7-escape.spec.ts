import { DEFAULT_DELIMITERS, unescapeValue } from './hl7-escape';
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
