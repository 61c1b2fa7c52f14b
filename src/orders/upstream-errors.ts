import { NO_KNOWN_PHI, type KnownPhi } from '../audit/phi-known-values';
import { maskFreeText } from '../audit/phi-masking.free-text';
import { ImagingClientError } from '../imaging-client/imaging-client.error';

/**
 * Retried by the job queue (with backoff) rather than ending the order: anything that is not
 * the upstream's considered answer about this order (database, network, exhausted retries),
 * and the answers that are about us, not the order: a retired API version (an operator must
 * migrate; /health says so), refused credentials and a redirect (IMAGING_BASE_URL is not the
 * service's final address: an operator corrects it).
 */
const RETRY_LATER = new Set(['retired', 'unauthorized', 'redirected']);

export function isTransient(error: unknown): boolean {
  return (
    !(error instanceof ImagingClientError) ||
    error.transient ||
    RETRY_LATER.has(error.code) ||
    // No token, whatever the token endpoint answered, says nothing about this order.
    error.operation === 'token'
  );
}

export function errorCode(error: unknown): string {
  return error instanceof ImagingClientError ? error.code : 'error';
}

/**
 * One line for the order's timeline, last error and alert. The upstream's own words when it
 * sent any, masked as an upstream refusal is (names, dates, long numbers, file names: its
 * error body is not specified and may echo the metadata we sent, and this line is shown
 * unmasked as a summary); otherwise ours (a refused presigned URL, a list too long, an
 * answer that never ended), so the analyst is told which it was; our note on the answer (a
 * redirect not followed) either way. `known`: the order's own
 * values (knownPhiOf), masked in whatever form the upstream quotes them.
 */
export function describe(error: unknown, known: KnownPhi = NO_KNOWN_PHI): string {
  if (error instanceof ImagingClientError) {
    const head = `${error.code} on ${error.operation}`;
    if (!error.upstreamError) return `${head}: ${error.reason}`.slice(0, 500);
    // Our note on the answer (a redirect not followed) is in `reason`, which the upstream's
    // words replace here: said after them, and kept when they are cut (before: lost).
    const note = error.adapterNote ? `, ${error.adapterNote}` : '';
    const words = ` (${maskFreeText(JSON.stringify(error.upstreamError), known)})`;
    return `${head}${words.slice(0, Math.max(0, 500 - head.length - note.length))}${note}`;
  }
  return (error as Error).message;
}
