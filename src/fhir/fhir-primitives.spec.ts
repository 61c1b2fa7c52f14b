import type { Bundle, ServiceRequest } from '@medplum/fhirtypes';
import { loadFhirDefinitions } from './fhir-validator';
import { primitiveIssues } from './fhir-primitives';

const sr: ServiceRequest = {
  resourceType: 'ServiceRequest',
  status: 'active',
  intent: 'order',
  subject: { reference: 'Patient/1' },
};

describe('R4 primitive patterns the structure validator does not check', () => {
  beforeAll(() => loadFhirDefinitions());

  it.each([
    '2013',
    '2013-05',
    '2013-05-08',
    '2013-05-08T09:33:27Z',
    '2013-05-08T09:33:27.1882432-05:00',
    '2016-12-31T23:59:60+14:00',
  ])('accepts the R4 dateTime %s', (v) => {
    expect(primitiveIssues({ ...sr, occurrenceDateTime: v })).toEqual([]);
  });

  it.each(['2013-05-08T09', '2013-05-08T09:33:27', '2013-05-08T09:33Z', '2013-05-08+01:00'])(
    'refuses the dateTime %s on its element',
    (v) => {
      const issues = primitiveIssues({ ...sr, occurrenceDateTime: v });
      expect(issues.map((i) => i.expression)).toEqual([['ServiceRequest.occurrenceDateTime']]);
    },
  );

  it('checks dates and dateTimes at any depth, with their indices', () => {
    const issues = primitiveIssues({
      ...sr,
      occurrencePeriod: { start: '2013-05-08T09:00' },
      contained: [{ resourceType: 'Patient', id: 'p', birthDate: '1987-02-20T00:00:00Z' }],
    });
    expect(issues.flatMap((i) => i.expression)).toEqual([
      'ServiceRequest.occurrencePeriod.start',
      'ServiceRequest.contained[0].birthDate',
    ]);
  });

  it('checks resource ids: the resource, contained ones and Bundle entries', () => {
    expect(primitiveIssues({ ...sr, id: 'bad id!' }).flatMap((i) => i.expression)).toEqual([
      'ServiceRequest.id',
    ]);
    const bundle: Bundle = {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          resource: { ...sr, contained: [{ resourceType: 'Patient', id: 'p1/../x' }] },
          request: { method: 'POST', url: 'ServiceRequest' },
        },
        {
          resource: { resourceType: 'Patient', id: 'a'.repeat(65) },
          request: { method: 'POST', url: 'Patient' },
        },
      ],
    };
    expect(primitiveIssues(bundle).flatMap((i) => i.expression)).toEqual([
      'Bundle.entry[0].resource.contained[0].id',
      'Bundle.entry[1].resource.id',
    ]);
    expect(primitiveIssues({ ...sr, id: 'di-1.2' })).toEqual([]);
  });
});
