import type { z } from 'zod';

/**
 * One sentence for each kind of refused audit parameter: which parameter, what was wrong,
 * what is allowed (`state must be one of: received, placed, …`, `accession is longer than
 * 4096 characters`, `limit must be a whole number`). Used by every audit DTO through
 * parseInput, as zod's per-parse error map: a schema's own message (`must not contain a NUL
 * character`, `a reason is required`) still wins. The value sent is never repeated (an
 * accession or patient ID is PHI, and a 4 KB value would fill the answer). Before, the API
 * answered in zod's default words: `state: Invalid option: expected one of "received"|…`,
 * `accession: Too big: expected string to have <=4096 characters`, `limit: Invalid input:
 * expected int, received number`.
 */
export function issueSentence(issue: z.core.$ZodRawIssue): string {
  const name = issue.path && issue.path.length > 0 ? issue.path.join('.') : 'the request';
  switch (issue.code) {
    case 'invalid_value':
      return `${name} must be one of: ${issue.values
        .filter((v) => v !== '')
        .map(String)
        .join(', ')}`;
    case 'too_big':
      return issue.origin === 'string'
        ? `${name} is longer than ${issue.maximum} characters`
        : `${name} must be at most ${issue.maximum}`;
    case 'too_small':
      if (issue.origin !== 'string') return `${name} must be at least ${issue.minimum}`;
      return Number(issue.minimum) <= 1
        ? `${name} must not be empty`
        : `${name} is shorter than ${issue.minimum} characters`;
    case 'invalid_type':
      if (issue.expected === 'int') return `${name} must be a whole number`;
      if (issue.expected === 'number') return `${name} must be a number`;
      if (issue.expected === 'string') return `${name} must be one text value`;
      return `${name} must be a ${issue.expected}`;
    case 'invalid_format':
      return `${name} is not a valid ${issue.format}`;
    case 'not_multiple_of':
      return `${name} must be a multiple of ${issue.divisor}`;
    case 'unrecognized_keys':
      return `unknown parameter ${issue.keys.join(', ')}`;
    default:
      return `${name} is not valid`;
  }
}

/** The detail of a refusal: each sentence once, schema messages (`must …`) after the name. */
export function refusalDetail(issue: z.core.$ZodIssue): string {
  const name = issue.path.join('.');
  if (name === '' || issue.message.startsWith(`${name} `)) return issue.message;
  return `${name}: ${issue.message}`;
}
