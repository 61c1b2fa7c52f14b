import { maskIdentifiers, maskLeaves, maskValue } from './phi-masking.values';

/** FHIR resources that describe a person: their `name` and `identifier` are PHI (FHIR R4 Patient, RelatedPerson, Person). */
export const PERSON_RESOURCES = new Set(['Patient', 'RelatedPerson', 'Person']);

/**
 * FHIR elements (R4) whose string values carry no PHI and are shown as they are: structure,
 * codes, statuses, times and references. `display` is shown in a Coding only, `text` in a
 * CodeableConcept only; narrative (`text.div`), extensions, notes, instructions, names,
 * addresses and every element not listed are hidden. Identifiers of a person resource keep
 * their system and type; those of an order (accession, placer number) stay readable.
 */
const FHIR_VISIBLE = new Set([
  'resourceType',
  'id',
  'meta',
  'versionId',
  'lastUpdated',
  'profile',
  'security',
  'tag',
  'status',
  'intent',
  'priority',
  'category',
  'code',
  'coding',
  'system',
  'version',
  'userSelected',
  'reference',
  'type',
  'use',
  'authoredOn',
  'occurrenceDateTime',
  'occurrencePeriod',
  'start',
  'end',
  'gender',
  'active',
  'deceasedBoolean',
  'fullUrl',
  'request',
  'method',
  'url',
  'entry',
  'resource',
  'contained',
  'link',
  'relation',
  'timestamp',
  'total',
  'basedOn',
  'replaces',
  'requisition',
  'identifier',
  'value',
  'assigner',
  'subject',
  'encounter',
  'requester',
  'performer',
  'performerType',
  'supportingInfo',
  'reasonCode',
  'reasonReference',
  'bodySite',
  'orderDetail',
  'quantity',
  'unit',
  'series',
  'modality',
  'uid',
  'numberOfSeries',
  'numberOfInstances',
  'started',
  'focus',
  'parameter',
  'name',
  'part',
  'valueCode',
  'valueCoding',
  'valueReference',
  'valueCanonical',
  'valueUri',
  'valueUrl',
  'valueInstant',
  'valueDateTime',
  'valueInteger',
  'valueUnsignedInt',
  'valuePositiveInt',
  'valueBoolean',
  'valueId',
  'valueIdentifier',
  'issue',
  'severity',
  'expression',
  'location',
  'businessStatus',
  'statusReason',
  'effectiveDateTime',
  'issued',
  'conclusionCode',
  'result',
  'presentedForm',
  'contentType',
  'output',
  'input',
  'for',
  'owner',
  'lastModified',
  'executionPeriod',
  'channel',
  'endpoint',
  'payload',
  'criteria',
  'topic',
]);
/** Keys that are PHI or free text in any FHIR element, whatever the allow-list says. */
const FHIR_HIDDEN = new Set([
  'div',
  'extension',
  'modifierExtension',
  'note',
  'patientInstruction',
  'comment',
  'description',
  'valueString',
  'valueMarkdown',
  'address',
  'telecom',
  'photo',
  'maritalStatus',
  'contact',
  'communication',
  'data',
  'conclusion',
  'diagnostics',
  'details',
]);

/** A FHIR resource or element masked by FHIR_VISIBLE and FHIR_HIDDEN; `person`: inside a person resource. */
export function maskFhir(obj: Record<string, unknown>, person: boolean): Record<string, unknown> {
  const isPerson =
    person || (typeof obj.resourceType === 'string' && PERSON_RESOURCES.has(obj.resourceType));
  const isCoding = 'code' in obj || 'system' in obj;
  const isConcept = Array.isArray(obj.coding);
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(obj)) {
    if (FHIR_HIDDEN.has(key)) out[key] = maskLeaves(v, 'full', ['url', 'status']);
    else if (key === 'birthDate' || key === 'deceasedDateTime') out[key] = maskLeaves(v, 'date');
    else if (key === 'text')
      out[key] =
        typeof v === 'string' && isConcept
          ? v
          : typeof v === 'string'
            ? maskValue('full', v)
            : maskLeaves(v, 'full', ['status']);
    else if (key === 'display')
      out[key] = isCoding && typeof v === 'string' ? v : maskLeaves(v, isPerson ? 'name' : 'full');
    else if (isPerson && key === 'name') out[key] = maskLeaves(v, 'name', ['use', 'period']);
    else if (isPerson && key === 'identifier') out[key] = maskIdentifiers(v);
    // the patient a resource is about: subject, patient, and Task.for (our Task names the
    // patient by identifier there)
    else if (key === 'subject' || key === 'patient' || key === 'for')
      out[key] = maskFhirValue(v, true);
    else if (FHIR_VISIBLE.has(key)) out[key] = maskFhirValue(v, isPerson);
    else out[key] = maskLeaves(v, 'full');
  }
  return out;
}

function maskFhirValue(v: unknown, person: boolean): unknown {
  if (Array.isArray(v)) return v.map((x) => maskFhirValue(x, person));
  if (v === null || typeof v !== 'object') return v;
  const obj = v as Record<string, unknown>;
  return maskFhir(obj, person && typeof obj.resourceType !== 'string');
}
