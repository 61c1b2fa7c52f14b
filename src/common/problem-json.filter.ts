import { ArgumentsHost, Catch, HttpException, NotFoundException } from '@nestjs/common';
import { allowedMethods } from './allowed-methods';
import { AppError } from './app-error';
import { bodyStallReason } from './body-stall';
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
    const stalled = bodyStallReason(req);
    if (stalled !== undefined) {
      // Whatever the reader made of a body cut short by its stall (a size mismatch, bad JSON,
      // a multipart without its end), the answer is the stall.
      status = 408;
      title = 'request_timeout';
      detail = `the request body ${stalled}; send it again`;
      res.setHeader('Connection', 'close');
    } else if (exception instanceof AppError) {
      status = exception.httpStatus;
      title = exception.code;
      detail = exception.message;
      extra = exception.details ?? {};
    } else if (exception instanceof NotFoundException && !req.route && allowedMethods(req).length) {
      // No route took the request, yet the path is ours under other methods (PUT on an order,
      // OPTIONS on an audit list): 405 with the methods it answers, not "Cannot PUT …" 404.
      const allow = allowedMethods(req).join(', ');
      status = 405;
      title = 'Method Not Allowed';
      detail = `${req.method} is not supported on ${req.path}: it answers ${allow}`;
      res.setHeader('Allow', allow);
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
    } else if (isUndecodableBody(exception)) {
      // A body that is not what its Content-Encoding says (plain JSON sent as gzip, gzip sent
      // as br): the parser's zlib error carries 400 but no type, and was a 500 "unexpected error".
      const coding = String(req.headers['content-encoding'] ?? '').slice(0, 40);
      status = 400;
      title = 'bad_request';
      detail = `the request body is not valid Content-Encoding ${coding} data (${exception.message}): send it uncompressed, or compressed as its Content-Encoding says`;
    } else if (isBodyParserRefusal(exception)) {
      // express's body parsers (the API's JSON limit, a charset they cannot read) refuse with
      // an http-errors error, not an HttpException: before, a body over 1 MiB was a 500.
      status = exception.status;
      title = exception.type.replace(/^entity\./, '').replace(/\W+/g, '_');
      detail =
        exception.type === 'entity.too.large' && typeof exception.limit === 'number'
          ? `the request body is larger than ${exception.limit} bytes`
          : exception.message;
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

/**
 * A client error of express's body parsers (body-parser's http-errors: `entity.too.large`
 * 413, `charset.unsupported` and `encoding.unsupported` 415, `entity.verify.failed` 403 …),
 * whose message is meant for the client (`expose`).
 */
function isBodyParserRefusal(
  error: unknown,
): error is Error & { status: number; type: string; limit?: number } {
  if (!(error instanceof Error)) return false;
  const e = error as Error & { status?: unknown; type?: unknown; expose?: unknown };
  return (
    typeof e.status === 'number' &&
    e.status >= 400 &&
    e.status < 500 &&
    e.expose === true &&
    typeof e.type === 'string'
  );
}

/**
 * The error express's body parsers pass on when the body does not decode as its
 * Content-Encoding says: zlib's own (`Z_DATA_ERROR`, `Z_BUF_ERROR`, brotli's `ERR_…`), wrapped
 * by http-errors as a 400 without a `type`.
 */
function isUndecodableBody(error: unknown): error is Error {
  if (!(error instanceof Error)) return false;
  const e = error as Error & { status?: unknown; type?: unknown; code?: unknown; errno?: unknown };
  return (
    e.status === 400 &&
    e.type === undefined &&
    typeof e.code === 'string' &&
    typeof e.errno === 'number' &&
    /^(Z_|ERR_)/.test(e.code)
  );
}
