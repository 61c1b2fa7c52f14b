/**
 * What a STOW-RS Failure Reason (0008,1197) in the Failed SOP Sequence means for a resend of
 * our SR or PDF (PS3.18 10.5.3, reasons from PS3.4 C.4.2.1.4 / GG.4-1 and vendors' documented
 * codes):
 * - `held`: the PACS already holds an instance with these UIDs: a resend of what it stored
 *   (our UIDs are derived from the order and revision, so the same UIDs are the same report);
 * - `transient`: the PACS may store it later (out of resources, another request creating it);
 * - anything else is a refusal a resend cannot change (a dead letter with the reason).
 */
export type StowFailureClass = 'held' | 'transient' | 'refused';

interface StowFailureReason {
  readonly class: StowFailureClass;
  readonly meaning: string;
}

const REASONS: Readonly<Record<number, StowFailureReason>> = {
  // PS3.4 C.4.2.1.4 / Table GG.4-1
  0x0110: { class: 'refused', meaning: 'processing failure' },
  0x0111: { class: 'held', meaning: 'duplicate SOP instance' },
  0x0122: { class: 'refused', meaning: 'SOP class not supported' },
  0x0124: { class: 'refused', meaning: 'not authorized' },
  0xa900: { class: 'refused', meaning: 'data set does not match SOP class' },
  0xa901: { class: 'refused', meaning: 'Study Instance UID does not match the request' },
  0xc000: { class: 'refused', meaning: 'cannot understand' },
  // Azure Health Data Services DICOM service, "Store failure reason codes" (conformance
  // statement v2): 45070 the same Study/Series/SOP Instance UIDs already stored, 45071 the
  // instance being created by another request (or its failed creation not yet cleaned up).
  45070: { class: 'held', meaning: 'instance already stored' },
  45071: { class: 'transient', meaning: 'instance being created by another request' },
};

/** The class and a short meaning of a Failure Reason (`A7xx` out of resources is transient). */
export function stowFailureReason(reason: number | undefined): StowFailureReason {
  if (reason === undefined) return { class: 'refused', meaning: 'no reason given' };
  const known = REASONS[reason];
  if (known) return known;
  // A7xx Refused: Out of Resources (PS3.4 C.4.2.1.4): a full PACS that later has room stores it
  if (reason >> 8 === 0xa7) return { class: 'transient', meaning: 'out of resources' };
  return { class: 'refused', meaning: 'refused' };
}

/** `0xA700 out of resources`, as the analyst reads it in a dead letter. */
export function describeStowFailure(reason: number | undefined): string {
  const code =
    reason === undefined ? '' : `0x${reason.toString(16).toUpperCase().padStart(4, '0')} `;
  return `${code}${stowFailureReason(reason).meaning}`;
}
