import { ArgumentsHost, Catch, HttpException } from '@nestjs/common';
import { AppError } from './app-error';
import { isDatabaseUnavailable } from './database-unavailable';
import { ErrorFilter } from './error.filter';
import { isStorageUnavailable } from './storage-unavailable';
import { sendProblem } from './problem-body';

/** RFC 9457 problem details for every error of our own REST API. */
@Catch()
export class ProblemJsonFilter extends ErrorFilter {
  catch(exception: unknown, host: ArgumentsHost): void {
    const { req, res } = this.http(host);
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
    } else if (isStorageUnavailable(exception)) {
      // Temporary too: the partial files are removed, the sender retries once there is room.
      status = 503;
      title = 'unavailable';
      detail =
        'the study storage (DATA_DIR) is full or read-only; nothing was stored, please retry later';
      res.setHeader('Retry-After', '60');
    }
    this.logAndChallenge(status, exception, req, res, 'request failed');
    sendProblem(req, res, status, title, detail, extra);
  }
}
