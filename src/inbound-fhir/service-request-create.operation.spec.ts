import { FhirError } from './fhir.error';
import { parseIfNoneExist } from './service-request-create.operation';

describe('parseIfNoneExist (R4 http.html#ccreate, identifier only)', () => {
  it('reads identifier=system|value, with or without the type prefix', () => {
    expect(parseIfNoneExist('identifier=urn:placer|123')).toMatchObject({
      system: 'urn:placer',
      value: '123',
    });
    expect(parseIfNoneExist('ServiceRequest?identifier=urn:placer|123')).toMatchObject({
      system: 'urn:placer',
      value: '123',
    });
    expect(parseIfNoneExist('identifier=123')).toEqual({
      value: '123',
      identifiers: [{ value: '123' }],
    });
    expect(parseIfNoneExist('identifier=|123')).toMatchObject({ system: undefined, value: '123' });
  });

  it('reads repeated identifier parameters (AND) and escapes; refuses a comma (OR)', () => {
    expect(parseIfNoneExist('identifier=a|1&identifier=b|2')?.identifiers).toEqual([
      { system: 'a', value: '1' },
      { system: 'b', value: '2' },
    ]);
    expect(parseIfNoneExist('identifier=a|1\\,2\\|3')).toMatchObject({
      system: 'a',
      value: '1,2|3',
    });
    for (const header of ['identifier=a|1,a|2', 'identifier=a|1&identifier=b|2,3', 'identifier=']) {
      expect(() => parseIfNoneExist(header)).toThrow(FhirError);
    }
  });

  it('is absent when the header is', () => {
    expect(parseIfNoneExist(undefined)).toBeUndefined();
    expect(parseIfNoneExist('  ')).toBeUndefined();
  });

  it('refuses any other search (400, not-supported)', () => {
    for (const header of ['status=active', 'identifier=a|1&status=active']) {
      expect(() => parseIfNoneExist(header)).toThrow(FhirError);
      try {
        parseIfNoneExist(header);
      } catch (error) {
        expect((error as FhirError).httpStatus).toBe(400);
        expect((error as FhirError).issues[0]?.code).toBe('not-supported');
      }
    }
  });
});
