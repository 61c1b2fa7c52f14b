import type { UpstreamStatus } from '../imaging-spec/imaging-spec';
import type { OrderState } from '../domain/order-state';

/**
 * The clinical core (DESIGN.md section 4): per upstream status, what our order becomes and
 * what each destination is told. A QC rejection or a failure is never presented as a
 * finding: it ends as Task failed/cancelled, DiagnosticReport `cancelled`, ORC-5 `CA` and
 * OBR-25 / OBX-11 `X`, with the reason and the QC or failure report attached.
 *
 * Code systems:
 * - FHIR R4 Task.status (http://hl7.org/fhir/task-status), DiagnosticReport.status
 *   (http://hl7.org/fhir/diagnostic-report-status);
 * - HL7 v2.5.1 table 0119 (ORC-1 order control), 0038 (ORC-5 order status), 0123 (OBR-25
 *   result status), 0085 (OBX-11 observation result status).
 */

/** QC_FAILED is two rows: a human may still bypass it, or the verdict is final. */
export type StatusRowKey =
  Exclude<UpstreamStatus, 'QC_FAILED'> | 'QC_FAILED_BYPASSABLE' | 'QC_FAILED_FINAL';

/**
 * Two rows for an order that ended here without an upstream status (study never arrived,
 * refused upstream, cancelled before placing). They are no-result outcomes too: Task
 * failed/cancelled, DiagnosticReport `cancelled`, ORC OC/CA, OBR-25 / OBX-11 `X`, with the
 * reason.
 */
export type LocalEndKey = 'ENDED_LOCALLY_FAILED' | 'ENDED_LOCALLY_CANCELLED';

/** Every row of the one table: upstream statuses and local ends. */
export type OutboundRowKey = StatusRowKey | LocalEndKey;

export type FhirTaskStatus =
  'received' | 'accepted' | 'in-progress' | 'on-hold' | 'completed' | 'failed' | 'cancelled';

export type FhirReportStatus = 'registered' | 'final' | 'corrected' | 'cancelled';

/** Documents a status change publishes. */
export type PublishedDocument =
  | 'fhir-task' // Task update (every change)
  | 'fhir-diagnostic-report' // DiagnosticReport (terminal states; cancelled for no-result outcomes)
  | 'hl7-oru' // ORU^R01 to the RIS
  | 'hl7-orm-status' // ORM^O01 ORC-1 SC status message (intermediate; per site)
  | 'dicom-sr' // TID 1500 SR to the PACS (results only)
  | 'dicom-pdf'; // encapsulated PDF to the PACS (results only)

/** What is attached to a no-result outcome so the clinician sees why. */
export type Attachment = 'qc-report' | 'failure-report' | 'results';

export interface StatusRow {
  /** Our order's state once this status is seen. */
  orderState: OrderState;
  terminal: boolean;
  task: { status: FhirTaskStatus; reason?: string };
  /** Status of the DiagnosticReport, when one is published for this row. */
  report?: FhirReportStatus;
  /** Conclusion text of a no-result report (the reason is appended). */
  conclusion?: string;
  hl7: {
    /** ORC-1 (table 0119) of the ORU / status message. */
    orderControl: 'OK' | 'SC' | 'RE' | 'OC' | 'CR';
    /** ORC-5 (table 0038). */
    orderStatus: 'SC' | 'IP' | 'HD' | 'CM' | 'CA';
    /** OBR-25 (table 0123). */
    resultStatus: 'O' | 'S' | 'I' | 'F' | 'X';
    /** OBX-11 (table 0085), for the OBX lines sent. */
    observationStatus?: 'F' | 'X';
  };
  publish: readonly PublishedDocument[];
  attach?: Attachment;
  note: string;
}

const INTERMEDIATE: readonly PublishedDocument[] = ['fhir-task', 'hl7-orm-status'];
const NO_RESULT: readonly PublishedDocument[] = ['fhir-task', 'fhir-diagnostic-report', 'hl7-oru'];

export const STATUS_MAPPING_VERSION = 'status-mapping/1.0.0';

/** Still with the upstream: not final; the Task and the RIS worklist follow its progress. */
const PROCESSING = { orderState: 'processing', terminal: false } as const;

/** Worked on upstream (QC, preprocessing, analysis): Task in-progress, ORC-5 IP, OBR-25 I. */
const IN_PROGRESS = {
  ...PROCESSING,
  task: { status: 'in-progress' },
  hl7: { orderControl: 'SC', orderStatus: 'IP', resultStatus: 'I' },
  publish: INTERMEDIATE,
} as const;

/**
 * Not yet worked on upstream (received, queued, pending): the Task received or accepted,
 * ORC-1/ORC-5 SC/SC; status messages only.
 */
function waiting(task: 'received' | 'accepted', hl7: { resultStatus: 'O' | 'S' }, note: string) {
  return {
    ...PROCESSING,
    task: { status: task },
    hl7: { orderControl: 'SC', orderStatus: 'SC', resultStatus: hl7.resultStatus },
    publish: INTERMEDIATE,
    note,
  } as const;
}

/** What HL7 says of every no-result end: ORC-1 OC, ORC-5 CA, OBR-25 and OBX-11 X. */
const NO_RESULT_HL7 = {
  orderControl: 'OC',
  orderStatus: 'CA',
  resultStatus: 'X',
  observationStatus: 'X',
} as const;

/**
 * An end without a result, never presented as a finding: the Task failed or cancelled with the
 * reason, the DiagnosticReport cancelled with the conclusion, HL7 as NO_RESULT_HL7, no SR or PDF.
 */
function noResult<S extends 'failed' | 'cancelled'>(state: S, reason: string, conclusion: string) {
  return {
    orderState: state,
    terminal: true,
    task: { status: state, reason },
    report: 'cancelled',
    conclusion,
    hl7: NO_RESULT_HL7,
    publish: NO_RESULT,
  } as const;
}

export const STATUS_TABLE = {
  // ORC-1 SC, not OK: the ORM status message is the filler's unsolicited status change (table
  // 0119 SC); OK answers a placer's order in an ORR^O02. The message always said SC, the table
  // (and the audit page's mapping tables) OK.
  RECEIVED: waiting('received', { resultStatus: 'O' }, 'upload received upstream'),
  QUEUED: waiting('accepted', { resultStatus: 'S' }, 'queued for processing'),
  PENDING: waiting('accepted', { resultStatus: 'O' }, 'pending'),
  ELIGIBILITY_CHECK_RUNNING: { ...IN_PROGRESS, note: 'quality control in progress' },
  QC_PASSED: { ...IN_PROGRESS, note: 'passed QC' },
  PREPROCESSING: { ...IN_PROGRESS, note: 'processing' },
  ANALYSIS_RUNNING: { ...IN_PROGRESS, note: 'ML analysis running' },
  QC_FAILED_BYPASSABLE: {
    orderState: 'qc-hold',
    terminal: false,
    task: {
      status: 'on-hold',
      reason: 'QC rejection: awaiting a clinician decision (bypass or accept)',
    },
    hl7: { orderControl: 'SC', orderStatus: 'HD', resultStatus: 'I' },
    publish: INTERMEDIATE,
    attach: 'qc-report',
    note: 'awaiting a human decision; never a result',
  },
  QC_BYPASS: {
    ...IN_PROGRESS,
    task: { status: 'in-progress', reason: 'QC rejection bypassed by a clinician' },
    note: 'who and why recorded; the final report carries a "QC bypassed" caveat',
  },
  QC_FAILED_FINAL: {
    ...noResult(
      'failed',
      'QC rejection: the study cannot be analysed',
      'Not analysable: the study failed quality control.',
    ),
    attach: 'qc-report',
    note: 'QC report attached; no finding',
  },
  IN_REVIEW: {
    ...IN_PROGRESS,
    task: { status: 'in-progress', reason: 'in manual review upstream' },
    note: 'unverified output is not released',
  },
  DELIVERED: {
    orderState: 'delivered',
    terminal: true,
    task: { status: 'completed' },
    report: 'final',
    hl7: { orderControl: 'RE', orderStatus: 'CM', resultStatus: 'F', observationStatus: 'F' },
    publish: ['fhir-task', 'fhir-diagnostic-report', 'hl7-oru', 'dicom-sr', 'dicom-pdf'],
    attach: 'results',
    note: 'results; a resend after an upstream correction is `corrected` / C',
  },
  FAILED: {
    ...noResult('failed', 'the analysis failed upstream', 'No result: the analysis failed.'),
    attach: 'failure-report',
    note: 'failure report attached',
  },
  PREPROCESSING_FAILED: {
    ...noResult(
      'failed',
      'preprocessing failed upstream',
      'No result: preprocessing of the study failed.',
    ),
    attach: 'failure-report',
    note: 'failure report attached',
  },
  CANCELLED: {
    ...noResult('cancelled', 'the order was cancelled', 'No result: the order was cancelled.'),
    note: 'ORC-1 CR when the orderer asked for the cancel, OC otherwise',
  },
  EXPIRED: {
    ...noResult(
      'failed',
      'the order expired upstream',
      'No result: the order expired before it could be analysed.',
    ),
    note: 'can no longer be retrieved',
  },
  ENDED_LOCALLY_FAILED: {
    ...noResult(
      'failed',
      'the order could not be processed',
      'No result: the order could not be processed.',
    ),
    note: 'ended here without an upstream status (deadline, unusable study, refusal); the reason is sent',
  },
  ENDED_LOCALLY_CANCELLED: {
    ...noResult('cancelled', 'the order was cancelled', 'No result: the order was cancelled.'),
    note: 'cancelled before it was placed upstream',
  },
} as const satisfies Record<OutboundRowKey, StatusRow>;

/** The rows that end without a result (OBR-25 X): a site may never turn one into a finding. */
export const NO_RESULT_KEYS: readonly OutboundRowKey[] = (
  Object.keys(STATUS_TABLE) as OutboundRowKey[]
).filter((key) => STATUS_TABLE[key].hl7.resultStatus === 'X');

/**
 * The row for an order that ended here, without an upstream status. A cancel the orderer asked
 * for is answered ORC-1 CR (table 0119 "canceled as requested"), as on the CANCELLED row: the
 * order ends here only after a cancel request (before it was placed, or refused upstream), and
 * before, its ORU said OC, a cancel of the filler's own, to the RIS that had asked for it.
 */
export function localEndRow(
  state: Extract<OrderState, 'failed' | 'cancelled'>,
  context: Pick<StatusContext, 'cancelRequestedByOrderer'> = {},
): StatusRow & { key: LocalEndKey } {
  const key: LocalEndKey =
    state === 'cancelled' ? 'ENDED_LOCALLY_CANCELLED' : 'ENDED_LOCALLY_FAILED';
  const row: StatusRow = STATUS_TABLE[key];
  if (key === 'ENDED_LOCALLY_CANCELLED' && context.cancelRequestedByOrderer) {
    return { ...row, key, hl7: { ...row.hl7, orderControl: 'CR' } };
  }
  return { ...row, key };
}

export interface StatusContext {
  /** For QC_FAILED: can a clinician still bypass it? */
  qcBypassPossible?: boolean;
  /** For CANCELLED: did the orderer ask for it (ORC-1 CR) or not (OC)? */
  cancelRequestedByOrderer?: boolean;
}

/** The row key of an upstream status in its context. */
export function statusRowKey(status: UpstreamStatus, context: StatusContext = {}): StatusRowKey {
  switch (status) {
    case 'QC_FAILED':
      return context.qcBypassPossible === false ? 'QC_FAILED_FINAL' : 'QC_FAILED_BYPASSABLE';
    case 'RECEIVED':
    case 'QUEUED':
    case 'PENDING':
    case 'ELIGIBILITY_CHECK_RUNNING':
    case 'PREPROCESSING':
    case 'PREPROCESSING_FAILED':
    case 'ANALYSIS_RUNNING':
    case 'IN_REVIEW':
    case 'DELIVERED':
    case 'FAILED':
    case 'CANCELLED':
    case 'EXPIRED':
    case 'QC_PASSED':
    case 'QC_BYPASS':
      return status;
    default:
      return status satisfies never;
  }
}

/** The row for an upstream status (with per-site overrides applied, when given). */
export function statusRow(
  status: UpstreamStatus,
  context: StatusContext = {},
  overrides: Partial<Record<StatusRowKey, Partial<StatusRow>>> = {},
): StatusRow & { key: StatusRowKey } {
  const key = statusRowKey(status, context);
  const base: StatusRow = STATUS_TABLE[key];
  const row: StatusRow = { ...base, ...overrides[key] };
  if (key === 'CANCELLED' && context.cancelRequestedByOrderer) {
    return { ...row, key, hl7: { ...row.hl7, orderControl: 'CR' } };
  }
  return { ...row, key };
}
