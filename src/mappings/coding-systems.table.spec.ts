import { fhirCodeSystemOf, hdOf, hl7CodingSystem } from './coding-systems.table';

describe('coding systems between FHIR and HL7 v2', () => {
  it.each([
    ['http://loinc.org', 'LN'],
    ['http://loinc.org/', 'LN'],
    ['http://snomed.info/sct', 'SCT'],
    ['http://www.ama-assn.org/go/cpt', 'C4'],
    ['urn:oid:2.16.840.1.113883.6.1', 'LN'],
    ['urn:oid:1.2.840.10008.2.16.4', 'DCM'],
    // a URI or OID the table does not know: table 0396 L (local), never the URI in an ID field
    ['http://hospital.example.org/fhir/CodeSystem/rad-procedures', 'L'],
    ['urn:oid:1.2.276.0.76.5.409', 'L'],
    // what an HL7 order brought stays as the RIS wrote it
    ['LN', 'LN'],
    ['99RAD', '99RAD'],
    [undefined, undefined],
    ['  ', undefined],
  ])('CWE-3 of %s is %s', (system, code) => {
    expect(hl7CodingSystem(system)).toBe(code);
  });

  it('an identifier system as an HD: namespace, universal ID, universal ID type (table 0301)', () => {
    expect(hdOf('urn:oid:2.16.840.1.113883.3.999.1')).toEqual([
      undefined,
      '2.16.840.1.113883.3.999.1',
      'ISO',
    ]);
    expect(hdOf('urn:uuid:6f1c0a52-5f3e-4a7e-9d2b-1c3e5a7b9d01')).toEqual([
      undefined,
      '6f1c0a52-5f3e-4a7e-9d2b-1c3e5a7b9d01',
      'UUID',
    ]);
    expect(hdOf('http://hospital.smarthealthit.org')).toEqual([
      undefined,
      'http://hospital.smarthealthit.org',
      'URI',
    ]);
    expect(hdOf('HOSPA')).toEqual(['HOSPA']);
    expect(hdOf(undefined)).toEqual([]);
  });

  it('a table 0396 mnemonic back to its FHIR URI', () => {
    expect(fhirCodeSystemOf('LN')).toBe('http://loinc.org');
    expect(fhirCodeSystemOf('sct')).toBe('http://snomed.info/sct');
    expect(fhirCodeSystemOf('99RAD')).toBeUndefined();
  });
});
