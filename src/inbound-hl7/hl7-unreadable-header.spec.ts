import { evaluateHl7Message, unparseableAck } from './hl7-order.pipeline';

/**
 * A header whose MSH-2 cannot be read gets an AR that says what is wrong with MSH-2 (ERR-2 at
 * MSH-2, ERR-3 102, ERR-8 naming the fault), so the sender's interface analyst can fix it
 * without our logs. The shapes are those seen from hand-built senders: the escape character
 * doubled as a string literal writes it (`MSH|^~\\&|`, common in code samples and Mirth
 * JavaScript transformers that build messages from string literals), MSH-2 left out
 * (the application name where MSH-2 belongs, `MSH|RIS|…`), one left short, a repeated component separator, a
 * sixth character, a space, a letter.
 * The header is otherwise the v2.5.1 ORM of test/fixtures/hl7/orm-o01-v251-cancel-ca.hl7.
 */
describe('AR for an unreadable MSH-2', () => {
  const stamp = { controlId: () => 'OUT-1', now: () => new Date('2026-01-01T12:00:00Z') };
  const rest = '|RIS|HOSP|AI|RAD|20260101115900||ORM^O01^ORM_O01|MSG-77|P|2.5.1\rPID|1||A1\r';

  it.each([
    [
      '^~\\\\&',
      /"\\" is both character 3 and 4 of "\^~\\\\&" \(the escape character written twice/,
    ],
    ['', /MSH-2 is empty/],
    ['RIS', /"RIS" is text, not encoding characters: MSH-2 seems to be missing/],
    ['^^\\&', /"\^" is both character 1 and 2/],
    ['^~\\', /"\^~\\" has 3 character\(s\), four are needed/],
    ['^~\\&#!', /"\^~\\&#!" has 6 characters, at most five/],
    ['^ \\&', /character 2 U\+0020 of "\^ \\&" is a space/],
    ['^~\\A', /character 4 "A" of "\^~\\A" is a letter/],
  ])('MSH-2 %j', (enc, why) => {
    const raw = Buffer.from(`MSH|${enc}${rest}`, 'latin1');
    const evaluation = evaluateHl7Message(raw);
    if (evaluation.kind !== 'unparseable') throw new Error(`read as ${evaluation.kind}`);
    const ack = unparseableAck(raw, evaluation.reason, {}, stamp, evaluation.mshField)
      .toString('latin1')
      .split('\r');
    expect(ack[1]).toBe('MSA|AR|MSG-77');
    const err = ack[2].split('|');
    expect(err.slice(0, 5)).toEqual(['ERR', '', 'MSH^1^2', '102^Data type error^HL70357', 'E']);
    // ERR-8 as the sender reads it (our own delimiters, escaped)
    const unescape = { E: '\\', F: '|', S: '^', R: '~', T: '&' } as Record<string, string>;
    const text = err[8].replace(/\\([EFSRT])\\/g, (_, c: string) => unescape[c]);
    expect(text).toMatch(/^Not an HL7 v2 message: MSH-2 encoding characters invalid: /);
    expect(text).toMatch(why);
  });
});

describe('AR for a header without MSH-2', () => {
  it('MSH-1 followed by MSH-3: MSA-2 is still the MSH-10, ERR-8 says MSH-2 is missing', () => {
    const raw = Buffer.from(
      'MSH|RIS|HOSP|AI|RAD|20260101115900||ORM^O01^ORM_O01|MSG-77|P|2.5.1\rPID|1||A1\r',
      'latin1',
    );
    const evaluation = evaluateHl7Message(raw);
    if (evaluation.kind !== 'unparseable') throw new Error(`read as ${evaluation.kind}`);
    const ack = unparseableAck(
      raw,
      evaluation.reason,
      {},
      { controlId: () => 'OUT-1', now: () => new Date(0) },
      evaluation.mshField,
    ).toString('latin1');
    // before: MSA|AR|P (MSH-11, read one place late)
    expect(ack.split('\r')[1]).toBe('MSA|AR|MSG-77');
    expect(ack).toMatch(/MSH-2 seems to be missing/);
  });
});
