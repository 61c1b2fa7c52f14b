/** Why a call to the upstream failed; one code per way the caller must react. */
export const IMAGING_CLIENT_ERROR_CODES = [
  'bad_request',
  'unauthorized',
  'forbidden',
  'not_found',
  'conflict',
  'client_error',
  'redirected',
  'retired',
  'rate_limited_exhausted',
  'server_error_exhausted',
  'network',
  'deadline',
  'invalid_response',
  'too_large',
  'invalid_input',
  'upload_failed',
] as const;
export type ImagingClientErrorCode = (typeof IMAGING_CLIENT_ERROR_CODES)[number];

/** Codes a later attempt (another job run) may succeed on; the others need a change first. */
const TRANSIENT_CODES: ReadonlySet<ImagingClientErrorCode> = new Set([
  'rate_limited_exhausted',
  'server_error_exhausted',
  'network',
  'deadline',
]);

/** One entry of an `invalid_study` answer's `files` list (contract, Rules 3: which file, why). */
export interface UpstreamFileProblem {
  file: string;
  reason: string;
}

/** At most this many `files` entries are kept from one answer (the answer itself is ≤ 1 MiB). */
export const MAX_FILE_PROBLEMS = 10_000;
const MAX_FILE_TEXT = 1_000;

export interface ImagingClientErrorDetails {
  status?: number;
  /** The upstream's error body, sanitised (no signed URLs, bounded length). */
  upstreamError?: unknown;
  /**
   * The whole `files` list of the error body (e.g. `invalid_study`), not cut like
   * `upstreamError`: each entry sanitised (no URLs or signatures), at most MAX_FILE_PROBLEMS.
   */
  fileProblems?: UpstreamFileProblem[];
  /** How many entries the answer listed (may exceed `fileProblems.length`). */
  fileProblemsTotal?: number;
  migrationGuide?: string;
  attempts?: number;
  /**
   * Our own note on the answer, in our words, also at the end of the message: `a redirect to
   * host x that is not followed (…)`. Kept apart so that a reader who shows the upstream's
   * body (or only its code) instead of the message still says it.
   */
  adapterNote?: string;
  /**
   * The upstream's `Retry-After` on the last answer, when the call gave up before waiting it
   * out; at most RETRY_AFTER_MAX_MS. The job queue runs the job again no sooner.
   */
  retryAfterMs?: number;
  cause?: unknown;
}

/**
 * The longest `Retry-After` honoured (1 h): the contract asks only exponential backoff, so the
 * header is a courtesy we keep to within reason; a longer one (an HTTP-date in year 9999) is
 * this long, so no peer can park our jobs for good.
 */
export const RETRY_AFTER_MAX_MS = 3_600_000;

export class ImagingClientError extends Error {
  override readonly name = 'ImagingClientError';
  readonly status?: number;
  readonly upstreamError?: unknown;
  readonly fileProblems?: UpstreamFileProblem[];
  readonly fileProblemsTotal?: number;
  readonly migrationGuide?: string;
  readonly attempts?: number;
  readonly retryAfterMs?: number;
  /** ImagingClientErrorDetails.adapterNote, sanitised. */
  readonly adapterNote?: string;
  /** Why, in our own words (sanitised), without the operation: `storage's answer did not end …`. */
  readonly reason: string;

  constructor(
    readonly code: ImagingClientErrorCode,
    readonly operation: string,
    message: string,
    details: ImagingClientErrorDetails = {},
  ) {
    const reason = sanitizeText(message);
    super(`${operation}: ${reason}`, details.cause ? { cause: details.cause } : undefined);
    this.reason = reason;
    this.status = details.status;
    this.upstreamError =
      details.upstreamError === undefined ? undefined : sanitizeBody(details.upstreamError);
    this.fileProblems = details.fileProblems;
    this.fileProblemsTotal = details.fileProblemsTotal ?? details.fileProblems?.length;
    this.migrationGuide = details.migrationGuide;
    this.attempts = details.attempts;
    this.adapterNote =
      details.adapterNote === undefined ? undefined : sanitizeText(details.adapterNote);
    this.retryAfterMs =
      details.retryAfterMs !== undefined && Number.isFinite(details.retryAfterMs)
        ? Math.min(RETRY_AFTER_MAX_MS, Math.max(0, details.retryAfterMs))
        : undefined;
  }

  /** True when retrying later, unchanged, may succeed. */
  get transient(): boolean {
    return TRANSIENT_CODES.has(this.code);
  }

  toJSON(): Record<string, unknown> {
    return {
      code: this.code,
      operation: this.operation,
      message: this.message,
      status: this.status,
      upstreamError: this.upstreamError,
      migrationGuide: this.migrationGuide,
      attempts: this.attempts,
    };
  }
}

/** The error code an HTTP status that is never retried maps to. */
export function codeForStatus(status: number): ImagingClientErrorCode {
  if (status === 400) return 'bad_request';
  if (status === 401) return 'unauthorized';
  if (status === 403) return 'forbidden';
  if (status === 404) return 'not_found';
  if (status === 409) return 'conflict';
  if (status === 410) return 'retired';
  if (status === 413) return 'too_large';
  if (status === 429) return 'rate_limited_exhausted';
  // Never followed (a redirect may lead our bearer token elsewhere); it says IMAGING_BASE_URL
  // is not the service's final address, not that the request was wrong.
  if (status >= 300 && status < 400) return 'redirected';
  if (status >= 500) return 'server_error_exhausted';
  return 'client_error';
}

/**
 * The `files` list of an error body (`[{file, reason}]`, docs/upstream-assumptions.md "study
 * validation"), whole up to MAX_FILE_PROBLEMS entries, each text sanitised and bounded.
 * Entries that are not `{file, reason}` objects are skipped; no list gives `undefined`.
 */
export function extractFileProblems(
  body: unknown,
): { problems: UpstreamFileProblem[]; total: number } | undefined {
  if (!body || typeof body !== 'object' || Array.isArray(body)) return undefined;
  const files = (body as Record<string, unknown>).files;
  if (!Array.isArray(files)) return undefined;
  const problems: UpstreamFileProblem[] = [];
  let total = 0;
  for (const entry of files) {
    if (!entry || typeof entry !== 'object') continue;
    const { file, reason } = entry as Record<string, unknown>;
    if (typeof file !== 'string' && typeof reason !== 'string') continue;
    total++;
    if (problems.length >= MAX_FILE_PROBLEMS) continue;
    problems.push({
      file: sanitizeText(String(file ?? '').slice(0, MAX_FILE_TEXT)),
      reason: sanitizeText(String(reason ?? '').slice(0, MAX_FILE_TEXT)),
    });
  }
  return { problems, total };
}

const URL_PATTERN = /\b(?:https?|s3):\/\/[^\s"'<>]+/gi;
const SIGNATURE_PARAM =
  /\b(X-Amz-[A-Za-z-]+|Signature|sig|token|access_token|client_secret|Expires)=[^&\s"']+/gi;
const MAX_TEXT = 500;

/**
 * Presigned URLs are credentials (contract, Authentication 4): any URL in an upstream
 * message is cut down to origin + path, and signature-like query parameters are masked.
 */
export function sanitizeText(text: string): string {
  const cleaned = text
    .replace(URL_PATTERN, (url) => {
      try {
        const parsed = new URL(url);
        return `${parsed.protocol}//${parsed.host}/[redacted]`;
      } catch {
        return '[url redacted]';
      }
    })
    .replace(SIGNATURE_PARAM, '$1=[redacted]');
  return cleaned.length > MAX_TEXT ? `${cleaned.slice(0, MAX_TEXT)}…` : cleaned;
}

/** The longest link the adapter repeats from an upstream answer (a migration guide). */
export const MAX_LINK_CHARS = 2048;

/**
 * A link the upstream hands us to show an operator (the retirement body's `migration_guide`,
 * contract Versioning 6): kept as it is when it is an http(s) URL of visible ASCII up to
 * MAX_LINK_CHARS, signature-like parameters masked; anything else is text, sanitised like any
 * upstream message (URLs cut to their origin, at most 500 characters) and made one line.
 */
export function sanitizeLink(text: string): string {
  if (text.length <= MAX_LINK_CHARS && /^https?:\/\/[\x21-\x7e]+$/i.test(text))
    return text.replace(SIGNATURE_PARAM, '$1=[redacted]');
  // eslint-disable-next-line no-control-regex
  return sanitizeText(text.slice(0, MAX_LINK_CHARS).replace(/[\u0000-\u001f\u007f]/g, ' '));
}

function sanitizeBody(body: unknown, depth = 0): unknown {
  if (depth > 4) return '[…]';
  if (typeof body === 'string') return sanitizeText(body);
  if (Array.isArray(body)) return body.slice(0, 20).map((item) => sanitizeBody(item, depth + 1));
  if (body && typeof body === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(body).slice(0, 30)) {
      // A field named like a URL or credential is dropped outright, whatever its shape.
      if (/^(url|urls|access_token|client_secret|authorization)$/i.test(key))
        out[key] = '[redacted]';
      else out[key] = sanitizeBody(value, depth + 1);
    }
    return out;
  }
  return body;
}
