import { PeerBase, PeerUrlError } from './peer-url';

describe('PeerBase: a URL is followed only within the configured base of its peer', () => {
  const ehr = new PeerBase('EHR', 'https://ehr.hospital.example/fhir/r4/');

  it.each([
    ['ServiceRequest/123', 'https://ehr.hospital.example/fhir/r4/ServiceRequest/123'],
    [
      'ServiceRequest/123/_history/2',
      'https://ehr.hospital.example/fhir/r4/ServiceRequest/123/_history/2',
    ],
    [
      'https://ehr.hospital.example/fhir/r4/Patient/p1',
      'https://ehr.hospital.example/fhir/r4/Patient/p1',
    ],
    // RFC 3986 §6.2.2: scheme and host are case-insensitive, the default port is implied.
    [
      'HTTPS://EHR.Hospital.Example:443/fhir/r4/Patient/p1',
      'https://ehr.hospital.example/fhir/r4/Patient/p1',
    ],
    [
      'https://ehr.hospital.example/fhir/r4/Patient?identifier=a|b',
      'https://ehr.hospital.example/fhir/r4/Patient?identifier=a|b',
    ],
    ['https://ehr.hospital.example/fhir/r4', 'https://ehr.hospital.example/fhir/r4'],
  ])('accepts %s', (reference, expected) => {
    expect(ehr.resolve(reference).href).toBe(new URL(expected).href);
    expect(ehr.contains(reference)).toBe(true);
  });

  const host = 'https://ehr.hospital.example';
  it.each([
    ['another host', 'https://evil.example/fhir/r4/ServiceRequest/1', 'origin'],
    ['a look-alike host', `${host}.evil.example/fhir/r4/x`, 'origin'],
    ['another port', `${host}:8443/fhir/r4/ServiceRequest/1`, 'origin'],
    ['another scheme', 'http://ehr.hospital.example/fhir/r4/ServiceRequest/1', 'scheme'],
    ['user information', 'https://user:pw@ehr.hospital.example/fhir/r4/Patient/1', 'userinfo'],
    ['a user name alone', `${host}@evil.example/fhir/r4/Patient/1`, 'userinfo'],
    ['a sibling path with the base as its prefix', `${host}/fhir/r4-admin/x`, 'path'],
    ['a path outside the base', `${host}/admin/users`, 'path'],
    ['dot segments climbing out', `${host}/fhir/r4/../../admin`, 'path'],
    ['a relative reference climbing out', '../../admin/users', 'path'],
    ['encoded dot segments', `${host}/fhir/r4/%2e%2e/%2E%2E/admin`, 'ambiguous-encoding'],
    ['an encoded slash', `${host}/fhir/r4/Patient%2F..%2F..%2Fadmin`, 'ambiguous-encoding'],
    ['a double-encoded dot', `${host}/fhir/r4/%252e%252e/admin`, 'ambiguous-encoding'],
    ['a backslash', `${host}\\@evil.example/fhir/r4/x`, 'ambiguous-encoding'],
    ['a protocol-relative URL', '//evil.example/fhir/r4/Patient/1', 'origin'],
    ['a CR/LF', `${host}/fhir/r4/Patient/1\r\nHost: evil`, 'ambiguous-encoding'],
    ['a tab inside the host', 'https://ehr.hospital.exa\tmple/fhir/r4/x', 'ambiguous-encoding'],
    ['a file URL', 'file:///etc/passwd', 'scheme'],
    ['a data URL', 'data:text/plain,hello', 'scheme'],
  ])('refuses %s', (_why, reference, reason) => {
    let error: unknown;
    try {
      ehr.resolve(reference);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(PeerUrlError);
    expect((error as PeerUrlError).reason).toBe(reason);
    expect(ehr.contains(reference)).toBe(false);
  });

  it('with refuseDotSegments, a `.` or `..` segment is refused even within the base (FHIR references are Type/id)', () => {
    const fhir = new PeerBase('EHR', 'https://ehr.hospital.example/fhir/r4/', {
      refuseDotSegments: true,
    });
    for (const reference of [
      'Patient/.',
      'Patient/..',
      'Patient/p1/../..',
      './Patient/p1',
      'Patient/p1/_history/..',
      `${host}/fhir/r4/Patient/./p1`,
      `${host}/fhir/r4/x/../Patient/p1`,
    ]) {
      expect([reference, fhir.refusalOf(reference)?.reason]).toEqual([reference, 'dot-segment']);
    }
    // Dots inside a segment are an id's characters; a query is no path.
    for (const reference of ['Patient/a.b', 'Patient/...x', 'Patient?name=..', 'Patient/p1#..']) {
      expect([reference, fhir.refusalOf(reference)]).toEqual([reference, undefined]);
    }
    // Without the option, a dot segment that stays within the base is resolved, as before.
    expect(ehr.resolve(`${host}/fhir/r4/x/../Patient/p1`).href).toBe(`${host}/fhir/r4/Patient/p1`);
  });

  it('a base without a path admits every path of its origin, and nothing of another', () => {
    const pacs = new PeerBase('PACS', 'http://127.0.0.1:8042');
    expect(pacs.contains('http://127.0.0.1:8042/dicom-web/studies/1.2.3')).toBe(true);
    expect(pacs.contains('http://127.0.0.1:8043/dicom-web/studies/1.2.3')).toBe(false);
    expect(pacs.contains('http://localhost:8042/dicom-web/studies/1.2.3')).toBe(false);
    expect(pacs.href).toBe('http://127.0.0.1:8042');
  });

  it('refuses a base that is not http(s)', () => {
    expect(() => new PeerBase('EHR', 'ftp://ehr.example/fhir')).toThrow(/http/);
  });

  it('is linear on a hostile 1 MB reference (refused by length)', () => {
    expect(ehr.contains(`ServiceRequest/${'a'.repeat(1_000_000)}`)).toBe(false);
  });
});
