import type { Resource } from '@medplum/fhirtypes';
import { walkJsonKeys } from '../common/json-walk';
import type { FhirMappingIssue } from './fhir-order.mapping';

/**
 * Modifier elements (FHIR R4 §1.11.5 "isModifier", §2.4.2 modifierExtension) change the
 * meaning of the element that holds them: a receiver that does not understand one must not
 * process the resource as if it were absent. The adapter understands the rows below and no
 * modifier extension at all; everything else is refused, never silently dropped.
 *
 * Declarative: per resource type, the modifier elements whose values make the resource
 * something the adapter must not act on (statuses are handled by the status/intent rules).
 */
interface ModifierRule {
  path: string;
  /** True when the element's value makes the resource unusable for an order. */
  refuses: (value: unknown) => boolean;
  diagnostics: string;
}

/** The modifier elements of every resource (R4 §2.4 Resource). */
const EVERY_RESOURCE: readonly ModifierRule[] = [
  {
    // R4 Resource.implicitRules (modifier): the resource was written under rules the receiver
    // must know to read it; one we do not know means we cannot safely act on it.
    path: 'implicitRules',
    refuses: (v) => v !== null && v !== '',
    diagnostics:
      'implicitRules names rules the resource was written under; the adapter knows none, so it cannot read the resource safely (FHIR R4 §2.4)',
  },
];

const MODIFIER_RULES: Readonly<Record<string, readonly ModifierRule[]>> = {
  ServiceRequest: [
    {
      // R4 ServiceRequest.doNotPerform: "the request is a negative one": do NOT perform.
      path: 'doNotPerform',
      refuses: (v) => v === true,
      diagnostics:
        'doNotPerform is true: the request asks that the procedure NOT be performed; it is not an order',
    },
  ],
  Patient: [
    {
      // R4 Patient.active (modifier): false means the record is not in use (e.g. merged away).
      path: 'active',
      refuses: (v) => v === false,
      diagnostics:
        'Patient.active is false: the patient record is not in use; order against the active record',
    },
    {
      // R4 Patient.link (modifier): "replaced-by" means another record is the one to use.
      path: 'link',
      refuses: (v) =>
        Array.isArray(v) && v.some((l) => (l as { type?: string })?.type === 'replaced-by'),
      diagnostics: 'Patient.link says the record is replaced by another: order against that record',
    },
  ],
  ImagingStudy: [
    {
      path: 'status',
      refuses: (v) => v === 'entered-in-error' || v === 'cancelled',
      diagnostics:
        'the ImagingStudy is entered-in-error or cancelled: it is not a study to analyse',
    },
  ],
  Practitioner: [],
  PractitionerRole: [],
  Parameters: [],
};

/**
 * Problems with the modifiers of one resource: every `modifierExtension` at any depth (none is
 * understood here), and the declared modifier values that forbid acting on it. `at` is the
 * resource's own path in the answer (e.g. `ServiceRequest`, `Bundle.entry[2].resource`).
 */
export function modifierIssues(resource: Resource, at: string): FhirMappingIssue[] {
  const issues: FhirMappingIssue[] = [];
  walkJsonKeys(resource, at, (key, inner, path, holder) => {
    if (key === 'modifierExtension' && Array.isArray(inner) && inner.length > 0) {
      const urls = inner
        .map((e) => (e as { url?: unknown })?.url)
        .filter((u): u is string => typeof u === 'string');
      issues.push({
        severity: 'error',
        code: 'not-supported',
        expression: path,
        diagnostics: `a modifier extension the adapter does not understand (${urls.join(', ') || 'no url'}) changes the meaning of ${holder}; refused rather than ignored (FHIR R4 §2.4.2)`,
      });
      return 'skip';
    }
    // Contained resources are checked as resources of their own below (their own rules).
    if (key === 'contained') return 'skip';
  });
  // own keys only: a resourceType `constructor` found Object's (not iterable: a 422 quoting it)
  const own = Object.hasOwn(MODIFIER_RULES, resource.resourceType)
    ? MODIFIER_RULES[resource.resourceType]!
    : [];
  for (const rule of [...EVERY_RESOURCE, ...own]) {
    const value = (resource as unknown as Record<string, unknown>)[rule.path];
    if (value !== undefined && rule.refuses(value)) {
      issues.push({
        severity: 'error',
        code: 'business-rule',
        expression: `${at}.${rule.path}`,
        diagnostics: rule.diagnostics,
      });
    }
  }
  for (const [i, inner] of ((resource as { contained?: Resource[] }).contained ?? []).entries()) {
    if (inner && typeof inner === 'object')
      issues.push(...modifierIssues(inner, `${at}.contained[${i}]`));
  }
  return issues;
}
