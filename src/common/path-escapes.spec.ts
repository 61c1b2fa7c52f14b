import { badPathEscape } from './path-escapes';

describe('badPathEscape', () => {
  it.each([
    ['/fhir/ServiceRequest/abc-123', undefined],
    ['/api/audit/orders/%C3%84%C3%96', undefined], // ÄÖ in UTF-8
    ['/api/audit/orders/a%20b', undefined],
    ['/fhir/ServiceRequest/%ff', '%ff'],
    ['/api/audit/orders/%FF', '%FF'],
    ['/api/audit/orders/K%F6nig', '%F6'], // Latin-1 ö
    ['/x/%c3%28', '%c3%28'], // a lead byte without its continuation
    ['/x/%c0%af', '%c0%af'], // overlong '/'
    ['/x/%ed%a0%80', '%ed%a0%80'], // a surrogate half
    ['/x/50%', '%'],
    ['/x/%zz', '%'],
    ['/x/%2', '%'],
    ['/x/%41/%zz/%ff', '%'], // the first bad one, in path order
    ['/x/%ff/%zz', '%ff'],
  ])('%s → %s', (path, bad) => {
    expect(badPathEscape(path)).toBe(bad);
  });

  it('quotes at most 24 characters of a long run', () => {
    expect(badPathEscape(`/x/${'%ff'.repeat(5000)}`)).toBe(`${'%ff'.repeat(8)}…`);
  });

  it('is linear: a 16 KiB path of escapes is checked at once', () => {
    const path = `/x/${'%C3%84'.repeat(2700)}%`;
    const started = process.hrtime.bigint();
    expect(badPathEscape(path)).toBe('%');
    expect(Number(process.hrtime.bigint() - started) / 1e6).toBeLessThan(200);
  });
});
