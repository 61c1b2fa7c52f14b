import {
  NO_RESULT_KEYS,
  STATUS_TABLE,
  type OutboundRowKey,
  type PublishedDocument,
  type StatusRow,
} from './status-mapping.table';

/**
 * The rows the publishers work from: the one status table (DESIGN.md section 4, with its
 * local-end rows) and the site's overrides (CONFIG_FILE `mappings.status`).
 */
export type { LocalEndKey, OutboundRowKey } from './status-mapping.table';
export { localEndRow } from './status-mapping.table';

/** Per-site overrides of the outbound columns (the order state and terminality are not overridable). */
export type RowOverride = Partial<
  Pick<StatusRow, 'task' | 'report' | 'conclusion' | 'publish' | 'attach' | 'note'>
> & { hl7?: Partial<StatusRow['hl7']> };

export type StatusOverrides = Partial<Record<OutboundRowKey, RowOverride>>;

const ALL_KEYS = Object.keys(STATUS_TABLE);
const DOCUMENTS: readonly PublishedDocument[] = [
  'fhir-task',
  'fhir-diagnostic-report',
  'hl7-oru',
  'hl7-orm-status',
  'dicom-sr',
  'dicom-pdf',
];

/**
 * Reads `mappings.status` of the site config. Refuses (with every problem listed) an unknown
 * row or document, and any override that would present a no-result row as a finding.
 */
export function parseStatusOverrides(value: unknown): StatusOverrides {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new Error('mappings.status must be an object keyed by status row');
  }
  const problems: string[] = [];
  for (const [key, raw] of Object.entries(value as Record<string, unknown>)) {
    if (!ALL_KEYS.includes(key)) {
      problems.push(`mappings.status.${key}: unknown row (rows: ${ALL_KEYS.join(', ')})`);
      continue;
    }
    const o = (raw ?? {}) as RowOverride;
    for (const d of o.publish ?? []) {
      if (!DOCUMENTS.includes(d)) problems.push(`mappings.status.${key}.publish: unknown ${d}`);
    }
    if (NO_RESULT_KEYS.includes(key as OutboundRowKey)) {
      if (o.report !== undefined && o.report !== 'cancelled') {
        problems.push(`mappings.status.${key}.report: a no-result row stays cancelled`);
      }
      if (o.hl7?.resultStatus !== undefined && o.hl7.resultStatus !== 'X') {
        problems.push(`mappings.status.${key}.hl7.resultStatus: a no-result row stays X`);
      }
      if (o.publish?.some((d) => d === 'dicom-sr' || d === 'dicom-pdf')) {
        problems.push(`mappings.status.${key}.publish: no SR or PDF for a no-result row`);
      }
    }
  }
  if (problems.length > 0) throw new Error(problems.join('; '));
  return value as StatusOverrides;
}

export type OutboundRow = StatusRow & { key: OutboundRowKey };

/** A row with the site's override of it applied (nested `task` and `hl7` merged). */
export function applyOverride(
  row: StatusRow & { key: OutboundRowKey },
  overrides: StatusOverrides,
): OutboundRow {
  const o = overrides[row.key];
  if (!o) return row;
  return {
    ...row,
    ...o,
    task: { ...row.task, ...o.task },
    hl7: { ...row.hl7, ...o.hl7 },
    orderState: row.orderState,
    terminal: row.terminal,
    key: row.key,
  };
}

/**
 * Documents of a row that need the upstream's reports (results, failure or QC report): they
 * are written when those are stored (OrderEvents.documentsStored), not at the status change.
 */
export function waitsForDocuments(row: OutboundRow, doc: PublishedDocument): boolean {
  if (doc === 'fhir-task' || doc === 'hl7-orm-status') return false;
  return row.terminal && row.attach !== undefined;
}
