/**
 * What the clinic is told when an order ends here without a result (the ENDED_LOCALLY_* rows:
 * ORC-16 text and the text OBX of the ORU, the Task's statusReason, the DiagnosticReport's
 * conclusion), by the alert the end raises. One sentence a clinician reads: what happened,
 * that no result will come, and what to do where there is something to do.
 *
 * The technical reason (the upstream's HTTP status, error code and message, attempt counts,
 * upstream status values, file lists) is the analyst's: timeline, `orders.last_error`, the
 * `order.alert` event and the alert webhook. It never goes to the clinic: it is not written
 * for a clinician, and the upstream's text is not ours (it may echo what we sent).
 *
 * Plain words only (no HL7 delimiters, no control characters): valid as they stand for
 * ORC-16 CE text, OBX-5 TX and a FHIR string, escaped by the writers like any text.
 */
export const CLINICAL_END_REASONS = {
  'study-deadline':
    'no usable images of the study arrived in time; no result will come. If the examination took place, order the analysis again once its images are in the PACS',
  'study-unusable':
    'the images of the study could not be used for the analysis; no result will come',
  'study-identity-mismatch':
    'the images found do not match the order (patient or accession number); they were not analysed and no result will come. Check that order and study belong together',
  'upstream-refused': 'the analysis service did not accept the order; no result will come',
  'upload-refused': 'the analysis service did not accept the images; no result will come',
  'batch-products-mismatch':
    'the order asks for other analyses than the other orders of its group; it was not sent for analysis and no result will come',
  'not-placed': 'the order could not be placed with the analysis service; no result will come',
  'not-uploaded': 'the study could not be sent to the analysis service; no result will come',
  'upstream-stuck': 'the analysis did not finish in time; no result will come',
  'upstream-unknown': 'the analysis service no longer holds the order; no result will come',
  // The two no-result ends of a DELIVERED order (the order keeps its state `delivered`): its
  // results never fetched, every attempt used (sweep), or every report refused as not this
  // order's (fetch of the documents). Which report, how many attempts, the upstream's error:
  // the analyst's.
  'documents-not-fetched':
    'the analysis was done, but its results could not be retrieved; no result will come. Order it again if still needed',
  'results-refused':
    'the results the analysis service returned belonged to another order and were not used; no result will come. Order it again if still needed',
} as const;

export type ClinicalEndAlert = keyof typeof CLINICAL_END_REASONS;

/** A failure here whose alert has no sentence of its own. */
export const CLINICAL_FAILED_DEFAULT = 'the analysis could not be completed; no result will come';

/** Every local end as `cancelled` answers a cancel the orderer asked for. */
export const CLINICAL_CANCELLED =
  'the order was cancelled as the orderer asked; no result will come';

/**
 * An order cancelled because a newer request of the orderer replaced it (FHIR `replaces`): "as
 * the orderer asked" alone read as if the analysis had been called off, and a clinician
 * could order it again beside the replacing order.
 */
export const CLINICAL_REPLACED =
  'the order was replaced by a newer one from the orderer and cancelled; no result will come for this one; see the replacing order';

/**
 * Whether a reason is one of the clinical sentences above, whole in itself (each says "no
 * result will come"): it then takes the place of the row's lead ("No result: the order was
 * cancelled.", "the order was cancelled") instead of following it, which read "No result:
 * the order was cancelled. cancelled as the orderer asked". Any other reason (the upstream's
 * failure text, a test's) still follows the lead.
 */
function isWholeSentence(reason: string | undefined): reason is string {
  return reason !== undefined && /\bno result will come\b/i.test(reason);
}

/**
 * The no-result text that stands as sentences (the DiagnosticReport's conclusion, the ORU's
 * text OBX): capital first, full stop last.
 */
export function noResultSentence(lead: string | undefined, reason: string | undefined): string {
  if (isWholeSentence(reason)) {
    const text = reason.trim();
    return `${text.charAt(0).toUpperCase()}${text.slice(1)}${text.endsWith('.') ? '' : '.'}`;
  }
  return [lead, reason].filter(Boolean).join(' ');
}

/** The no-result text that stands as a phrase (Task.statusReason, ORC-16): `lead: reason`. */
export function noResultPhrase(lead: string | undefined, reason: string | undefined): string {
  if (isWholeSentence(reason)) return reason;
  return [lead, reason].filter(Boolean).join(': ');
}

/** The sentence the clinic reads for an order ended here as `to`, with `alert`. */
export function clinicalEndReason(to: 'failed' | 'cancelled', alert: string | null): string {
  if (to === 'cancelled') return CLINICAL_CANCELLED;
  return alert !== null && Object.hasOwn(CLINICAL_END_REASONS, alert)
    ? CLINICAL_END_REASONS[alert as ClinicalEndAlert]
    : CLINICAL_FAILED_DEFAULT;
}
