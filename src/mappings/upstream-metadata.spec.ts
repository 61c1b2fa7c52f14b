import type { OrderRequest } from '../domain/order-request';
import { toUpstreamMetadata } from './upstream-metadata';

const request: OrderRequest = {
  source: 'hl7v2',
  action: 'create',
  patient: {
    identifiers: [
      { value: '998877665', system: 'SSA', type: 'SS' },
      { value: 'PAT-4711', system: 'HOSPA', type: 'MR' },
    ],
    name: { family: 'SCHMIDT', given: ['ANNA', 'MARIA'] },
    birthDate: '1956-02-14',
    sex: 'female',
  },
  accessionNumber: 'ACC-20240318-0042',
  studyInstanceUid: '1.2.276.0.7230010.3.1.2.2831176988.12345.1710769337.1',
  modality: 'MR',
  procedure: { code: 'MRKOPF', display: 'MRT Kopf' },
  priority: 'stat',
  orderingProvider: { name: { family: 'WELBY', given: ['MARCUS'] } },
  products: ['neuro-volumetry'],
  notes: ['Bitte KI-Auswertung', 'sandbox-outcome: qc_failed'],
};

describe('our order → upstream metadata (docs/upstream-assumptions.md keys)', () => {
  it('maps patient, study and order fields to the agreed keys and formats', () => {
    expect(toUpstreamMetadata(request)).toEqual({
      patient_id: 'PAT-4711',
      patient_name: 'SCHMIDT^ANNA MARIA',
      patient_birth_date: '19560214',
      patient_sex: 'F',
      accession_number: 'ACC-20240318-0042',
      study_uid: '1.2.276.0.7230010.3.1.2.2831176988.12345.1710769337.1',
      modality: 'MR',
      procedure_code: 'MRKOPF',
      priority: 'stat',
      referring_physician: 'WELBY^MARCUS',
      products: ['neuro-volumetry'],
    });
  });

  it('sends the sandbox outcome only when told to, and only a known one', () => {
    expect(toUpstreamMetadata(request, { sandboxOutcomeFromNotes: true }).sandbox_outcome).toBe(
      'qc_failed',
    );
    expect(
      toUpstreamMetadata(
        { ...request, notes: ['sandbox-outcome: explode'] },
        { sandboxOutcomeFromNotes: true },
      ).sandbox_outcome,
    ).toBeUndefined();
  });

  it('leaves out what is not known (never empty strings)', () => {
    const minimal = toUpstreamMetadata({
      source: 'fhir',
      action: 'create',
      patient: { identifiers: [] },
      products: [],
    });
    expect(minimal).toEqual({});
  });
});
