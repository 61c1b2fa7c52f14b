import { maskDate, maskName } from '../audit/phi-masking';
import { ImagingClientError, sanitizeText } from '../imaging-client/imaging-client.error';

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

export function upstreamRefusalView(error: unknown): UpstreamRefusalView | undefined {
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
  if (text) view.message = maskFreeText(text).slice(0, MAX_MESSAGE);
  // Refused here, not by the upstream (no status): our reason, e.g. `presigned upload URL
  // refused: host 169.254.169.254 is link-local`, rather than a bare `invalid_response`.
  else if (error.status === undefined) view.message = maskFreeText(error.reason);
  if (error.fileProblems) {
    view.files = error.fileProblems.map((p) => ({
      file: maskFilePath(p.file),
      reason: maskFreeText(p.reason),
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

/** Free text from the upstream, with anything that may be PHI masked. */
export function maskFreeText(text: string): string {
  return (
    sanitizeText(text)
      // HL7/DICOM person names (PN): FAMILY^Given^Middle.
      .replace(/[^\s^:;,()"'[\]{}]+(?:\^[^\s^:;,()"'[\]{}]*)+/g, (pn) =>
        pn
          .split('^')
          .map((p) => (p ? maskName(p) : p))
          .join('^'),
      )
      // Dates (YYYY-MM-DD, YYYYMMDD) keep their year; not inside a dotted UID.
      .replace(/(?<![\d.])(?:19|20)\d{2}-?[01]\d-?[0-3]\d(?![\d.])/g, (d) => maskDate(d))
      // Other long digit runs (identifiers), again not inside a dotted UID.
      .replace(/(?<![\d.])\d{7,}(?![\d.])/g, '***')
      // File paths and file names inside the text, as in a `files` entry.
      .replace(/[^\s;,()"'[\]{}]*[^\s:;,()"'[\]{}]/g, (token) =>
        !/^[a-z][a-z0-9+.-]*:\/\//i.test(token) &&
        (/[/\\]/.test(token) || KNOWN_EXTENSION.test(token))
          ? maskFilePath(token)
          : token,
      )
  );
}

const KNOWN_EXTENSION = /(\.nii\.gz|\.(?:dcm|dicom|nii|bvec|bval|json|zip|txt|md|html))$/i;
const SAFE_STEM =
  /^(?:[0-9]+(?:\.[0-9]+)*|[A-Za-z]{1,4}[0-9][0-9._-]*|DICOM|DICOMDIR|metadata|sidecar|__MACOSX|uploaded object)$/;

/** A file path with every segment that could name a person reduced to its first character. */
export function maskFilePath(path: string): string {
  return path
    .split(/([/\\])/)
    .map((segment) => {
      if (
        segment === '/' ||
        segment === '\\' ||
        segment === '' ||
        segment === '.' ||
        segment === '..'
      )
        return segment;
      const ext = KNOWN_EXTENSION.exec(segment)?.[1] ?? '';
      const stem = segment.slice(0, segment.length - ext.length);
      if (SAFE_STEM.test(stem)) return segment;
      return `${[...stem][0] ?? ''}***${ext}`;
    })
    .join('');
}
