import type { responses } from 'dcmjs-dimse';
import { StudyError } from './study.error';

/**
 * DIMSE statuses (PS3.4 Annex C, PS3.7 Annex C): which end a request, how a retrieve's final
 * answer reads as counts, and which failures are worth waiting for.
 */

/** Statuses a retrieve may end with (PS3.4 Table C.4-2 / C.4-3, PS3.7 Annex C). */
export const PENDING: ReadonlySet<number> = new Set([0xff00, 0xff01]);
export const SUCCESS = 0x0000;
const SUB_OPERATIONS_WARNING = 0xb000;
const CANCELLED = 0xfe00;

/** The final C-MOVE / C-GET response, as counts (PS3.7 §9.1.4.1 / §9.1.3.1). */
export interface RetrieveOutcome {
  status: number;
  completed: number;
  failed: number;
  warnings: number;
}

/** A retrieve's final response as counts (judged by checkRetrieveOutcome). */
export function outcomeOf(final: responses.Response): RetrieveOutcome {
  const r = final as responses.CMoveResponse;
  return {
    status: final.getStatus(),
    completed: r.getCompleted?.() ?? 0,
    failed: r.getFailures?.() ?? 0,
    warnings: r.getWarnings?.() ?? 0,
  };
}

/**
 * Judges a retrieve's outcome: success with every sub-operation completed, or a StudyError.
 * Transient (waiting): out of resources, sub-operations failed, cancelled, move destination
 * unknown (an operator registers our AE at the PACS). Anything else is the PACS refusing the
 * request itself (failed).
 */
export function checkRetrieveOutcome(what: string, outcome: RetrieveOutcome): void {
  if (outcome.status === SUCCESS && outcome.failed === 0) return;
  if (outcome.status === SUB_OPERATIONS_WARNING || outcome.failed > 0)
    throw new StudyError(
      'pacs_unavailable',
      `${what} incomplete: ${outcome.failed} of ${outcome.completed + outcome.failed + outcome.warnings} sub-operation(s) failed (status ${hex(outcome.status)}); not packaged`,
    );
  throw statusError(what, outcome.status);
}

/**
 * PS3.4 Table C.4-1..C.4-3: what a status means, PHI-free. Most are worth waiting for: out of
 * resources, cancelled, and the PACS refusing to process or not knowing the move destination
 * are configuration an operator fixes (Orthanc 1.10 answers an unknown destination with 0xC000,
 * later versions with 0xA801). Only a request the PACS cannot serve at all fails the order.
 */
export function statusError(what: string, status: number): StudyError {
  const meaning = describeStatus(status);
  const permanent = status === 0xa900 || status === 0x0122;
  return new StudyError(
    permanent ? 'pacs_error' : 'pacs_unavailable',
    `${what} answered ${hex(status)} (${meaning})${status === 0x0122 && what === 'C-GET' ? '; set PACS_DIMSE_RETRIEVE=move' : ''}`,
  );
}

function describeStatus(status: number): string {
  if (status === 0xa801) return 'move destination unknown: the PACS does not know our AE title';
  if (status === 0xa701 || status === 0xa702 || (status & 0xff00) === 0xa700)
    return 'out of resources';
  if (status === 0xa900) return 'identifier does not match SOP class';
  if (status === CANCELLED) return 'cancelled';
  if (status === SUB_OPERATIONS_WARNING) return 'sub-operations complete with failures';
  if (status === 0x0122) return 'SOP class not supported';
  if ((status & 0xf000) === 0xc000) return 'unable to process';
  return 'failure';
}

function hex(status: number): string {
  return `0x${status.toString(16).toUpperCase().padStart(4, '0')}`;
}
