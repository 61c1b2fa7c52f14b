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
    if (status >= 500) {
      this.logger.error({ err: exception, path: req.route?.path ?? 'unmatched' }, message);
    }
    if (status === 401) res.setHeader('WWW-Authenticate', BEARER_CHALLENGE);
  }
}
