import type { Bundle, ServiceRequest } from '@medplum/fhirtypes';
import { containedIssues, validateFhirResource } from './fhir-validator';

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

  it('refuses an empty string on its element (R4 json.html: a property is absent or has content); it was served back as sent', () => {
    const issues = validateFhirResource({
      ...sr,
      identifier: [{ system: 'urn:oid:1.2.3', value: '' }],
      code: { text: '' },
      contained: [{ resourceType: 'Patient', id: 'p', name: [{ family: '' }] }],
      subject: { reference: '#p' },
    } as ServiceRequest);
    expect(issues.flatMap((i) => i.expression).sort()).toEqual([
      'ServiceRequest.code.text',
      'ServiceRequest.contained[0].name[0].family',
      'ServiceRequest.identifier[0].value',
    ]);
    expect(issues.every((i) => i.code === 'value')).toBe(true);
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

  it('names a choice element by the key the body wrote, not its definition (occurrence[x])', () => {
    const wrongType = (changes: Record<string, unknown>) =>
      validateFhirResource({ ...sr, ...changes } as unknown as ServiceRequest).flatMap(
        (i) => i.expression,
      );
    // Before: ServiceRequest.occurrence[x], ….extension[0].value[x], ServiceRequest.quantity[x].value.
    expect(wrongType({ occurrenceDateTime: 20130508 })).toEqual([
      'ServiceRequest.occurrenceDateTime',
    ]);
    expect(wrongType({ extension: [{ url: 'http://example.org/x', valueString: 5 }] })).toEqual([
      'ServiceRequest.extension[0].valueString',
    ]);
    expect(wrongType({ quantityQuantity: { value: '1' } })).toEqual([
      'ServiceRequest.quantityQuantity.value',
    ]);
    const bundle = {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        {
          resource: { ...sr, asNeededBoolean: 'yes' },
          request: { method: 'POST', url: 'ServiceRequest' },
        },
      ],
    } as unknown as Bundle;
    expect(validateFhirResource(bundle).flatMap((i) => i.expression)).toEqual([
      'Bundle.entry[0].resource.asNeededBoolean',
    ]);
  });

  it('refuses a choice element given in two types (R4 formats.html#choice), wherever it is', () => {
    // Before: valid; the order's requestedAt was occurrenceDateTime, the period ignored.
    const both = validateFhirResource({
      ...sr,
      occurrenceDateTime: '2026-11-27T08:00:00Z',
      occurrencePeriod: { start: '2026-11-28T08:00:00Z' },
    });
    expect(both.map((i) => [i.code, i.expression])).toEqual([
      ['structure', ['ServiceRequest.occurrencePeriod']],
    ]);
    expect(both[0]!.diagnostics).toMatch(/occurrenceDateTime and occurrencePeriod/);
    const inExtension = validateFhirResource({
      ...sr,
      extension: [{ url: 'http://example.org/x', valueString: 'a', valueCode: 'b' }],
    } as ServiceRequest);
    expect(inExtension.flatMap((i) => i.expression)).toEqual([
      'ServiceRequest.extension[0].valueCode',
    ]);
  });
});

describe('containedIssues (R4 dom-3)', () => {
  it('names a contained resource referenced from nowhere, and accepts one referenced from another contained resource', () => {
    const device = { resourceType: 'Device', id: 'ai-device' } as const;
    expect(
      containedIssues({
        resourceType: 'DiagnosticReport',
        status: 'cancelled',
        code: { text: 'x' },
        contained: [device],
      } as never),
    ).toEqual([
      expect.objectContaining({
        code: 'invariant',
        expression: ['DiagnosticReport.contained[0]'],
      }),
    ]);
    expect(
      containedIssues({
        resourceType: 'DiagnosticReport',
        status: 'final',
        code: { text: 'x' },
        contained: [
          device,
          {
            resourceType: 'Observation',
            id: 'm1',
            status: 'final',
            code: { text: 'v' },
            device: { reference: '#ai-device' },
          },
        ],
        result: [{ reference: '#m1' }],
      } as never),
    ).toEqual([]);
  });
});

describe('containedIssues (R4 ref-1)', () => {
  it('names a local reference (#id) that no contained resource answers', () => {
    expect(
      containedIssues({
        resourceType: 'DiagnosticReport',
        status: 'cancelled',
        code: { text: 'x' },
        subject: { reference: '#pat1' },
      } as never),
    ).toEqual([
      expect.objectContaining({
        code: 'invariant',
        expression: ['DiagnosticReport'],
        diagnostics: expect.stringContaining('#pat1'),
      }),
    ]);
  });

  describe('a string where R4 defines an object', () => {
    const withName = (name: string) =>
      ({
        ...sr,
        subject: { reference: '#p' },
        contained: [{ resourceType: 'Patient', id: 'p', name }],
      }) as unknown as ServiceRequest;
    const named = `ServiceRequest.contained[0].name is a string where FHIR R4 defines an object (a complex type or a resource)`;

    it('is one issue at its element, not one per character', () => {
      const issues = validateFhirResource(withName('Müller^Hans'));
      expect(issues.map((i) => i.diagnostics ?? i.details?.text)).toEqual([named]);
      expect(issues[0]!.expression).toEqual(['ServiceRequest.contained[0].name']);
    });

    it('of 5 million characters is named in well under the seconds it took character by character', () => {
      const started = Date.now();
      const issues = validateFhirResource(withName('x'.repeat(5_000_000)));
      expect(Date.now() - started).toBeLessThan(2_000);
      expect(issues.map((i) => i.diagnostics)).toEqual([named]);
    });

    it('is found in a choice element, a primitive extension and a Bundle entry; primitives are left to the validator', () => {
      const at = (resource: unknown) =>
        validateFhirResource(resource as ServiceRequest).map((i) => i.expression?.[0]);
      expect(
        at({ ...sr, extension: [{ url: 'urn:x', valueQuantity: '5 mg' }], _status: 'final' }),
      ).toEqual(['ServiceRequest.extension[0].valueQuantity', 'ServiceRequest._status']);
      expect(
        at({
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [
            {
              resource: { ...sr, code: 'CT Thorax' },
              request: { method: 'POST', url: 'ServiceRequest' },
            },
          ],
        }),
      ).toEqual(['Bundle.entry[0].resource.code']);
      expect(
        at({
          ...sr,
          extension: [{ url: 'urn:x', valueString: 'fine' }],
          patientInstruction: 'fine',
        }),
      ).toEqual([]);
    });

    it('in 3,000 identifiers: the first 99 named and one line counting the rest', () => {
      const issues = validateFhirResource({
        ...sr,
        identifier: Array.from({ length: 3_000 }, (_, i) => `ACC${i}`),
      } as unknown as ServiceRequest);
      expect(issues).toHaveLength(100);
      expect(issues[98]!.expression).toEqual(['ServiceRequest.identifier[98]']);
      expect(issues[99]).toEqual({
        severity: 'information',
        code: 'informational',
        diagnostics: '2901 more issues are not listed (an answer lists at most 100)',
      });
    });
  });
});
