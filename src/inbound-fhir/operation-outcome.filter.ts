import { type ArgumentsHost, Catch, HttpException } from '@nestjs/common';
import type { OperationOutcomeIssue } from '@medplum/fhirtypes';
import { AppError } from '../common/app-error';
import { isDatabaseUnavailable } from '../common/database-unavailable';
import { ErrorFilter } from '../common/error.filter';
import { currentCorrelationId } from '../observability/logger';
import { FhirError, operationOutcome } from './fhir.error';
import { countFhirAnswer } from './fhir.metrics';

/**
 * Every error on /fhir answered as an OperationOutcome (R4 operationoutcome.html, http.html
 * status codes), including the bearer guard's 401/403: bound to the FHIR controllers, so it
 * wins over the app-wide problem-JSON filter.
 */
@Catch()
export class OperationOutcomeFilter extends ErrorFilter {
  catch(exception: unknown, host: ArgumentsHost): void {
    const { req, res } = this.http(host);
    let status = 500;
    let issues: OperationOutcomeIssue[];
    let headers: Record<string, string> = {};
    if (exception instanceof FhirError) {
      status = exception.httpStatus;
      issues = exception.issues;
      headers = exception.headers;
    } else if (exception instanceof AppError) {
      status = exception.httpStatus;
      const code: OperationOutcomeIssue['code'] =
        exception.code === 'unauthorized'
          ? 'login'
          : exception.code === 'forbidden'
            ? 'forbidden'
            : 'processing';
      issues = [{ severity: 'error', code, diagnostics: exception.message }];
    } else if (exception instanceof HttpException) {
      status = exception.getStatus();
      issues = [
        {
          severity: 'error',
          code: status === 404 ? 'not-found' : 'processing',
          diagnostics: exception.message,
        },
      ];
    } else if (isDatabaseUnavailable(exception)) {
      // Nothing was committed: a temporary refusal the sender retries (R4 http.html: 503),
      // never a 500 that an EHR may treat as final.
      status = 503;
      headers = { 'Retry-After': '5' };
      issues = [
        {
          severity: 'error',
          code: 'transient',
          diagnostics:
            'the request could not be stored now (database unavailable); nothing was kept, please retry',
        },
      ];
    } else {
      issues = [
        {
          severity: 'fatal',
          code: 'exception',
          diagnostics: `an unexpected error occurred; see the service log with correlation id ${currentCorrelationId() ?? '(none)'}`,
        },
      ];
    }
    if (exception instanceof FhirError && exception.code === 'upstream-unavailable') {
      // Its words name what was read from the EHR: a subject `Patient/<id>`, a conditional
      // reference's `identifier=<system>|<MRN>`. Logged whole (message, stack, issues), the
      // patient's identifiers were in the service log (DESIGN §5: no PHI in logs). The sender
      // has them in its answer; the log says where (element paths), not what.
      this.logger.error(
        {
          path: req.route?.path ?? 'unmatched',
          status,
          code: exception.code,
          elements: exception.issues.flatMap((i) => i.expression ?? []),
        },
        'FHIR request refused: the EHR FHIR server could not be read, or refused our read',
      );
    } else {
      this.logAndChallenge(status, exception, req, res, 'FHIR request failed');
    }
    for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
    if (res.headersSent) return;
    countFhirAnswer(res, status);
    const accept = `${req.headers.accept ?? ''} ${typeof req.query?._format === 'string' ? req.query._format : ''}`;
    const type =
      /(^|[\s,])application\/json/.test(accept) && !/fhir\+json/.test(accept)
        ? 'application/json'
        : 'application/fhir+json';
    res
      .status(status)
      .type(`${type}; charset=utf-8`)
      .send(JSON.stringify(operationOutcome(issues)));
  }
}
