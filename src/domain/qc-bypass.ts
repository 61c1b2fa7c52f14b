/** A clinician's decision on a QC rejection, as stored on the order and sent upstream. */
export interface QcBypassDecision {
  status: 'requested' | 'withdrawn';
  by: string;
  reason: string | null;
  at: string;
}
