import type { IncomingMessage } from 'node:http';

const STALLED = Symbol('bodyStallReason');

type Marked = IncomingMessage & { [STALLED]?: string };

/**
 * A request body that stopped arriving (no byte for HTTP_BODY_STALL_SECONDS while the rest was
 * still due) or arrived too slowly (under HTTP_BODY_MIN_BYTES_PER_SECOND). Each front door
 * answers it 408 in its own form (problem JSON, OperationOutcome) and closes the connection; the
 * FHIR front door keeps the body's head for the audit log.
 */
export class BodyStallError extends Error {
  /** `reason`: what the body did, e.g. `stopped arriving: no byte for 30 s (HTTP_BODY_STALL_SECONDS)`. */
  constructor(readonly reason: string) {
    super(`the request body ${reason}`);
    this.name = 'BodyStallError';
  }
}

/** The reason of a body that got no byte for `seconds`. */
export function silentFor(seconds: number): string {
  return `stopped arriving: no byte for ${seconds} s (HTTP_BODY_STALL_SECONDS)`;
}

/**
 * Marks the request's body as stalled and ends its stream, so that a reader waiting for the
 * next chunk returns now (and must ask `bodyStalledSeconds` before using what it read). The
 * socket is left open for the answer, which closes it (Connection: close).
 */
export function markBodyStalled(req: IncomingMessage, reason: string): void {
  const marked = req as Marked;
  if (marked[STALLED] !== undefined || req.complete || req.destroyed) return;
  marked[STALLED] = reason;
  // Taken as complete: an ended request destroys itself, and one with its body incomplete its
  // socket too (the 408 could not be written); and readers that wait for the request to be
  // complete before answering (express's body parsers, through on-finished) answer now. The
  // answer closes the connection.
  req.complete = true;
  // Bytes the client sends after all would be pushed after the end: an 'error' nobody else
  // listens for any more.
  req.on('error', () => undefined);
  req.push(null);
}

/** Why this request's body was cut (see BodyStallError), else undefined. */
export function bodyStallReason(req: IncomingMessage): string | undefined {
  return (req as Marked)[STALLED];
}

/** Passes the chunks of `source` on; ends by throwing BodyStallError when the body stalled. */
export async function* throwingOnStall<T>(
  req: IncomingMessage,
  source: AsyncIterable<T>,
): AsyncGenerator<T> {
  yield* source;
  const reason = bodyStallReason(req);
  if (reason !== undefined) throw new BodyStallError(reason);
}
