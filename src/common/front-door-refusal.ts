import type { Request, Response } from 'express';
import { sendProblem } from './problem-body';

/**
 * A refusal made at the front door, before any route (a Host that is no host, a transfer
 * coding we do not decode), answered as the route would have: an OperationOutcome under /fhir
 * (R4 http.html), problem JSON elsewhere. The connection closes after it.
 */
export function refuseAtDoor(
  req: Request,
  res: Response,
  status: number,
  title: string,
  detail: string,
  issueCode: 'invalid' | 'not-supported',
): void {
  res.setHeader('Connection', 'close');
  // (case-insensitive, as the routing is)
  if (/^\/fhir(\/|$)/i.test(req.path)) {
    res
      .status(status)
      .type('application/fhir+json; charset=utf-8')
      .send(
        JSON.stringify({
          resourceType: 'OperationOutcome',
          issue: [{ severity: 'error', code: issueCode, diagnostics: detail }],
        }),
      );
    return;
  }
  sendProblem(req, res, status, title, detail);
}
