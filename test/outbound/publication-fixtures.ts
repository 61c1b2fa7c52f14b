import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { localEndRow, type OutboundRow } from '../../src/mappings/outbound-rows';
import {
  dicomUidsFor,
  uidFromSeed,
  type PublicationInput,
} from '../../src/mappings/publication.model';
import { parseResultContent } from '../../src/mappings/result-content.mapping';
import { STATUS_TABLE, type StatusRowKey } from '../../src/mappings/status-mapping.table';
import type { SourceStudy } from '../../src/outbound/dicom-result.builder';

const DIR = join(__dirname, '..', 'fixtures', 'outbound');
export const RESULTS_JSON = readFileSync(join(DIR, 'results-volumetry.json'));
export const REPORT_PDF = readFileSync(join(DIR, 'report-odd-length.pdf'));
export const ORDER_ID = '0b7f3c52-4a51-4e8e-9c63-5d3f1e2a7a10';
export const STUDY_UID = '1.2.826.0.1.3680043.8.498.12345678901234567890';

export function rowOf(
  key: StatusRowKey | 'ENDED_LOCALLY_FAILED' | 'ENDED_LOCALLY_CANCELLED',
): OutboundRow {
  if (key === 'ENDED_LOCALLY_FAILED') return localEndRow('failed');
  if (key === 'ENDED_LOCALLY_CANCELLED') return localEndRow('cancelled');
  return { ...STATUS_TABLE[key], key };
}

/** A publication modelled on an HL7-placed brain MR volumetry order (names with an apostrophe and an umlaut). */
export function publicationInput(
  key: Parameters<typeof rowOf>[0],
  extra: Partial<PublicationInput> = {},
): PublicationInput {
  const row = rowOf(key);
  const isResult = row.report === 'final';
  return {
    orderId: ORDER_ID,
    row,
    upstreamStatus: key.startsWith('QC_FAILED')
      ? 'QC_FAILED'
      : key.startsWith('ENDED')
        ? null
        : key,
    statusAt: '2026-11-21T08:45:12.000Z',
    correction: false,
    order: {
      source: 'hl7v2',
      request: {
        source: 'hl7v2',
        action: 'create',
        patient: {
          identifiers: [{ value: 'PID-12345', system: 'HOSP', type: 'MR' }],
          name: { family: "O'Brien-Müller", given: ['Siobhan', 'Ann'] },
          birthDate: '1961-04-09',
          sex: 'female',
        },
        placerOrderNumber: { value: 'PL-778899', system: 'RIS' },
        fillerOrderNumber: { value: 'FL-445566', system: 'RIS' },
        accessionNumber: 'ACC-2026-0042',
        procedure: { code: '24590-2', system: 'LN', display: 'MR Brain' },
        modality: 'MR',
        studyInstanceUid: STUDY_UID,
        products: ['brain-mr-volumetry'],
        requestedAt: '2026-11-21T07:30:00.000Z',
      },
      accessionNumber: 'ACC-2026-0042',
      placerOrderNumber: 'PL-778899',
      fillerOrderNumber: 'FL-445566',
      studyInstanceUid: STUDY_UID,
      createdAt: '2026-11-21T07:31:02.000Z',
    },
    ...(isResult ? { results: parseResultContent(RESULTS_JSON), pdf: REPORT_PDF } : {}),
    device: {
      name: 'brain-mr-volumetry',
      manufacturer: 'Imaging Analysis Service',
      version: '3.2.1',
      udi: '(01)00850012345678(10)3.2.1',
      uid: uidFromSeed('device:brain-mr-volumetry'),
    },
    dicom: dicomUidsFor(ORDER_ID, 0, STUDY_UID),
    ...extra,
  };
}

export function sourceStudy(instances = 3): SourceStudy {
  const series = uidFromSeed('fixture-series');
  return {
    attributes: {
      studyInstanceUid: STUDY_UID,
      accessionNumber: 'ACC-2026-0042',
      patientId: 'PID-12345',
      patientName: "O'Brien-Müller^Siobhan^Ann",
      patientBirthDate: '19610409',
      patientSex: 'F',
      studyDate: '20261121',
      studyTime: '072900',
      studyId: 'S42',
      studyDescription: 'MR Brain',
      referringPhysicianName: 'Meier^Hans',
      modalities: ['MR'],
    },
    instances: Array.from({ length: instances }, (_, i) => ({
      sopClassUid: '1.2.840.10008.5.1.4.1.1.4',
      sopInstanceUid: uidFromSeed(`fixture-instance-${i}`),
      seriesInstanceUid: series,
    })),
  };
}
