import type { IncomingMessage } from 'node:http';

const STALLED = Symbol('bodyStalledSeconds');

type Marked = IncomingMessage & { [STALLED]?: number };

/**
 * A request body that stopped arriving: no byte for HTTP_BODY_STALL_SECONDS while the rest
 * was still due. Each front door answers it 408 in its own form (problem JSON, OperationOutcome)
 * and closes the connection; the FHIR front door keeps the body's head for the audit log.
 */
export class BodyStallError extends Error {
  constructor(readonly seconds: number) {
    super(`the request body stopped arriving: no byte for ${seconds} s (HTTP_BODY_STALL_SECONDS)`);
    this.name = 'BodyStallError';
  }
}

/**
 * Marks the request's body as stalled and ends its stream, so that a reader waiting for the
 * next chunk returns now (and must ask `bodyStalledSeconds` before using what it read). The
 * socket is left open for the answer, which closes it (Connection: close).
 */
export function markBodyStalled(req: IncomingMessage, seconds: number): void {
  const marked = req as Marked;
  if (marked[STALLED] !== undefined || req.complete || req.destroyed) return;
  marked[STALLED] = seconds;
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

/** The stall bound (seconds) when this request's body stalled, else undefined. */
export function bodyStalledSeconds(req: IncomingMessage): number | undefined {
  return (req as Marked)[STALLED];
}

/** Passes the chunks of `source` on; ends by throwing BodyStallError when the body stalled. */
export async function* throwingOnStall<T>(
  req: IncomingMessage,
  source: AsyncIterable<T>,
): AsyncGenerator<T> {
  yield* source;
  const seconds = bodyStalledSeconds(req);
  if (seconds !== undefined) throw new BodyStallError(seconds);
}
