import type { Readable } from 'node:stream';
import { BodyTooLargeError, readBounded } from '../common/bounded-body';
import { ImagingClientError, sanitizeText } from './imaging-client.error';
import {
  MAX_ERROR_BODY_BYTES,
  MAX_RESPONSE_BYTES,
  type UpstreamResponse,
} from './upstream-http.types';

/**
 * Reading the upstream's answers and failures: network errors worth a retry, headers, the
 * retirement body (contract, Versioning 6) and error bodies (docs/upstream-assumptions.md).
 */
const NETWORK_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_DESTROYED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_ABORTED',
  'UND_ERR_REQ_CONTENT_LENGTH_MISMATCH',
  'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
]);

export function isNetworkError(error: unknown): boolean {
  let current: unknown = error;
  for (let depth = 0; current && depth < 4; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && NETWORK_CODES.has(code)) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

export function describeNetworkError(error: unknown): string {
  const code = (error as { code?: unknown })?.code;
  const name = (error as { name?: unknown })?.name;
  return `network error ${typeof code === 'string' ? code : typeof name === 'string' ? name : 'unknown'}`;
}

export function headerValue(
  headers: UpstreamResponse['headers'],
  name: string,
): string | undefined {
  const value = headers[name.toLowerCase()];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * application/x-www-form-urlencoded of one value (RFC 6749 Appendix B); a space as `%20`,
 * which every form decoder reads as a space too.
 */
export function formUrlEncode(value: string): string {
  return encodeURIComponent(value);
}

/** The contract's retirement body: a JSON object with string `error` and `migration_guide`. */
export function isRetirementBody(response: UpstreamResponse): boolean {
  const body = parseErrorBody(response);
  return typeof body?.error === 'string' && typeof body?.migration_guide === 'string';
}

/** The error body the assumptions page describes (`{error, message}`), or whatever text came. */
export function parseErrorBody(response: UpstreamResponse): Record<string, unknown> | undefined {
  if (response.body.length === 0) return undefined;
  // Read whole up to MAX_ERROR_BODY_BYTES: an `invalid_study` answer lists every bad file
  // (contract, Rules 3), far more than a few KB for a large study. A longer answer is not
  // JSON once cut, so it is kept as (sanitised, shortened) text.
  const text = response.body.subarray(0, MAX_ERROR_BODY_BYTES).toString('utf8');
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed))
      return parsed as Record<string, unknown>;
    return { body: sanitizeText(text) };
  } catch {
    return { body: sanitizeText(text) };
  }
}

export function describeErrorBody(body: Record<string, unknown> | undefined): string {
  if (!body) return '';
  const code = typeof body.error === 'string' ? body.error : undefined;
  const message = typeof body.message === 'string' ? body.message : undefined;
  const parts = [code, message].filter(Boolean);
  return parts.length ? ` (${sanitizeText(parts.join(': '))})` : '';
}

/**
 * An answer's body, bounded like every buffer we hold (docs/security.md): the largest answer
 * the contract implies (a list of orders or reports) is far below MAX_RESPONSE_BYTES; beyond
 * it the rest is not read.
 */
export async function readAnswer(
  body: Readable,
  operation: string,
  maxBytes = MAX_RESPONSE_BYTES,
): Promise<Buffer> {
  try {
    return await readBounded(body, maxBytes);
  } catch (error) {
    if (!(error instanceof BodyTooLargeError)) throw error;
    throw new ImagingClientError('invalid_response', operation, error.message);
  }
}
