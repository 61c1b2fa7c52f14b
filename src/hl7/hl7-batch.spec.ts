import { splitHl7Batch } from './hl7-batch';

const batch = (trailer: string): Buffer =>
  Buffer.from(
    [
      'BHS|^~\\&|RIS|HOSP|AI|FAC|20240318',
      'MSH|^~\\&|RIS|HOSP|AI|FAC|20240318||ORM^O01|M1|P|2.3.1',
      'PID|1||1',
      'MSH|^~\\&|RIS|HOSP|AI|FAC|20240318||ORM^O01|M2|P|2.3.1',
      'PID|1||2',
      trailer,
      '',
    ].join('\r'),
    'latin1',
  );

describe('splitHl7Batch', () => {
  it('reads the count of BTS-1 when it is valued', () => {
    const split = splitHl7Batch(batch('BTS|2'), 10);
    expect('tooMany' in split).toBe(false);
    if ('tooMany' in split) return;
    expect(split.messages).toHaveLength(2);
    expect(split.declaredCount).toBe(2);
  });

  it('takes an empty BTS-1 as no count declared, not as 0', () => {
    // BTS-1 is optional: `BTS|` and `BTS||comment` were read as "BTS-1 declares 0
    // message(s)", a count mismatch said in the batch ACK's BTS-2 and recorded with every
    // message of a complete batch.
    for (const trailer of ['BTS', 'BTS|', 'BTS||end of day', 'BTS| |x']) {
      const split = splitHl7Batch(batch(trailer), 10);
      if ('tooMany' in split) throw new Error('not too many');
      expect(split.messages).toHaveLength(2);
      expect(split.declaredCount).toBeUndefined();
    }
  });
});
