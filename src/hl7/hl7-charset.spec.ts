import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { checkStructure } from './hl7-structure.validator';
import { decideCharset, decodeBytes, encodeText, inTable0211 } from './hl7-charset';
import { QuirkCollector } from './hl7-quirk';
import { parseHl7 } from './hl7-message';

/**
 * Issue #20 item 4: MSH-18 values of HL7 table 0211 (v2.5.1) are known, whatever their
 * spelling of the standard's list: UNICODE and the East Asian sets no longer draw a warning.
 * Messages are the IHE OMI^O23 fixture with MSH-18 set and non-ASCII patient names.
 */
const OMI = readFileSync(
  join(__dirname, '..', '..', 'test', 'fixtures', 'hl7', 'omi-o23-v251-ihe-ipc.hl7'),
  'latin1',
);

function withCharset(charset: string, name: string, encode: (s: string) => Buffer): Buffer {
  const lines = OMI.split(/\r\n|\r|\n/).filter(Boolean);
  const msh = lines[0]!.split('|');
  while (msh.length < 18) msh.push('');
  msh[17] = charset; // MSH-18 (MSH-1 is the separator)
  lines[0] = msh.join('|');
  const pid = lines.findIndex((l) => l.startsWith('PID|'));
  const f = lines[pid]!.split('|');
  f[5] = name;
  lines[pid] = f.join('|');
  return encode(lines.join('\r'));
}

describe('MSH-18 and HL7 table 0211', () => {
  it.each(['ASCII', 'UNICODE', 'UNICODE UTF-8', 'GB 18030-2000', 'KS X 1001', 'BIG-5', '8859/15'])(
    '%s is a table 0211 value',
    (v) => expect(inTable0211(v)).toBe(true),
  );

  it('UNICODE (the table value many senders write for UTF-8) decodes as UTF-8 with no warning', () => {
    const m = parseHl7(withCharset('UNICODE', 'Müller^Zoë', (s) => Buffer.from(s, 'utf8')));
    expect(m.charsetKnown).toBe(true);
    expect(m.get('PID-5.1')).toBe('Müller');
    expect(m.quirks.map((q) => q.code)).not.toContain('unknown-charset');
    expect(checkStructure(m).errors.map((e) => e.location)).not.toContain('MSH-18');
  });

  it('GB 18030-2000 decodes Chinese names', () => {
    const bytes = withCharset('GB 18030-2000', '王^小明', (s) => {
      // GB 18030 encodes these two names as follows (ASCII elsewhere is unchanged).
      return Buffer.from(
        s.replace('王', '\u0000W\u0000').replace('小明', '\u0000X\u0000'),
        'latin1',
      );
    });
    const gb = Buffer.from(
      bytes
        .toString('latin1')
        .replace('\u0000W\u0000', '\u00cd\u00f5')
        .replace('\u0000X\u0000', '\u00d0\u00a1\u00c3\u00f7'),
      'latin1',
    );
    const m = parseHl7(gb);
    expect(m.charsetKnown).toBe(true);
    expect(m.get('PID-5.1')).toBe('王');
    expect(m.get('PID-5.2')).toBe('小明');
  });

  it('UNICODE UTF-16 is a table value, but cannot travel in MLLP framing: recorded as such', () => {
    expect(inTable0211('UNICODE UTF-16')).toBe(true);
    const m = parseHl7(withCharset('UNICODE UTF-16', 'Doe^Jane', (s) => Buffer.from(s, 'latin1')));
    expect(m.charsetKnown).toBe(false);
    expect(m.quirks.find((q) => q.code === 'unknown-charset')?.detail).toMatch(
      /in table 0211 but cannot be decoded/,
    );
  });

  it('outbound text is written in the single-byte charset MSH-18 names, not as UTF-8 under its name', () => {
    // An ORU^R01 to a Czech RIS (MSH-18 8859/2) copies its PID: the names must stay readable.
    const bytes = encodeText('PID|1||7||DVOŘÁK^JIŘÍ', '8859/2');
    expect(bytes.subarray(-11)).toEqual(
      Buffer.from([0x44, 0x56, 0x4f, 0xd8, 0xc1, 0x4b, 0x5e, 0x4a, 0x49, 0xd8, 0xcd]),
    );
    expect(decodeBytes(bytes, 'iso-8859-2')).toBe('PID|1||7||DVOŘÁK^JIŘÍ');
    // A character the charset has no byte for is written as its ASCII stand-in (Ł as L, ≥ as
    // >=), else '?', never a stray byte of its code point.
    expect(encodeText('Ł≥', '8859/1')).toEqual(Buffer.from('L>=', 'latin1'));
    expect(encodeText('山ő', '8859/1')).toEqual(Buffer.from('?o', 'latin1'));
    expect(encodeText('ő', '8859/2')).toEqual(Buffer.from([0xf5]));
    expect(encodeText('Łódź', 'UNICODE UTF-8')).toEqual(Buffer.from('Łódź', 'utf8'));
  });
});

describe('MSH-18 naming a single-byte set over UTF-8 bytes (an engine that re-encoded)', () => {
  it('8859/1 with UTF-8 bytes is read as UTF-8, with a quirk', () => {
    const m = parseHl7(withCharset('8859/1', 'Müller^Jürgen', (s) => Buffer.from(s, 'utf8')));
    expect(m.get('PID-5.1')).toBe('Müller');
    expect(m.get('PID-5.2')).toBe('Jürgen');
    expect(m.quirks.map((q) => q.code)).toContain('utf8-despite-declared-charset');
  });

  it('CP1250 with UTF-8 bytes too; real Latin-1 and CP1250 bytes are still read as declared', () => {
    const m = parseHl7(withCharset('CP1250', 'Małecka^Żaneta', (s) => Buffer.from(s, 'utf8')));
    expect(m.get('PID-5.1')).toBe('Małecka');
    const latin1 = parseHl7(
      withCharset('8859/1', 'Müller^Jürgen', (s) => Buffer.from(s, 'latin1')),
    );
    expect(latin1.get('PID-5.1')).toBe('Müller');
    expect(latin1.quirks.map((q) => q.code)).not.toContain('utf8-despite-declared-charset');
  });
});

describe('bytes 0x80-0x9F that are no UTF-8 and that MSH-18 does not name', () => {
  it.each(['', '||||||ASCII', '||||||UNICODE UTF-8', '||||||FOO'])(
    'MSH-18 %j: read as Windows-1252, with the quirk',
    (msh18) => {
      const raw = Buffer.from(
        `MSH|^~\\&|A|O\x92NEILL|B|C|2024||ORM^O01|1|P|2.5.1${msh18}\r`,
        'latin1',
      );
      const quirks = new QuirkCollector();
      expect(decideCharset(raw, quirks).encoding).toBe('windows-1252');
      expect(quirks.quirks.map((q) => q.code)).toContain('windows-1252-bytes');
    },
  );

  it('Latin-1 letters alone stay ISO 8859-1', () => {
    const raw = Buffer.from('MSH|^~\\&|A|K\xd6LN|B|C|2024||ORM^O01|1|P|2.5.1\r', 'latin1');
    expect(decideCharset(raw, new QuirkCollector()).encoding).toBe('latin1');
  });
});

describe('a Windows code page under the ISO 8859 part it stands beside', () => {
  it.each([
    ['8859/2', 0x8c, 'windows-1250', 'Ś'],
    ['8859/5', 0x80, 'windows-1251', 'Ђ'],
    ['8859/9', 0x92, 'windows-1254', '’'],
  ])('MSH-18 %s with byte %i (in 0x80-0x9F) is read as %s', (msh18, byte, encoding, letter) => {
    const raw = Buffer.concat([
      Buffer.from(`MSH|^~\\&|A|`, 'latin1'),
      Buffer.from([byte]),
      Buffer.from(`|B|C|2024||ORM^O01|1|P|2.5.1||||||${msh18}\r`, 'latin1'),
    ]);
    const quirks = new QuirkCollector();
    expect(decideCharset(raw, quirks).encoding).toBe(encoding);
    expect(quirks.quirks.map((q) => q.code)).toContain('windows-code-page-bytes');
    expect(parseHl7(raw).get('MSH-4')).toBe(letter);
    // and what we write back to that sender is its code page's byte
    expect(encodeText(letter, msh18, encoding)).toEqual(Buffer.from([byte]));
  });

  it('ISO-2022-JP bytes under ~ISO IR87: read before the fields are split; two designations in a row are one switch; JIS X 0212 read as before', () => {
    const jis = (name: string, msh18 = '~ISO IR87') =>
      Buffer.from(
        [
          `MSH|^~\\&|RIS|HOSP|AI|HOSP|20240318101500||ORM^O01|J1|P|2.5|||||JPN|${msh18}||ISO 2022-1994`,
          `PID|1||PAT-1^^^HOSP^MR||${name}||19560402|M`,
        ].join('\r'),
        'latin1',
      );
    // 山田 ESC $ B `;3ED`, 太郎 `B@O:`, with no character between ESC ( B and ESC $ B
    const m = parseHl7(jis('\u001b$B;3ED\u001b(B\u001b$BB@O:\u001b(B^X'));
    expect(m.get('PID-5.1')).toBe('山田太郎');
    expect(m.get('PID-5.2')).toBe('X');
    // JIS X 0212 (ESC $ ( D) has no decoder here: read as before
    const quirks = new QuirkCollector();
    expect(decideCharset(jis('\u001b$(DB@\u001b(B^X'), quirks).encoding).toBe('ascii');
    // without ISO IR87 named, an ESC is a control character as before
    expect(decideCharset(jis('\u001b$B;3ED\u001b(B', ''), new QuirkCollector()).encoding).toBe(
      'ascii',
    );
  });
});
