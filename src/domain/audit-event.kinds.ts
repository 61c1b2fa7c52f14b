/**
 * Every kind of audit event, so that writers and the audit page agree. One event per step;
 * `detail` never holds a secret or a presigned URL.
 */
export const AUDIT_EVENT_KINDS = {
  'inbound.received': 'an inbound message was stored (raw bytes kept)',
  'inbound.rejected': 'an inbound message was refused (answer and reason)',
  'inbound.duplicate': 'a resend was answered with the original answer',
  'inbound.quirks': 'quirks of an input that were tolerated',
  'mapping.applied': 'field-level lineage: target ← source, value, rule, mapping version',
  'order.created': 'an order was created from an inbound message',
  'order.duplicate': 'an order already known was not created again',
  'order.updated': 'an order changed (metadata, demographics, merge)',
  'order.cancel-requested': 'a cancel was asked for (who, why)',
  'order.cancel-refused':
    'a cancel came too late, named another patient, or came from a sender token that did not submit the order (not applied)',
  'order.change-refused':
    'a change came after the order had ended, named another patient, or changed the products of a running order; or a QC bypass came from a sender token that did not submit the order (not applied)',
  'order.replaces':
    "an order's request replaces an earlier one (FHIR replaces): which, and what became of it (its cancel requested, or why not)",
  'order.replaced':
    'a newer request of the orderer replaces this order: its cancel requested, or why not (another patient, already ended)',
  'order.status-recorded': 'a status message (ORC-1 SC) was recorded',
  'order.transition': 'our order changed state',
  'order.illegal-transition': 'a state change that the transition table forbids was refused',
  'order.alert': 'an order missed a deadline or cannot go on: an operator should look (it ended)',
  'order.alert-cleared':
    'an alert on an order no longer holds (what it said was missing came later): cleared, with why',
  'order.upload-held':
    'an upload was held back: the same study was uploaded upstream less than 5 minutes ago',
  'order.documents-fetched': 'results, failure or QC reports were fetched and stored',
  'order.batch': 'an upstream batch was created or joined (placer group / requisition)',
  'upstream.call': 'a call to the upstream (endpoint, status, latency, retries)',
  'outbound.attempt': 'an outbound document was sent (payload, destination, answer)',
  'outbound.dead-letter': 'an outbound document gave up after its retries',
  'outbound.replay': 'a dead letter was replayed (who, why)',
  'study.received': 'DICOM instances were received (STOW-RS / C-STORE): stored and refused counts',
  'study.association-refused':
    'our C-STORE SCP refused or aborted a DICOM association (called / calling AE not allowed, PDU too large): who, from where, why',
  'study.matched':
    'received instances were matched to an order (by Study Instance UID or accession)',
  'study.expired': 'unmatched instances were deleted after their hold time',
  'study.packaged': "an order's study was validated and packaged as a ZIP for upload",
  'study.identity-mismatch':
    "a study's accession number or patient ID differs from the order's: not used (fields named, masked)",
  'study.failed': "an order's study cannot be used (invalid instances, ambiguous identifiers)",
  'study.released': "an order's package and staged instances were deleted",
  'study.retrieve-problem':
    'the PACS could not be queried or a retrieve did not complete (unreachable, refused, failed sub-operations): the order waits and tries again; once per distinct reason',
  'decision.qc-bypass': 'a clinician bypassed (or withdrew a bypass of) a QC rejection',
  'upstream.refused':
    "the upstream refused an order's operation: its answer (status, code, message, every refused file with its reason), masked",
  'upstream.unknown-status':
    'the upstream listed an order with a status value the contract does not name: that order is left as it was',
  'upstream.stale-status':
    'the upstream named a status of an earlier stage than the one applied (a stale listing, a raced poll): observed, not applied; once per move',
  'upstream.inconsistent':
    'the upstream said something of an order that cannot all be true (two statuses in one answer, a status answer about another order): not applied; once per finding',
  'message.reprocessed':
    'an admin ran a refused inbound message again through its front door (who, why, the message it became, the answer)',
  'phi.reveal': 'an admin was shown unmasked PHI (who, why, what)',
  error: 'an error on an order or message',
} as const;

export type AuditEventKind = keyof typeof AUDIT_EVENT_KINDS;

/** How loud an audit event is; `error` events are what the audit page's errors-only view shows. */
export type AuditSeverity = 'info' | 'warning' | 'error';
