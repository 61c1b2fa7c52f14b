import type { Request, Response } from 'express';
import { currentCorrelationId } from '../observability/logger';

export const PROBLEM_JSON = 'application/problem+json';

/** An RFC 9457 problem details body, with the request path and the correlation id. */
export function problemBody(
  req: Pick<Request, 'originalUrl'>,
  status: number,
  title: string,
  detail: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    type: 'about:blank',
    title,
    status,
    detail,
    instance: req.originalUrl?.split('?')[0],
    correlationId: currentCorrelationId(),
    ...extra,
  };
}

/** Sends a problem details body (RFC 9457) with its media type. */
export function sendProblem(
  req: Pick<Request, 'originalUrl'>,
  res: Response,
  status: number,
  title: string,
  detail: string,
  extra: Record<string, unknown> = {},
): void {
  res
    .status(status)
    .type(PROBLEM_JSON)
    .send(JSON.stringify(problemBody(req, status, title, detail, extra)));
}
