/**
 * Whether an error means "the database cannot be reached right now" (it is down, restarting,
 * recovering, or the connection broke), as opposed to a query the database refused. A front
 * door answers such errors as temporary (HTTP 503, HL7 AR 207) so the sender retries; no
 * order is ever acknowledged without its commit.
 */

/** Node socket errors met while connecting to or talking with PostgreSQL. */
const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
]);

/**
 * PostgreSQL SQLSTATEs (Appendix A): class 08 (connection exception), 57P01 admin shutdown,
 * 57P02 crash shutdown, 57P03 cannot connect now (starting up, in recovery), 53300 too many
 * connections.
 */
const SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300']);

/** Messages of node-postgres (pg, pg-pool) that carry no code. */
const PG_MESSAGES = [
  /^Connection terminated/i,
  /timeout exceeded when trying to connect/i,
  /Client has encountered a connection error and is not queryable/i,
  /Client was closed and is not queryable/i,
  /Cannot use a pool after calling end on the pool/i,
];

export function isDatabaseUnavailable(error: unknown, depth = 0): boolean {
  if (!error || typeof error !== 'object' || depth > 4) return false;
  const e = error as {
    code?: unknown;
    message?: unknown;
    driverError?: unknown;
    cause?: unknown;
    errors?: unknown;
  };
  const code = typeof e.code === 'string' ? e.code : undefined;
  if (code && (SOCKET_CODES.has(code) || SQLSTATES.has(code) || code.startsWith('08'))) return true;
  if (typeof e.message === 'string' && PG_MESSAGES.some((m) => m.test(e.message as string)))
    return true;
  // TypeORM's QueryFailedError keeps pg's error as driverError; AggregateError (a failed
  // connect to several addresses) keeps them in errors.
  if (isDatabaseUnavailable(e.driverError, depth + 1)) return true;
  if (isDatabaseUnavailable(e.cause, depth + 1)) return true;
  if (Array.isArray(e.errors)) return e.errors.some((x) => isDatabaseUnavailable(x, depth + 1));
  return false;
}
