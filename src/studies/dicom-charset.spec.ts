import { dicomTextDecoder } from './dicom-charset';

const bytes = (s: string) => Buffer.from(s, 'latin1');

/** The examples of PS3.5 Annexes H, I and J, byte for byte, and the single-set terms. */
describe('dicomTextDecoder', () => {
  it.each([
    [
      'Japanese, ISO 2022 IR 87 after ASCII (PS3.5 H.3.1)',
      ['', 'ISO 2022 IR 87'],
      'Yamada^Tarou=\x1b$B;3ED\x1b(B^\x1b$BB@O:\x1b(B=\x1b$B$d$^$@\x1b(B^\x1b$B$?$m$&\x1b(B',
      'Yamada^Tarou=山田^太郎=やまだ^たろう',
    ],
    [
      'Japanese, katakana (IR 13) and kanji (IR 87) (PS3.5 H.3.2)',
      ['ISO 2022 IR 13', 'ISO 2022 IR 87'],
      '\xd4\xcf\xc0\xde^\xc0\xdb\xb3=\x1b$B;3ED\x1b(J^\x1b$BB@O:\x1b(J=\x1b$B$d$^$@\x1b(J^\x1b$B$?$m$&\x1b(J',
      'ﾔﾏﾀﾞ^ﾀﾛｳ=山田^太郎=やまだ^たろう',
    ],
    [
      'Korean, ISO 2022 IR 149 (PS3.5 I.2)',
      ['', 'ISO 2022 IR 149'],
      'Hong^Gildong=\x1b$)C\xfb\xf3^\x1b$)C\xd1\xce\xd4\xd7=\x1b$)C\xc8\xab^\x1b$)C\xb1\xe6\xb5\xbf',
      'Hong^Gildong=洪^吉洞=홍^길동',
    ],
    [
      'Chinese, ISO 2022 IR 58 (PS3.5 K.2)',
      ['ISO 2022 IR 6', 'ISO 2022 IR 58'],
      'Zhang^XiaoDong=\x1b$)A\xd5\xc5^\x1b$)A\xd0\xa1\xb6\xab=',
      'Zhang^XiaoDong=张^小东=',
    ],
    [
      'Chinese, GB18030 (PS3.5 J.3)',
      ['GB18030'],
      'Wang^XiaoDong=\xcd\xf5^\xd0\xa1\xb6\xab=',
      'Wang^XiaoDong=王^小东=',
    ],
    [
      'Korean without the escape sequences PS3.5 I.2 asks for (as Korean devices write it)',
      ['', 'ISO 2022 IR 149'],
      'Hong^Gildong=\xfb\xf3^\xd1\xce\xd4\xd7=\xc8\xab^\xb1\xe6\xb5\xbf',
      'Hong^Gildong=洪^吉洞=홍^길동',
    ],
    [
      'Chinese without the escape sequences PS3.5 K.2 asks for',
      ['ISO 2022 IR 6', 'ISO 2022 IR 58'],
      'Zhang^XiaoDong=\xd5\xc5^\xd0\xa1\xb6\xab=',
      'Zhang^XiaoDong=张^小东=',
    ],
    [
      'Japanese of an older writer: katakana in G0 (ESC ( I), JIS C 6226 kanji (ESC $ @)',
      ['', 'ISO 2022 IR 87'],
      '\x1b(ITO@\x1b(B^\x1b(I@[3\x1b(B=\x1b$@;3ED\x1b(B',
      'ﾔﾏﾀ^ﾀﾛｳ=山田',
    ],
    ['an escape sequence we do not know goes whole', ['', 'ISO 2022 IR 87'], 'A\x1b$(QB', 'AB'],
    ['Latin-1', ['ISO_IR 100'], 'Buc^J\xe9r\xf4me', 'Buc^Jérôme'],
    ['no term: the default repertoire', [], 'Doe^John', 'Doe^John'],
    ['no term, but ISO 2022 escape sequences (IR 87)', [], '\x1b$B;3ED\x1b(B^Taro', '山田^Taro'],
    ['a term we do not know: read as Latin-1, not refused', ['ISO_IR100'], 'M\xfcller', 'Müller'],
    [
      'a term we do not know, Latin-1 bytes: Latin-1, not refused',
      ['ISO_IR 999'],
      'M\xfcller',
      'Müller',
    ],
    ['a term we do not know, UTF-8 bytes: UTF-8', ['LATIN_UNKNOWN'], 'M\xc3\xbcller', 'Müller'],
    ['ISO 2022 spelt with hyphens', ['', 'ISO-2022-IR 87'], '\x1b$B;3ED\x1b(B', '山田'],
  ])('%s', (_label, terms, value, expected) => {
    expect(dicomTextDecoder(terms).decode(bytes(value))).toBe(expected);
  });

  it('no term but bytes past ASCII: UTF-8 when they are valid UTF-8, else Latin-1', () => {
    // Undeclared UTF-8, as newer software writes it (was read as Latin-1: `MÃ¼ller`), and
    // undeclared Latin-1, as older European devices write it (still Latin-1).
    expect(dicomTextDecoder([]).decode(Buffer.from('Müller^Zoë=王^小東'))).toBe(
      'Müller^Zoë=王^小東',
    );
    expect(dicomTextDecoder([]).decode(bytes('M\xfcller^Zo\xeb'))).toBe('Müller^Zoë');
    expect(dicomTextDecoder(['']).decode(Buffer.from('Müller'))).toBe('Müller');
  });

  it('a switch to Latin-9 (ISO 2022 IR 203, ESC 02/13 06/02 = ESC - b, PS3.3 Table C.12-3) reads € and Š, not ¤ and ¦', () => {
    const d = dicomTextDecoder(['ISO 2022 IR 100', 'ISO 2022 IR 203']);
    // Müller in Latin-1, then ESC - b and `Šimek 5 €` in ISO 8859-15 (Š A6, € A4)
    expect(d.decode(bytes('M\xfcller^\x1b-b\xa6imek 5 \xa4'))).toBe('Müller^Šimek 5 €');
  });

  it('UTF-8 (ISO_IR 192)', () => {
    expect(dicomTextDecoder(['ISO_IR 192']).decode(Buffer.from('Wang^XiaoDong=王^小東='))).toBe(
      'Wang^XiaoDong=王^小東=',
    );
  });

  it('a value that switches sets without end is read in bounded time: past 1,024 switches the rest is unreadable (U+FFFD), never misread', () => {
    // 2 MiB of ESC bytes, or of bytes alternating below and above 0x80 (a run per byte): each
    // escape was matched by 18 string compares and each run decoded on its own, 2 MiB took
    // 4-12 s of a blocked event loop (a Patient's Name from any C-STORE caller), 16 MiB 64 s.
    const size = 2 * 1024 * 1024;
    const escapes = Buffer.alloc(size, 0x1b);
    const alternating = Buffer.alloc(size);
    for (let i = 0; i < size; i++) alternating[i] = i % 2 ? 0xc1 : 0x41;
    for (const [terms, value] of [
      [['', 'ISO 2022 IR 87'], escapes],
      [['ISO 2022 IR 6', 'ISO 2022 IR 149'], alternating],
      [['ISO 2022 IR 13', 'ISO 2022 IR 87'], alternating],
    ] as const) {
      const started = Date.now();
      const text = dicomTextDecoder(terms).decode(value);
      // quiet: a few ms; 3 s leaves room for a loaded machine
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(text.endsWith('\ufffd')).toBe(true);
      expect(text.length).toBeLessThan(4_096);
    }
    // a real value keeps every character, escapes and all
    const name = 'Yamada^Tarou=\x1b$B;3ED\x1b(B^\x1b$BB@O:\x1b(B';
    expect(dicomTextDecoder(['', 'ISO 2022 IR 87']).decode(bytes(name))).toBe(
      'Yamada^Tarou=山田^太郎',
    );
  });
});
