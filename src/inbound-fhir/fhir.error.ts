import type { OperationOutcome, OperationOutcomeIssue } from '@medplum/fhirtypes';

/**
 * The one error class of the FHIR front door. Each code has one HTTP status (R4 http.html
 * and operationoutcome.html); the OperationOutcome filter turns it into the answer.
 */
export type FhirErrorCode =
  | 'unparseable' // 400: not JSON, or not a resource
  | 'bad-request' // 400: a parameter or header we cannot honour
  | 'unauthorized' // 401
  | 'forbidden' // 403
  | 'not-found' // 404: unknown resource type or id
  | 'method-not-allowed' // 405: interaction not supported on this type
  | 'not-acceptable' // 406: _format / Accept we do not serve
  | 'conflict' // 409
  | 'precondition-failed' // 412: If-Match mismatch
  | 'request-timeout' // 408: the body stopped arriving
  | 'too-large' // 413
  | 'unsupported-media-type' // 415
  | 'invalid' // 422: structure or business rule
  | 'upstream-unavailable' // 503: the EHR could not be read
  | 'internal'; // 500

const HTTP_STATUS: Record<FhirErrorCode, number> = {
  unparseable: 400,
  'bad-request': 400,
  unauthorized: 401,
  forbidden: 403,
  'not-found': 404,
  'method-not-allowed': 405,
  'not-acceptable': 406,
  conflict: 409,
  'precondition-failed': 412,
  'request-timeout': 408,
  'too-large': 413,
  'unsupported-media-type': 415,
  invalid: 422,
  'upstream-unavailable': 503,
  internal: 500,
};

/** R4 issue-type code used when an error carries no issues of its own. */
const ISSUE_TYPE: Record<FhirErrorCode, OperationOutcomeIssue['code']> = {
  unparseable: 'structure',
  'bad-request': 'invalid',
  unauthorized: 'login',
  forbidden: 'forbidden',
  'not-found': 'not-found',
  'method-not-allowed': 'not-supported',
  'not-acceptable': 'not-supported',
  conflict: 'conflict',
  'precondition-failed': 'conflict',
  'request-timeout': 'timeout',
  'too-large': 'too-costly',
  'unsupported-media-type': 'not-supported',
  invalid: 'invalid',
  'upstream-unavailable': 'transient',
  internal: 'exception',
};

export class FhirError extends Error {
  readonly issues: OperationOutcomeIssue[];

  constructor(
    readonly code: FhirErrorCode,
    message: string,
    issues?: OperationOutcomeIssue[],
    /** Extra response headers (e.g. Allow for 405). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'FhirError';
    this.issues =
      issues && issues.length > 0
        ? issues
        : [{ severity: 'error', code: ISSUE_TYPE[code], diagnostics: message }];
  }

  get httpStatus(): number {
    return HTTP_STATUS[this.code];
  }

  toOperationOutcome(): OperationOutcome {
    return operationOutcome(this.issues);
  }
}

export function operationOutcome(issues: OperationOutcomeIssue[]): OperationOutcome {
  return { resourceType: 'OperationOutcome', issue: issues };
}

export function httpStatusOf(code: FhirErrorCode): number {
  return HTTP_STATUS[code];
}
