/**
 * Spec-level facts of the Imaging Analysis Service /v1 interface
 * (shared/upstream/imaging-service-api.md). This is the only module that the sandbox and
 * our client share: values the document states, never behaviour, so that a misreading of
 * the spec cannot hide in both.
 */

/** "States and transitions": the 15 order status values. */
export const UPSTREAM_STATUSES = [
  'RECEIVED',
  'QUEUED',
  'PENDING',
  'ELIGIBILITY_CHECK_RUNNING',
  'PREPROCESSING',
  'PREPROCESSING_FAILED',
  'ANALYSIS_RUNNING',
  'IN_REVIEW',
  'DELIVERED',
  'FAILED',
  'CANCELLED',
  'EXPIRED',
  'QC_FAILED',
  'QC_PASSED',
  'QC_BYPASS',
] as const;
export type UpstreamStatus = (typeof UPSTREAM_STATUSES)[number];

/** "States and transitions": the Meaning column, word for word. */
export const UPSTREAM_STATUS_MEANINGS: Record<UpstreamStatus, string> = {
  RECEIVED: 'upload successfully received',
  QUEUED: 'queued for processing',
  PENDING: 'status is pending',
  ELIGIBILITY_CHECK_RUNNING: 'quality control in progress',
  PREPROCESSING: 'order is processing',
  PREPROCESSING_FAILED: 'order processing failed',
  ANALYSIS_RUNNING: 'ML analysis running',
  IN_REVIEW: 'blocked on manual review',
  DELIVERED: 'results successfully delivered',
  FAILED: 'order failed processing',
  CANCELLED: 'cancelled by the user',
  EXPIRED: 'order expired; can no longer be retrieved',
  QC_FAILED: 'failed QC; can be bypassed by the user',
  QC_PASSED: 'passed QC',
  QC_BYPASS: 'QC failure bypassed by the user',
};

/** Statuses the document marks terminal ("yes"). QC_FAILED is "yes or no": see below. */
export const TERMINAL_UPSTREAM_STATUSES = [
  'PREPROCESSING_FAILED',
  'DELIVERED',
  'FAILED',
  'CANCELLED',
  'EXPIRED',
] as const satisfies readonly UpstreamStatus[];

/** QC_FAILED is terminal only once it can no longer be bypassed. */
export const CONDITIONALLY_TERMINAL_UPSTREAM_STATUSES = [
  'QC_FAILED',
] as const satisfies readonly UpstreamStatus[];

export function isUpstreamStatus(value: unknown): value is UpstreamStatus {
  return typeof value === 'string' && (UPSTREAM_STATUSES as readonly string[]).includes(value);
}

/** "Reports": report_type for /results, /failure-report and /report. */
export const REPORT_TYPES = ['PDF', 'PNG', 'JSON', 'XML', 'TXT'] as const;
export type ReportType = (typeof REPORT_TYPES)[number];

/** /failure-report additionally supports CSV. */
export const FAILURE_REPORT_TYPES = [...REPORT_TYPES, 'CSV'] as const;
export type FailureReportType = (typeof FAILURE_REPORT_TYPES)[number];

/** /qc-report parameters. */
export const QC_REPORT_TYPES = ['results', 'additional_info'] as const;
export type QcReportType = (typeof QC_REPORT_TYPES)[number];
export const QC_ROUNDS = ['latest', 'original', 'corrected'] as const;
export type QcRound = (typeof QC_ROUNDS)[number];
export const QC_ROUND_HEADER = 'X-QC-Round';

/** "Versioning". */
export const DEPRECATION_HEADER = 'X-API-Deprecation-Warning';

/** "Retirement error body". */
export interface RetirementErrorBody {
  error: string;
  migration_guide: string;
}

/** "Token response". */
export interface TokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
}

/** "Limits". */
export const LIMITS = {
  requestsPerIpPerMinute: 2000,
  requestsPerEndpointPerMinute: 600,
  // The contract says "MB" and "GB" without saying which. Each bound below is the reading
  // that is safe under both (docs/upstream-assumptions.md): single PUT only under 5,000,000
  // bytes; parts of at least 5 MiB (≥ 5 MB either way, the last part excepted) and at most
  // 100,000,000 bytes; at most 100 parts; a study of at most 10,000,000,000 bytes.
  singlePutMaxBytes: 5_000_000,
  multipartMaxParts: 100,
  chunkMinBytes: 5 * 1024 * 1024,
  chunkMaxBytes: 100_000_000,
  chunkRecommendedBytes: 10 * 1024 * 1024,
  maxStudyBytes: 10_000_000_000,
  concurrentUploads: 100,
  presignedUrlExpirySeconds: 3600,
  tokenLifetimeSeconds: 3600,
  recommendedPollIntervalSeconds: 300,
  sameStudyOverwriteWindowSeconds: 300,
  singleInstanceJoinGapSeconds: 60,
} as const;
