import type { AppConfig } from '../config/app-config';
import { siteHl7Mapping } from '../config/site-mappings';
import { FHIR_ORDER_FIELD_MAP, FHIR_ORDER_MAPPING_VERSION } from '../mappings/fhir-order.mapping';
import {
  DICOM_MODALITIES,
  FREE_TEXT_PRIORITY,
  FREE_TEXT_SEX,
  ORDER_CONTROL_TO_ACTION,
  STATUS_CHANGE_TO_ACTION,
  TABLE_0001_SEX,
  TABLE_0027_PRIORITY,
  TABLE_0074_TO_MODALITY,
} from '../mappings/hl7-code.tables';
import {
  HL7_MERGE_FIELD_MAP,
  HL7_ORDER_MAPPING_VERSION,
  rowsFor,
} from '../mappings/hl7-order.mapping';
import type { Hl7SourceSpec } from '../mappings/hl7-order.rows';
import { ORDER_TRANSITIONS } from '../domain/order-state';
import { CODING_SYSTEM_SYNONYMS } from '../mappings/product-table';
import { applyOverride, parseStatusOverrides } from '../mappings/outbound-rows';
import {
  type OutboundRowKey,
  STATUS_MAPPING_VERSION,
  STATUS_TABLE,
  type StatusRow,
} from '../mappings/status-mapping.table';

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
  const sources = (s: Hl7SourceSpec) =>
    typeof s === 'string'
      ? s
      : `${s.at}${s.transform ? ` (${s.transform})` : ''}${s.fallbackOnly ? ' (fallback only)' : ''}${s.forActions ? ` (${s.forActions.join(', ')} only)` : ''}`;
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
    outboundStatusTable(config),
    pairs(
      'coding-system-synonyms',
      'Coding system names matched as the table 0396 name a product table row uses',
      CODING_SYSTEM_SYNONYMS,
    ),
    pairs('hl7-0119', 'HL7 table 0119: ORC-1 order control → action', ORDER_CONTROL_TO_ACTION),
    pairs(
      'hl7-sc-0038',
      'ORC-1 SC with ORC-5 (table 0038) that ends the order → action',
      STATUS_CHANGE_TO_ACTION,
    ),
    pairs('hl7-0001', 'HL7 table 0001: PID-8 sex', TABLE_0001_SEX),
    pairs('free-text-sex', 'Free-text sex values tolerated (quirk recorded)', FREE_TEXT_SEX),
    pairs('hl7-0027', 'HL7 table 0027: priority', TABLE_0027_PRIORITY),
    pairs(
      'free-text-priority',
      'Free-text priority words tolerated (quirk recorded)',
      FREE_TEXT_PRIORITY,
    ),
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
        ['sender time zone', hl7.senderTimeZone ?? 'not set (MSH-7 offset, else the UTC offset)'],
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

/**
 * The outbound status table (status-mapping.table.ts, DESIGN.md section 4) with the site's
 * `mappings.status` overrides: per upstream status, and for the two local ends (an order that
 * ended here without an upstream status), what the order becomes and what each destination
 * is told.
 */
function outboundStatusTable(config: AppConfig): MappingTableView {
  const mappings = (config.site.mappings ?? {}) as Record<string, unknown>;
  const overrides = parseStatusOverrides(mappings.status);
  const keys = Object.keys(STATUS_TABLE) as OutboundRowKey[];
  return {
    id: 'outbound-status',
    title: 'Upstream status → order state, FHIR Task / DiagnosticReport, HL7 ORC / OBR / OBX',
    version: STATUS_MAPPING_VERSION,
    note: 'ENDED_LOCALLY_* rows: the order ended here without an upstream status (no study, refused upstream, cancelled before placing). CANCELLED and ENDED_LOCALLY_CANCELLED are sent as ORC-1 CR when the orderer asked for the cancel. OBX-11 follows OBR-25 unless the row names it (I, results pending, on an ORU a site adds to a status in progress).',
    columns: [
      'row',
      'order state',
      'Task.status (reason)',
      'DiagnosticReport',
      'ORC-1 / ORC-5',
      'OBR-25 / OBX-11',
      'published',
      'attached',
      'note',
    ],
    rows: keys.map((key) => {
      const row: StatusRow = applyOverride({ ...STATUS_TABLE[key], key }, overrides);
      return [
        key,
        `${row.orderState}${row.terminal ? ' (final)' : ''}`,
        row.task.reason ? `${row.task.status} (${row.task.reason})` : row.task.status,
        row.report ?? '–',
        `${row.hl7.orderControl} / ${row.hl7.orderStatus}`,
        `${row.hl7.resultStatus} / ${row.hl7.observationStatus ?? '–'}`,
        row.publish.join(', '),
        row.attach ?? '–',
        row.note,
      ];
    }),
  };
}
