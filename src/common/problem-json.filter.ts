import { ArgumentsHost, Catch, type ExceptionFilter, HttpException, Inject } from '@nestjs/common';
import type { Request, Response } from 'express';
import type { Logger } from 'pino';
import { AppError } from './app-error';
import { isDatabaseUnavailable } from './database-unavailable';
import { sendProblem } from './problem-body';
import { LOGGER } from './tokens';

/** RFC 9457 problem details for every error of our own REST API. */
@Catch()
export class ProblemJsonFilter implements ExceptionFilter {
  constructor(@Inject(LOGGER) private readonly logger: Logger) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const ctx = host.switchToHttp();
    const res = ctx.getResponse<Response>();
    const req = ctx.getRequest<Request>();
    let status = 500;
    let title = 'Internal Server Error';
    let detail = 'an unexpected error occurred; see the service log with this correlation id';
    let extra: Record<string, unknown> = {};
    if (exception instanceof AppError) {
      status = exception.httpStatus;
      title = exception.code;
      detail = exception.message;
      extra = exception.details ?? {};
    } else if (exception instanceof HttpException) {
      status = exception.getStatus();
      const body = exception.getResponse();
      title = exception.name.replace(/Exception$/, '');
      detail =
        typeof body === 'string'
          ? body
          : Array.isArray((body as { message?: unknown }).message)
            ? (body as { message: string[] }).message.join('; ')
            : String((body as { message?: unknown }).message ?? exception.message);
    } else if (isDatabaseUnavailable(exception)) {
      // Temporary: nothing was committed, the caller retries.
      status = 503;
      title = 'unavailable';
      detail = 'the database is unavailable; nothing was stored, please retry';
      res.setHeader('Retry-After', '5');
    }
    if (status >= 500) {
      this.logger.error({ err: exception, path: req.route?.path ?? 'unmatched' }, 'request failed');
    }
    if (status === 401) res.setHeader('WWW-Authenticate', 'Bearer realm="imaging-ai-adapter"');
    sendProblem(req, res, status, title, detail, extra);
  }
}
