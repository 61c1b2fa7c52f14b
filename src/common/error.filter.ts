import { type ArgumentsHost, type ExceptionFilter, Inject } from '@nestjs/common';
import type { Request, Response } from 'express';
import type { Logger } from 'pino';
import { LOGGER } from './tokens';

/** What a 401 answers with (RFC 6750): our callers authenticate with a bearer token. */
export const BEARER_CHALLENGE = 'Bearer realm="imaging-ai-adapter"';

/**
 * What our error filters (problem JSON, FHIR OperationOutcome, audit page) share: the logger,
 * the request and response of the failed call, a server-side failure logged with its route
 * (not its URL, which may carry identifiers), and the bearer challenge on 401.
 */
export abstract class ErrorFilter implements ExceptionFilter {
  constructor(@Inject(LOGGER) protected readonly logger: Logger) {}

  abstract catch(exception: unknown, host: ArgumentsHost): void;

  protected http<R extends Request = Request>(host: ArgumentsHost): { req: R; res: Response } {
    const ctx = host.switchToHttp();
    return { req: ctx.getRequest<R>(), res: ctx.getResponse<Response>() };
  }

  /** Logs a 5xx as `message` and challenges a 401; the filter then sends its answer. */
  protected logAndChallenge(
    status: number,
    exception: unknown,
    req: Request,
    res: Response,
    message: string,
  ): void {
    const path = req.route?.path ?? 'unmatched';
    if (clientHungUp(exception, req)) {
      // The client's doing (its own timeout, a proxy restarting), not a failure of ours.
      this.logger.info({ path }, 'the client closed the connection before its request was read');
    } else if (status >= 500) {
      this.logger.error({ err: exception, path }, message);
    }
    if (status === 401) res.setHeader('WWW-Authenticate', BEARER_CHALLENGE);
    // Refused while its body is still coming (a 401 before a 10 GB STOW-RS push, a 403, a 415):
    // the connection closes once answered. Kept open, Node read and dropped the rest of the body
    // however long it was (or endless, chunked), for a client nobody had authenticated.
    if (bodyStillDue(req) && !res.headersSent) res.setHeader('Connection', 'close');
  }
}

/** The request stream's `aborted` error: the client closed the connection in the middle of it. */
function clientHungUp(exception: unknown, req: Request): boolean {
  const e = exception as { code?: unknown; message?: unknown } | null;
  return (
    typeof e === 'object' &&
    e !== null &&
    e.code === 'ECONNRESET' &&
    e.message === 'aborted' &&
    !req.complete
  );
}

/**
 * Bytes of the request's body have still to arrive: not complete, and (with a Content-Length)
 * fewer held than declared. A small body that came whole with its headers may be held unread
 * without the request counting as complete yet: its connection is kept.
 */
function bodyStillDue(req: Request): boolean {
  if (req.complete) return false;
  const declared = Number(req.headers['content-length']);
  return !(Number.isFinite(declared) && req.readableLength >= declared);
}
