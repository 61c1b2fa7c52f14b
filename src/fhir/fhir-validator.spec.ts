import type { Bundle, ServiceRequest } from '@medplum/fhirtypes';
import { validateFhirResource } from './fhir-validator';

const sr: ServiceRequest = {
  resourceType: 'ServiceRequest',
  status: 'active',
  intent: 'order',
  subject: { reference: 'Patient/1' },
};

describe('R4 validation (StructureDefinitions + the required bindings we rely on)', () => {
  it('accepts a minimal valid ServiceRequest', () => {
    expect(validateFhirResource(sr)).toEqual([]);
  });

  it('reports structure errors and bad codes with FHIRPath expressions', () => {
    const issues = validateFhirResource({
      ...sr,
      intent: undefined,
      status: 'ordered',
      priority: 'soon',
      foo: 1,
    } as unknown as ServiceRequest);
    expect(issues.flatMap((i) => i.expression)).toEqual(
      expect.arrayContaining([
        'ServiceRequest.intent',
        'ServiceRequest.foo',
        'ServiceRequest.status',
        'ServiceRequest.priority',
      ]),
    );
  });

  it('checks Bundle entries too, with their paths', () => {
    const bundle: Bundle = {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          resource: { ...sr, status: 'ordered', intent: undefined } as unknown as ServiceRequest,
          request: { method: 'POST', url: 'ServiceRequest' },
        },
        {
          resource: { resourceType: 'Patient', gender: 'M' } as never,
          request: { method: 'POST', url: 'Patient' },
        },
      ],
    };
    const expressions = validateFhirResource(bundle).flatMap((i) => i.expression);
    expect(expressions).toEqual(
      expect.arrayContaining([
        'Bundle.entry[0].resource.status',
        'Bundle.entry[0].resource.intent',
        'Bundle.entry[1].resource.gender',
      ]),
    );
  });
});
