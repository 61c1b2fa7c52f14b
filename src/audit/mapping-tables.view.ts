import type { AppConfig } from '../config/app-config';
import { siteHl7Mapping } from '../config/site-mappings';
import { FHIR_ORDER_FIELD_MAP, FHIR_ORDER_MAPPING_VERSION } from '../mappings/fhir-order.mapping';
import {
  DICOM_MODALITIES,
  FREE_TEXT_SEX,
  ORDER_CONTROL_TO_ACTION,
  TABLE_0001_SEX,
  TABLE_0027_PRIORITY,
  TABLE_0074_TO_MODALITY,
} from '../mappings/hl7-code.tables';
import {
  HL7_MERGE_FIELD_MAP,
  HL7_ORDER_MAPPING_VERSION,
  rowsFor,
} from '../mappings/hl7-order.mapping';
import { ORDER_TRANSITIONS } from '../domain/order-state';

/** One declarative table, flattened to text cells for the page and the API. */
export interface MappingTableView {
  id: string;
  title: string;
  version?: string;
  note?: string;
  columns: string[];
  rows: string[][];
}

/**
 * The mapping tables this replica applies now (defaults with the site's CONFIG_FILE
 * overrides), read from the same constants the mappers use, so the page cannot drift
 * from the code.
 */
export function activeMappingTables(config: AppConfig): MappingTableView[] {
  const hl7 = siteHl7Mapping(config);
  const sources = (s: unknown) =>
    typeof s === 'string'
      ? s
      : `${(s as { at: string }).at} (${(s as { transform: string }).transform})`;
  return [
    {
      id: 'hl7-order-fields',
      title: 'HL7 v2 order → OrderRequest',
      version: HL7_ORDER_MAPPING_VERSION,
      note: 'sources in priority order: the first one with a value wins',
      columns: ['rule id', 'target', 'sources', 'transform', 'required'],
      rows: [...rowsFor(hl7), ...HL7_MERGE_FIELD_MAP].map((r) => [
        r.ruleId,
        r.target,
        r.sources.map(sources).join(' → '),
        r.transform,
        r.required ? 'yes' : 'no',
      ]),
    },
    {
      id: 'fhir-order-fields',
      title: 'FHIR R4 ServiceRequest → OrderRequest',
      version: FHIR_ORDER_MAPPING_VERSION,
      columns: ['rule id', 'target', 'source', 'extract', 'required'],
      rows: FHIR_ORDER_FIELD_MAP.map((r) => [
        r.ruleId,
        r.target,
        r.source,
        r.extract,
        r.required ? 'yes' : 'no',
      ]),
    },
    {
      id: 'products',
      title: 'Procedure code → AI products',
      note:
        hl7.unknownProcedure.kind === 'reject'
          ? 'unknown procedure codes are rejected'
          : `unknown procedure codes run: ${hl7.unknownProcedure.products.join(', ')}`,
      columns: ['code', 'system', 'products', 'note'],
      rows: hl7.productTable.map((r) => [
        r.code,
        r.system ?? '(any)',
        r.products.join(', '),
        r.note ?? '',
      ]),
    },
    pairs('hl7-0119', 'HL7 table 0119: ORC-1 order control → action', ORDER_CONTROL_TO_ACTION),
    pairs('hl7-0001', 'HL7 table 0001: PID-8 sex', TABLE_0001_SEX),
    pairs('free-text-sex', 'Free-text sex values tolerated (quirk recorded)', FREE_TEXT_SEX),
    pairs('hl7-0027', 'HL7 table 0027: priority', TABLE_0027_PRIORITY),
    pairs('hl7-0074', 'HL7 table 0074 → DICOM modality', TABLE_0074_TO_MODALITY),
    {
      id: 'dicom-modalities',
      title: 'DICOM modalities accepted as is (PS3.3 C.7.3.1.1.1)',
      columns: ['modality'],
      rows: DICOM_MODALITIES.map((m) => [m]),
    },
    {
      id: 'order-transitions',
      title: 'Order state transitions',
      columns: ['from', 'allowed next states'],
      rows: Object.entries(ORDER_TRANSITIONS).map(([from, to]) => [
        from,
        to.length ? to.join(', ') : '(terminal)',
      ]),
    },
    {
      id: 'hl7-accession-sources',
      title: 'Site settings of the HL7 mapping',
      columns: ['setting', 'value'],
      rows: [
        ['accession sources', hl7.accessionSources.join(' → ')],
        ['sender UTC offset', hl7.senderUtcOffset],
        ['fields sent upstream', hl7.allowedFields.join(', ')],
      ],
    },
  ];
}

function pairs(
  id: string,
  title: string,
  table: Readonly<Record<string, string>>,
): MappingTableView {
  return { id, title, columns: ['code', 'maps to'], rows: Object.entries(table) };
}
