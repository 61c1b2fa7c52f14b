import type { Client as PgClient } from 'pg';
import { loadOrder } from '../../src/orders/order-transitions';
import { studyRequestOf } from '../../src/orders/study-request';
import { createMrBrainStudy } from '../helpers/dicom-factory';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, postFhir, type Json } from '../helpers/fhir-fixtures';
import { stowToAdapter } from '../studies/study-test-support';

jest.setTimeout(120_000);

/**
 * The accession number of a ServiceRequest as real senders type it: Epic writes the type as
 * text alone (`{"text": "Accession Number"}`, no coding), IHE/DICOM-based profiles code it
 * with DICOM's 121022 "Accession Number" (system DCM), beside the v2-0203 ACSN of the HL7
 * Imaging ServiceRequest IG. Each is the order's accession: the study pushed under it is the
 * order's, and the identifier is not taken for the placer number. Another text is no type.
 */
const PLAC = {
  type: {
    coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'PLAC' }],
    text: 'Placer Identifier',
  },
};

function requestWith(placer: string, accession: Json): Json {
  return chestCtRequest(placer, {
    identifier: [
      {
        use: 'usual',
        ...PLAC,
        system: 'urn:oid:1.2.840.114350.1.13.0.1.7.2.798268',
        value: placer,
      },
      accession,
    ],
  });
}

describe('FHIR intake: the accession typed by text or by the DICOM code', () => {
  let harness: FhirHarness | undefined;
  let db: PgClient;
  beforeAll(async () => {
    harness = await startFhirHarness({ STUDY_QUIET_PERIOD_SECONDS: '1' });
    db = harness.db;
  });
  afterAll(() => harness?.close());

  const orderOf = async (placer: string) =>
    (
      await db.query<{ id: string; accession_number: string | null }>(
        `SELECT id, accession_number FROM orders WHERE placer_order_number = $1`,
        [placer],
      )
    ).rows;

  it.each([
    [
      'Epic: type.text "Accession Number", no coding',
      'ACC-TXT-1',
      {
        use: 'usual',
        type: { text: 'Accession Number' },
        system: 'urn:oid:1.2.840.114350.1.13.0.1.7.2.836982',
        value: 'ACC-TXT-1',
      },
    ],
    [
      'DICOM: type coded DCM 121022',
      'ACC-DCM-1',
      {
        type: {
          coding: [
            {
              system: 'http://dicom.nema.org/resources/ontology/DCM',
              code: '121022',
              display: 'Accession Number',
            },
          ],
        },
        system: 'urn:oid:2.16.840.1.113883.3.999.2.1',
        value: 'ACC-DCM-1',
      },
    ],
  ])(
    '%s: the order’s accession, and the study pushed under it is the order’s',
    async (_, accession, id) => {
      const placer = `PLC-${accession}`;
      const made = await postFhir(
        harness!.adapter,
        '/fhir/ServiceRequest',
        requestWith(placer, id),
      );
      expect(made.status).toBe(201);
      const [order] = await orderOf(placer);
      // was null: the identifier was no accession (the text one was no type at all)
      expect(order?.accession_number).toBe(accession);
      const loaded = (await loadOrder(harness!.adapter.dataSource.manager, order!.id))!;
      expect(studyRequestOf(loaded)).toMatchObject({ accessionNumber: accession });
      // the modality's study, pushed under that accession, is matched to this order
      const study = createMrBrainStudy({
        study: { accessionNumber: accession },
        series: [{ slices: 1 }],
      });
      expect((await stowToAdapter(harness!.adapter.httpUrl, study)).status).toBe(200);
      const held = await db.query<{ order_id: string | null }>(
        `SELECT DISTINCT order_id FROM study_instances WHERE accession_number = $1`,
        [accession],
      );
      expect(held.rows).toEqual([{ order_id: order!.id }]);
    },
  );

  it('a text-typed accession with no placer identifier beside it is not the placer number', async () => {
    const sr = chestCtRequest('unused', {
      identifier: [
        {
          type: { text: 'Accession Number' },
          system: 'urn:oid:1.2.840.114350.1.13.0.1.7.2.836982',
          value: 'ACC-TXT-2',
        },
      ],
    });
    expect((await postFhir(harness!.adapter, '/fhir/ServiceRequest', sr)).status).toBe(201);
    const rows = await db.query<{
      placer_order_number: string | null;
      accession_number: string | null;
    }>(
      `SELECT placer_order_number, accession_number FROM orders WHERE request->>'accessionNumber' = 'ACC-TXT-2'`,
    );
    // was placer ACC-TXT-2 and no accession: the untyped-looking identifier stood in for PLAC
    expect(rows.rows).toEqual([{ placer_order_number: null, accession_number: 'ACC-TXT-2' }]);
  });

  it('any other text stays no type: not an accession', async () => {
    const sr = requestWith('PLC-TXT-OTHER', {
      type: { text: 'Accession or visit' },
      system: 'urn:oid:1.2.840.114350.1.13.0.1.7.2.836982',
      value: 'NOT-ACC-1',
    });
    expect((await postFhir(harness!.adapter, '/fhir/ServiceRequest', sr)).status).toBe(201);
    expect((await orderOf('PLC-TXT-OTHER'))[0]?.accession_number).toBeNull();
  });
});
