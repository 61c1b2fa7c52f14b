import { fhirCode, fhirString, fhirText, fhirUri } from './fhir-values';

describe('values written into FHIR R4 resources', () => {
  it('strings: control characters and lone surrogates become U+FFFD; TAB, LF, CR and pairs stay', () => {
    expect(fhirString('a\fb\u0000c\u0007d\u001be\u007f')).toBe(
      'a\uFFFDb\uFFFDc\uFFFDd\uFFFDe\uFFFD',
    );
    expect(fhirString('x \ud800 y \udc00 z')).toBe('x \uFFFD y \uFFFD z');
    expect(fhirString('line\r\n\tnext \u{1F600} Müller')).toBe('line\r\n\tnext \u{1F600} Müller');
  });

  it('codes: trimmed, one space inside, left out when empty', () => {
    expect(fhirCode(' CT  CHEST\t')).toBe('CT CHEST');
    expect(fhirCode('24590-2')).toBe('24590-2');
    expect(fhirCode('  ')).toBeUndefined();
    expect(fhirCode(undefined)).toBeUndefined();
  });

  it('uris: whitespace percent-encoded, a valid uri unchanged', () => {
    expect(fhirUri('RADIS 1')).toBe('RADIS%201');
    expect(fhirUri('http://hospital.org/orders')).toBe('http://hospital.org/orders');
    expect(fhirUri(' ')).toBeUndefined();
  });

  it('text: a string of only whitespace (no R4 string) is left out', () => {
    expect(fhirText('   ')).toBeUndefined();
    expect(fhirText('\u00a0\t')).toBeUndefined();
    expect(fhirText(undefined)).toBeUndefined();
    expect(fhirText(' PAT-1 ')).toBe(' PAT-1 ');
    expect(fhirText('\u0007')).toBe('\uFFFD');
  });
});
