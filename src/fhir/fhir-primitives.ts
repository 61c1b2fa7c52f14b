import {
  capitalize,
  crawlTypedValue,
  toTypedValue,
  type InternalTypeSchema,
  type TypedValueWithPath,
} from '@medplum/core';
import type { OperationOutcomeIssue, Resource } from '@medplum/fhirtypes';
import { walkJsonKeys } from '../common/json-walk';
import { narrativeProblem } from './fhir-narrative';

/**
 * The R4 primitive rules @medplum/core's validator leaves out (it is lenient by design):
 *
 * - `dateTime`: R4 datatypes.html#dateTime "If hours and minutes are specified, a time zone
 *   SHALL be populated", and seconds are required with a time. The validator takes
 *   `2013-05-08T09`, `2013-05-08T09:33:27` (no zone) and `2013-05-08+01:00` (a zone on a
 *   date), which then became an order's requestedAt: read in the server's own zone, or kept
 *   as sent and written back into the DiagnosticReport's effectiveDateTime as an invalid value.
 * - `date`: no time, no zone (datatypes.html#date).
 * - choice elements: one type only (`occurrenceDateTime` or `occurrencePeriod`, not both).
 * - `Narrative.div`: an XHTML div without scripts, event attributes, forms or frames
 *   (fhir-narrative.ts, R4 txt-1).
 * - an empty string (`"value": ""`): R4 json.html, a property is absent or has content.
 * - `Resource.id`: the type `id`, `[A-Za-z0-9\-\.]{1,64}` (datatypes.html#id); the
 *   StructureDefinitions type it as a FHIRPath String, so it was never checked (a contained
 *   `p1/../x` was served back as it came).
 *
 * The regular expressions are those of the R4 specification, anchored.
 */
const R4_REGEX: Record<string, RegExp> = {
  date: /^([0-9]([0-9]([0-9][1-9]|[1-9]0)|[1-9]00)|[1-9]000)(-(0[1-9]|1[0-2])(-(0[1-9]|[1-2][0-9]|3[0-1]))?)?$/,
  dateTime:
    /^([0-9]([0-9]([0-9][1-9]|[1-9]0)|[1-9]00)|[1-9]000)(-(0[1-9]|1[0-2])(-(0[1-9]|[1-2][0-9]|3[0-1])(T([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?(Z|(\+|-)((0[0-9]|1[0-3]):[0-5][0-9]|14:00)))?)?)?$/,
  instant:
    /^([0-9]([0-9]([0-9][1-9]|[1-9]0)|[1-9]00)|[1-9]000)-(0[1-9]|1[0-2])-(0[1-9]|[1-2][0-9]|3[0-1])T([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?(Z|(\+|-)((0[0-9]|1[0-3]):[0-5][0-9]|14:00))$/,
};
export const FHIR_ID = /^[A-Za-z0-9\-.]{1,64}$/;

const HINT: Record<string, string> = {
  date: 'a date is YYYY, YYYY-MM or YYYY-MM-DD, without a time or zone',
  dateTime:
    'a dateTime with a time needs seconds and a time zone (YYYY-MM-DDThh:mm:ss[.f](Z|+hh:mm))',
  instant: 'an instant is YYYY-MM-DDThh:mm:ss[.f] with a time zone',
};

function invalid(path: string, type: string, value: unknown, hint: string): OperationOutcomeIssue {
  return {
    severity: 'error',
    code: 'value',
    details: { text: `Invalid ${type} value` },
    diagnostics: `${path}: ${JSON.stringify(value).slice(0, 80)} is not a valid R4 ${type}: ${hint}`,
    expression: [path],
  };
}

/**
 * A choice element (`occurrence[x]`, `value[x]`, `deceased[x]`) takes one type (R4
 * formats.html#choice): `occurrenceDateTime` beside `occurrencePeriod` has no one meaning, like
 * an element given twice. The validator took both and the mapping read the first it looked at.
 */
function choiceIssues(
  value: TypedValueWithPath,
  schema: InternalTypeSchema,
): OperationOutcomeIssue[] {
  const obj = value.value as Record<string, unknown> | null;
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) return [];
  const issues: OperationOutcomeIssue[] = [];
  const order = Object.keys(obj).map((k) => k.replace(/^_/, ''));
  for (const [name, element] of Object.entries(schema.elements)) {
    if (!name.endsWith('[x]')) continue;
    const base = name.slice(0, -3);
    const given = element.type
      .map((t) => `${base}${capitalize(t.code)}`)
      .filter((key) => obj[key] !== undefined || obj[`_${key}`] !== undefined)
      // In the order the body wrote them: the expression names the one given second.
      .sort((a, b) => order.indexOf(a) - order.indexOf(b));
    if (given.length > 1) {
      issues.push({
        severity: 'error',
        code: 'structure',
        details: { text: 'a choice element given in more than one type' },
        diagnostics: `${value.path}: ${given.join(' and ')} are the one element ${base}[x]; give only one (R4 formats.html#choice)`,
        expression: [`${value.path}.${given[1]}`],
      });
    }
  }
  return issues;
}

/**
 * The issues of a resource the structure validator already accepted (so every array is an
 * array and every object an object): one per date, dateTime or instant that breaks the R4
 * pattern and per resource id (the resource itself, contained ones, Bundle entries) that is
 * not a FHIR id.
 */
export function primitiveIssues(resource: Resource): OperationOutcomeIssue[] {
  const issues: OperationOutcomeIssue[] = [];
  const checkId = (r: unknown, path: string) => {
    const id = (r as { id?: unknown } | undefined)?.id;
    if (id !== undefined && (typeof id !== 'string' || !FHIR_ID.test(id))) {
      issues.push(invalid(`${path}.id`, 'id', id, 'an id is 1-64 of A-Z a-z 0-9 - .'));
    }
  };
  checkId(resource, resource.resourceType);
  // R4 json.html: a property is absent or has content. The structure validator takes "" as
  // absent (its walk below skips it too), and the resource was stored and served back with
  // "value": "".
  const empty = (path: string) =>
    issues.push(invalid(path, 'string', '', 'an element is left out or has content, never ""'));
  walkJsonKeys(resource, resource.resourceType, (_key, value, path) => {
    if (value === '') empty(path);
    else if (Array.isArray(value)) value.forEach((v, i) => v === '' && empty(`${path}[${i}]`));
  });
  crawlTypedValue(
    toTypedValue(resource),
    {
      onEnterResource: (_path, value) => {
        if (value.value !== resource) checkId(value.value, value.path);
      },
      onEnterObject: (_path, value, schema) => {
        issues.push(...choiceIssues(value, schema));
      },
      visitProperty: (_parent, _key, _path, propertyValues) => {
        for (const v of propertyValues.flat()) {
          if (v?.type === 'xhtml' && typeof v.value === 'string') {
            const problem = narrativeProblem(v.value);
            if (problem) {
              issues.push({
                severity: 'error',
                code: 'invariant',
                details: { text: 'txt-1: the narrative holds content R4 does not allow' },
                diagnostics: `${v.path}: ${problem}`,
                expression: [v.path],
              });
            }
            continue;
          }
          const pattern = v && R4_REGEX[v.type];
          if (pattern && typeof v.value === 'string' && !pattern.test(v.value)) {
            issues.push(invalid(v.path, v.type, v.value, HINT[v.type]!));
          }
        }
      },
    },
    { skipMissingProperties: true },
  );
  return issues;
}
