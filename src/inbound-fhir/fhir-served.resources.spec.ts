import { reportIdentifier } from '../mappings/fhir-result.mapping';
import type { OrderForTask } from '../persistence/fhir-resource.repository';
import { validateFhirResource } from '../fhir/fhir-validator';
import { buildTask } from './fhir-served.resources';

const order = (over: Partial<OrderForTask>): OrderForTask => ({
  orderId: '0195f0a2-7b1c-7000-8000-000000000001',
  state: 'processing',
  upstreamStatus: 'ANALYSIS_RUNNING',
  version: 3,
  createdAt: new Date('2026-11-25T01:00:00Z'),
  updatedAt: new Date('2026-11-25T02:00:00Z'),
  request: {
    source: 'fhir',
    action: 'create',
    patient: { identifiers: [{ value: 'MINT1234' }] },
    products: ['lung-nodule-ct'],
  },
  serviceRequestId: 'sr-1',
  sender: 'fhir-client',
  ...over,
});

describe('the local Task (GET /fhir/Task/{id})', () => {
  it('a delivered order carries output → its DiagnosticReport, as the README promises', () => {
    const task = buildTask(order({ state: 'delivered', upstreamStatus: 'DELIVERED' }));
    expect(task.status).toBe('completed');
    expect(task.output).toEqual([
      {
        type: { text: 'DiagnosticReport' },
        valueReference: {
          type: 'DiagnosticReport',
          identifier: reportIdentifier('0195f0a2-7b1c-7000-8000-000000000001'),
        },
      },
    ]);
  });

  it('an order without a result has no output', () => {
    expect(buildTask(order({})).output).toBeUndefined();
    expect(buildTask(order({ state: 'failed', upstreamStatus: 'FAILED' })).output).toBeUndefined();
  });

  it('is valid R4 whatever the order held: an HL7 namespace id as the patient system', () => {
    const task = buildTask(
      order({
        request: {
          source: 'hl7v2',
          action: 'create',
          patient: { identifiers: [{ value: 'PAT-4711', system: 'HOSP A' }] },
          products: ['lung-nodule-ct'],
        },
      }),
    );
    expect(validateFhirResource(task)).toEqual([]);
    expect(task.for).toEqual({ identifier: { value: 'PAT-4711', system: 'HOSP%20A' } });
  });
});
