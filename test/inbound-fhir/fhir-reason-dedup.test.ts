import type { Client as PgClient } from 'pg';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, postFhir } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * An EHR that writes the indication twice: as reasonCode and as a reasonReference to the
 * problem-list Condition with the same code (as Epic and Cerner ServiceRequests do; the R4
 * ServiceRequest allows both). The order's reason for study holds each code once.
 */
const SNOMED = 'http://snomed.info/sct';

describe('FHIR intake: a reason given as code and as Condition is one reason', () => {
  let harness: FhirHarness | undefined;
  let db: PgClient;
  beforeAll(async () => {
    harness = await startFhirHarness();
    db = harness.db;
  });
  afterAll(() => harness?.close());

  it('reasonCode and a contained Condition of the same SNOMED code: stored once; another code is kept', async () => {
    const sr = chestCtRequest('PLC-REASON-1', {
      contained: [
        {
          resourceType: 'Condition',
          id: 'cond1',
          clinicalStatus: {
            coding: [
              {
                system: 'http://terminology.hl7.org/CodeSystem/condition-clinical',
                code: 'active',
              },
            ],
          },
          code: {
            coding: [{ system: SNOMED, code: '254637007', display: 'Non-small cell lung cancer' }],
            text: 'Non-small cell lung cancer',
          },
          subject: { reference: 'Patient/dicom' },
        },
      ],
      reasonCode: [
        { coding: [{ system: SNOMED, code: '254637007', display: 'Non-small cell lung cancer' }] },
        { coding: [{ system: SNOMED, code: '49727002', display: 'Cough' }] },
      ],
      reasonReference: [{ reference: '#cond1' }],
    });
    const made = await postFhir(harness!.adapter, '/fhir/ServiceRequest', sr);
    expect(made.status).toBe(201);
    const { rows } = await db.query<{ reasons: Array<{ code?: string; system?: string }> }>(
      `SELECT request->'reasonForStudy' AS reasons FROM orders WHERE placer_order_number = 'PLC-REASON-1'`,
    );
    // was three: 254637007 twice
    expect(rows[0]!.reasons.map((r) => `${r.system}|${r.code}`)).toEqual([
      `${SNOMED}|254637007`,
      `${SNOMED}|49727002`,
    ]);
  });
});
