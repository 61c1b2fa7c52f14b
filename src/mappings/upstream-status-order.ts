import type { UpstreamStatus } from '../imaging-spec/imaging-spec';

/**
 * How far along its pipeline an upstream status says an order is. The contract ("States and
 * transitions") names the statuses and few moves: the upload starts processing, a QC
 * rejection gives QC_FAILED, a bypass of it is requested while QC_FAILED (the status stays
 * QC_FAILED while the verdict is pending, a withdrawal changes nothing) and is granted as
 * QC_BYPASS, a cancel gives CANCELLED. The order of the rest is read from each status's
 * meaning and DESIGN.md section 4: created (PENDING), upload received, queued, quality
 * control, QC verdict, preprocessing, analysis, manual review, end.
 *
 * A status of a lower stage than the one already applied is a move backwards: a stale
 * listing, a `GET /status` answered before a later listing, a replica's poll that raced. It
 * is observed, not applied (a Task back on-hold after the bypass, an ORM SC status message
 * saying "queued" during analysis). Equal stages are not backwards: QC_FAILED's two rows
 * (bypassable, then final) are one status, QC_PASSED / QC_BYPASS are the two ways past a
 * QC verdict, and ANALYSIS_RUNNING / IN_REVIEW are the analysis running or held for review
 * (the contract names no move between them; a review ending in more analysis is one). Every end is the last stage: an end is always applied to a running order.
 */
export const UPSTREAM_STATUS_STAGE = {
  PENDING: 0,
  RECEIVED: 1,
  QUEUED: 2,
  ELIGIBILITY_CHECK_RUNNING: 3,
  // QC rejection: still bypassable (or final, off the active list).
  QC_FAILED: 4,
  // Past the QC verdict: passed, or the rejection bypassed (a move forward from QC_FAILED).
  QC_PASSED: 5,
  QC_BYPASS: 5,
  PREPROCESSING: 6,
  // IN_REVIEW is a hold on the analysis ("blocked on manual review"), not a step after it: a
  // review that sends the order back to analysis is a move the upstream makes, not a stale
  // status, so the two share a stage (either way is applied).
  ANALYSIS_RUNNING: 7,
  IN_REVIEW: 7,
  DELIVERED: 9,
  FAILED: 9,
  PREPROCESSING_FAILED: 9,
  CANCELLED: 9,
  EXPIRED: 9,
} as const satisfies Record<UpstreamStatus, number>;

/** Whether `next` is a status of an earlier stage than `applied` (a move backwards). */
export function movesBackwards(applied: string | null, next: UpstreamStatus): boolean {
  if (applied === null || !(applied in UPSTREAM_STATUS_STAGE)) return false;
  return (
    UPSTREAM_STATUS_STAGE[next] <
    UPSTREAM_STATUS_STAGE[applied as keyof typeof UPSTREAM_STATUS_STAGE]
  );
}
