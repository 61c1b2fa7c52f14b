/**
 * What an EHR's refusal of our conditional update (R4 http.html#cond-update) means, and whether
 * a retry can help: a declarative reading of R4 http.html (status codes of create/update) and
 * the issue types of R4 valueset-issue-type.
 */

/**
 * Issue types under `transient` (R4 valueset-issue-type: "the processing may succeed if
 * retried"): lock-error, no-store, exception, timeout, incomplete, throttled.
 */
export const TRANSIENT_ISSUE_TYPES: readonly string[] = [
  'transient',
  'lock-error',
  'no-store',
  'exception',
  'timeout',
  'incomplete',
  'throttled',
];

/**
 * 4xx statuses a retry can help (R4 http.html#update, #concurrency): 409 is a version conflict
 * (two writes of one resource met, as HAPI answers concurrent updates); another write wins and
 * ours, a conditional update without If-Match, then goes through.
 */
export const RETRIED_CLIENT_STATUSES: readonly number[] = [409];

/** What the analyst reads after "the EHR answered <status> to <type>" (the type is filled in). */
export const REFUSAL_MEANINGS: Readonly<Record<number, (type: string) => string>> = {
  400: () => 'the EHR could not read or validate the resource',
  404: () => 'the EHR has no such endpoint or does not create by conditional update',
  405: () => 'the EHR does not allow a conditional update here (its CapabilityStatement)',
  409: () => 'a version conflict (another write of the same resource)',
  410: (type) => `the ${type} with our identifier was deleted in the EHR`,
  412: (type) =>
    `more than one ${type} matches our identifier (R4 conditional update); the EHR's copies are to be merged before a replay`,
  422: () => "the EHR's rules refused the resource",
};

/** Whether an OperationOutcome's error issues say that a retry may succeed. */
export function issuesSayTransient(issues: unknown): boolean {
  if (!Array.isArray(issues)) return false;
  const errors = issues.filter(
    (i: { severity?: unknown }) => i?.severity === 'error' || i?.severity === 'fatal',
  ) as Array<{ code?: unknown }>;
  return (
    errors.length > 0 &&
    errors.every((i) => typeof i.code === 'string' && TRANSIENT_ISSUE_TYPES.includes(i.code))
  );
}

/** The issue types of the error issues, for the one-line answer (bounded, FHIR codes only). */
export function errorIssueTypes(issues: unknown): string[] {
  if (!Array.isArray(issues)) return [];
  const codes = issues
    .filter((i: { severity?: unknown }) => i?.severity === 'error' || i?.severity === 'fatal')
    .map((i: { code?: unknown }) => i.code)
    .filter((c): c is string => typeof c === 'string' && /^[a-z][a-z-]{0,31}$/.test(c));
  return [...new Set(codes)].slice(0, 3);
}
