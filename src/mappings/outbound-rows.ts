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
 * The codes each overridable column may hold: FHIR R4 task-status and
 * diagnostic-report-status (the subsets the table uses), HL7 v2.5.1 tables 0119 (ORC-1), 0038
 * (ORC-5), 0123 (OBR-25) and 0085 (OBX-11). A value outside was written as it stood: a Task
 * `done` refused by the EHR on every status change, an ORC-5 of free text.
 */
const CODES = {
  'task.status': [
    'received',
    'accepted',
    'in-progress',
    'on-hold',
    'completed',
    'failed',
    'cancelled',
  ],
  report: ['registered', 'final', 'corrected', 'cancelled'],
  'hl7.orderControl': ['OK', 'SC', 'RE', 'OC', 'CR'],
  'hl7.orderStatus': ['SC', 'IP', 'HD', 'CM', 'CA'],
  'hl7.resultStatus': ['O', 'S', 'I', 'F', 'X'],
  'hl7.observationStatus': ['F', 'X'],
} as const satisfies Record<string, readonly string[]>;

/**
 * What only a result says (DELIVERED, the one row with findings): a final or corrected
 * DiagnosticReport, OBR-25 / OBX-11 F, ORC-5 CM, a Task completed, an SR or PDF. On a row still
 * in progress (QC_FAILED awaiting a decision, IN_REVIEW …) it would present no finding as one.
 */
function resultLike(o: RowOverride): string[] {
  const found: string[] = [];
  if (o.report === 'final' || o.report === 'corrected') found.push(`report ${o.report}`);
  if (o.hl7?.resultStatus === 'F') found.push('hl7.resultStatus F');
  if (o.hl7?.observationStatus === 'F') found.push('hl7.observationStatus F');
  if (o.hl7?.orderStatus === 'CM') found.push('hl7.orderStatus CM');
  if (o.task?.status === 'completed') found.push('task.status completed');
  for (const d of o.publish ?? []) if (d === 'dicom-sr' || d === 'dicom-pdf') found.push(d);
  return found;
}

function codeProblems(key: string, o: RowOverride): string[] {
  const values: Record<keyof typeof CODES, unknown> = {
    'task.status': o.task?.status,
    report: o.report,
    'hl7.orderControl': o.hl7?.orderControl,
    'hl7.orderStatus': o.hl7?.orderStatus,
    'hl7.resultStatus': o.hl7?.resultStatus,
    'hl7.observationStatus': o.hl7?.observationStatus,
  };
  return (Object.keys(CODES) as Array<keyof typeof CODES>)
    .filter((c) => values[c] !== undefined && !(CODES[c] as readonly unknown[]).includes(values[c]))
    .map(
      (c) =>
        `mappings.status.${key}.${c}: ${JSON.stringify(values[c])} is not one of ${CODES[c].join(', ')}`,
    );
}

/**
 * Reads `mappings.status` of the site config. Refuses (with every problem listed) an unknown
 * row or document, a value outside its code table, and any override that would present a
 * row without findings (no-result or still in progress) as a finding.
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
    problems.push(...codeProblems(key, o));
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
    // Before, only the no-result rows' report, OBR-25 and SR/PDF were checked: OBX-11 F, ORC-5
    // CM or a Task completed on a failure, or a final DiagnosticReport for a QC rejection still
    // awaiting a decision, went out as configured.
    const claims = key === 'DELIVERED' ? [] : resultLike(o);
    if (claims.length > 0) {
      problems.push(
        `mappings.status.${key}: ${claims.join(', ')} would present it as a result (only DELIVERED is one)`,
      );
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
