import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { OrderRequest } from '../domain/order-request';
import { mapServiceRequest } from './fhir-order.mapping';
import {
  SANDBOX_OUTCOME_ROW,
  leftOutSummary,
  MAX_METADATA_CHARS,
  toUpstreamMetadata,
  upstreamMetadataOf,
  UPSTREAM_METADATA_TABLE,
} from './upstream-metadata';

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

  it('leaves out, and names, what the upstream would refuse the whole order for', () => {
    const { metadata, leftOut } = upstreamMetadataOf({
      ...request,
      patient: { ...request.patient, birthDate: '1956-02' },
      accessionNumber: 'A'.repeat(MAX_METADATA_CHARS + 1),
    });
    expect(metadata).not.toHaveProperty('patient_birth_date');
    expect(metadata).not.toHaveProperty('accession_number');
    expect(metadata.patient_name).toBe('SCHMIDT^ANNA MARIA');
    expect(leftOut).toEqual([
      { key: 'patient_birth_date', reason: 'a partial date; the upstream takes YYYYMMDD only' },
      { key: 'accession_number', reason: '1025 characters, more than the 1024 the upstream takes' },
    ]);
    expect(leftOutSummary(leftOut)).not.toContain('AAAA');
    expect(upstreamMetadataOf(request).leftOut).toEqual([]);
  });

  it('keeps a name in its Family^Given parts: ^ = \\ and control characters inside a part become spaces', () => {
    const { metadata, changed } = upstreamMetadataOf({
      ...request,
      patient: {
        ...request.patient,
        name: { family: 'O^Brien', given: ['Mary=Ann', 'Jo\\\u0007'] },
      },
    });
    expect(metadata.patient_name).toBe('O Brien^Mary Ann Jo  ');
    expect(changed).toEqual([
      {
        key: 'patient_name',
        reason: 'a ^, =, \\ or control character within a name part became a space',
      },
    ]);
    expect(upstreamMetadataOf(request).changed).toEqual([]);
  });

  it('for add-metadata, sends null for what the order no longer states (never for products)', () => {
    const changed = toUpstreamMetadata(
      { ...request, patient: { ...request.patient, birthDate: '1956', sex: undefined } },
      { removeAbsent: true },
    );
    expect(changed).toMatchObject({ patient_birth_date: null, patient_sex: null });
    expect(changed.patient_name).toBe('SCHMIDT^ANNA MARIA');
    const none = toUpstreamMetadata({ ...request, products: [] }, { removeAbsent: true });
    expect(none).not.toHaveProperty('products');
  });
});

/**
 * Golden: the metadata that leaves for every order our fixtures produce (the HL7 goldens'
 * stored OrderRequests and the FHIR R4 examples mapped here). Regenerate with UPDATE_GOLDEN=1
 * and review the diff: a changed line is a changed upstream order.
 */
describe('upstream metadata for every fixture (golden)', () => {
  const root = join(__dirname, '..', '..', 'test', 'fixtures');
  const GOLDEN = join(root, 'upstream-metadata.golden.json');

  function fixtureRequests(): Array<[string, OrderRequest]> {
    const out: Array<[string, OrderRequest]> = [];
    const expected = join(root, 'hl7', 'expected');
    for (const file of readdirSync(expected).sort()) {
      const golden = JSON.parse(readFileSync(join(expected, file), 'utf8')) as {
        orders?: Array<{ request: OrderRequest }>;
      };
      (golden.orders ?? []).forEach((o, i) => out.push([`hl7/${file}#${i}`, o.request]));
    }
    const fhir = (name: string) =>
      JSON.parse(readFileSync(join(root, 'fhir', `${name}.json`), 'utf8')) as never;
    for (const name of ['r4-servicerequest-example-di', 'imaging-ig-servicerequest-example']) {
      const mapped = mapServiceRequest(
        fhir(name),
        {
          patient: { resource: fhir('r4-patient-example-dicom'), source: 'EHR Patient/dicom' },
          imagingStudies: [],
          reasons: new Map(),
        },
        'create',
      );
      if (mapped.request) out.push([`fhir/${name}.json`, mapped.request]);
    }
    return out;
  }

  it('matches the reviewed golden, order by order', () => {
    const actual = Object.fromEntries(
      fixtureRequests().map(([name, request]) => [
        name,
        toUpstreamMetadata(request, { sandboxOutcomeFromNotes: true }),
      ]),
    );
    expect(Object.keys(actual).length).toBeGreaterThanOrEqual(10);
    if (process.env.UPDATE_GOLDEN) writeFileSync(GOLDEN, `${JSON.stringify(actual, null, 2)}\n`);
    const golden = JSON.parse(readFileSync(GOLDEN, 'utf8')) as Record<string, unknown>;
    for (const key of Object.keys(golden))
      expect({ key, value: actual[key] }).toEqual({ key, value: golden[key] });
    expect(Object.keys(actual).sort()).toEqual(Object.keys(golden).sort());
  });

  it('names every key it can send once, each with where it comes from', () => {
    const keys = [...UPSTREAM_METADATA_TABLE, SANDBOX_OUTCOME_ROW].map((r) => r.key);
    expect(new Set(keys).size).toBe(keys.length);
    for (const row of UPSTREAM_METADATA_TABLE) expect(row.from.length).toBeGreaterThan(0);
  });
});
