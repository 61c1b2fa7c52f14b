import { NO_KNOWN_PHI, type KnownPhi } from '../audit/phi-known-values';
import { maskFilePath, maskFreeText } from '../audit/phi-masking.free-text';
import { ImagingClientError } from '../imaging-client/imaging-client.error';

export { maskFilePath, maskFreeText } from '../audit/phi-masking.free-text';

/**
 * An upstream refusal as an analyst may see it on the order's timeline (audit event
 * `upstream.refused`): our error code, the HTTP status, the upstream's machine code and
 * message, and — for `invalid_study` — every refused file with its reason (contract, Rules 3).
 *
 * The upstream's texts are not ours and may echo what we sent, so they are masked before
 * they are stored: URLs and signatures are cut (sanitizeText), names written `FAMILY^Given`
 * keep their initials, dates their year, long digit runs are hidden. File paths are shown
 * only where a segment is a UID, a number or one of the names our packages use; any other
 * segment (a folder or file named after a patient, say) keeps its first character and its
 * extension. Pure: no database, no Nest.
 */
export interface UpstreamRefusalView {
  operation: string;
  code: string;
  status?: number;
  upstreamCode?: string;
  message?: string;
  files?: Array<{ file: string; reason: string }>;
  /** How many files the upstream listed (at most MAX_FILE_PROBLEMS are kept). */
  filesTotal?: number;
}

const MACHINE_CODE = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;
const MAX_MESSAGE = 1_000;

/** `known`: the order's own values (knownPhiOf), masked wherever the upstream quotes them. */
export function upstreamRefusalView(
  error: unknown,
  known: KnownPhi = NO_KNOWN_PHI,
): UpstreamRefusalView | undefined {
  if (!(error instanceof ImagingClientError)) return undefined;
  const body =
    error.upstreamError && typeof error.upstreamError === 'object'
      ? (error.upstreamError as Record<string, unknown>)
      : {};
  const view: UpstreamRefusalView = { operation: error.operation, code: error.code };
  if (error.status !== undefined) view.status = error.status;
  if (typeof body.error === 'string' && MACHINE_CODE.test(body.error))
    view.upstreamCode = body.error;
  const text =
    typeof body.message === 'string'
      ? body.message
      : typeof body.body === 'string'
        ? body.body
        : '';
  if (text) view.message = maskFreeText(text, known).slice(0, MAX_MESSAGE);
  // Refused here, not by the upstream (no status): our reason, e.g. `presigned upload URL
  // refused: host 169.254.169.254 is link-local`, rather than a bare `invalid_response`.
  else if (error.status === undefined) view.message = maskFreeText(error.reason, known);
  if (error.fileProblems) {
    view.files = error.fileProblems.map((p) => ({
      file: maskFilePath(p.file),
      reason: maskFreeText(p.reason, known),
    }));
    view.filesTotal = error.fileProblemsTotal ?? error.fileProblems.length;
  }
  return view;
}

/** One line for a summary: `403 qc_bypass_restricted: manual review …` (masked, bounded). */
export function describeRefusal(view: UpstreamRefusalView | undefined, fallback: string): string {
  if (!view) return fallback;
  const head = [view.status, view.upstreamCode ?? view.code].filter(Boolean).join(' ');
  const files = view.filesTotal !== undefined ? ` (${view.filesTotal} file(s) refused)` : '';
  return `${head}${files}${view.message ? `: ${view.message}` : ''}`.slice(0, 500);
}
