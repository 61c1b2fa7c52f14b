/**
 * A QC bypass of an order, as stored on it: a clinician's decision asked through our API and
 * sent upstream (`requested`, `withdrawn`), or one decided outside the adapter (the service's
 * portal, an agent) that we only saw as the upstream status QC_BYPASS (`observed`). Either way
 * the order's result carries the "QC bypassed" caveat (DESIGN.md §4).
 */
export interface QcBypassDecision {
  status: 'requested' | 'withdrawn' | 'observed';
  by: string;
  reason: string | null;
  at: string;
}
