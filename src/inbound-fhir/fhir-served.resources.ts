import { bundleLocalName, sameBundleName } from '../fhir/fhir-urn';
import type {
  Bundle,
  BundleEntry,
  CapabilityStatement,
  Identifier,
  OperationOutcomeIssue,
  Reference,
  Resource,
  ServiceRequest,
  Task,
} from '@medplum/fhirtypes';
import { reportIdentifier } from '../mappings/fhir-result.mapping';
import { deriveTaskStatus } from '../mappings/fhir-task.mapping';
import { CLINICAL_REPLACED } from '../mappings/local-end-reasons';
import { fhirString, fhirUri } from '../mappings/fhir-values';
import { primaryPatientId } from '../orders/order-intake.service';
import type { OrderForTask } from '../persistence/fhir-resource.repository';

/** Our identifier system for orders (the Task's and, as filler, the ServiceRequest's). */
export const ORDER_IDENTIFIER_SYSTEM = 'urn:imaging-ai-adapter:order';

/** Where EHRs POST Subscription notifications (R4 Subscriptions Backport rest-hook endpoint). */
export const NOTIFICATION_PATH = '/fhir/subscription-notifications';

/** The ServiceRequest as we serve it: our id and version (meta.source: where it lives). */
export function servedServiceRequest(
  sr: ServiceRequest,
  id: string,
  version: number,
  now: string,
  source?: string,
): ServiceRequest {
  return {
    ...sr,
    id,
    meta: {
      ...sr.meta,
      versionId: String(version),
      lastUpdated: now,
      ...(source !== undefined ? { source } : {}),
    },
  };
}

/** A relative literal reference (R4 references.html#literal): `Type/id`, optionally versioned. */
const RELATIVE_REFERENCE =
  /^[A-Z][A-Za-z]{1,63}\/[A-Za-z0-9\-.]{1,64}(\/_history\/[A-Za-z0-9\-.]{1,64})?$/;

/**
 * A ServiceRequest read from the EHR, as we serve it: its relative references made absolute on
 * the EHR's base (`source`: the request's URL there). A relative reference is relative to
 * the base it is read from (R4 references.html#literal); served as the EHR wrote it, a
 * reader of ours resolved `Patient/123` on our base, where no Patient is (405), or on
 * another FHIR server of its own, another patient. Contained (`#…`), absolute and `urn:`
 * references are left as they are.
 */
export function withReferencesOnSource(sr: ServiceRequest, source: string | null): ServiceRequest {
  const base = source
    ? /^(https?:\/\/.+)\/ServiceRequest\/[^/]+(\/_history\/[^/]+)?$/.exec(source)?.[1]
    : undefined;
  if (!base) return sr;
  const out = structuredClone(sr);
  eachReference(out, ['contained', 'meta', 'text'], (ref) => {
    if (typeof ref.reference === 'string' && RELATIVE_REFERENCE.test(ref.reference)) {
      ref.reference = `${base}/${ref.reference}`;
    }
  });
  return out;
}

/**
 * Calls `visit` with every object of `root` that may be a Reference, depth first without
 * recursion (a deeply nested resource cannot exhaust the stack), not looking into `skip` keys.
 */
function eachReference(
  root: unknown,
  skip: readonly string[],
  visit: (ref: Reference & Record<string, unknown>) => void,
): void {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const value = stack.pop();
    if (value === null || typeof value !== 'object') continue;
    if (Array.isArray(value)) {
      stack.push(...(value as unknown[]));
      continue;
    }
    visit(value as Reference & Record<string, unknown>);
    for (const [key, inner] of Object.entries(value)) {
      if (!skip.includes(key)) stack.push(inner);
    }
  }
}

/**
 * A transaction's ServiceRequest as we keep and serve it. A reference by `urn:uuid:` (or
 * `urn:oid:`) names another entry only inside that Bundle (R4 bundle.html#references), and the
 * server SHALL replace it with that entry's new location (R4 http.html#trules); it was kept, so
 * the served ServiceRequest named `urn:uuid:5cbc…` as its subject, resolvable nowhere. Now a
 * ServiceRequest created by the same transaction gets its location (`locations`: fullUrl, as
 * `bundleLocalName` spells it, →
 * `ServiceRequest/<id>`); a context entry (used, not stored here) becomes a logical reference
 * (R4 references.html#logical): its type, its business identifier (a Study Instance UID first,
 * then a record number), its display. Contained resources are left as sent.
 */
export function withBundleReferences(
  sr: ServiceRequest,
  entries: readonly BundleEntry[],
  locations: ReadonlyMap<string, string>,
): ServiceRequest {
  const out = structuredClone(sr);
  eachReference(out, ['contained'], (ref) => {
    if (typeof ref.reference === 'string' && /^urn:(uuid|oid):/i.test(ref.reference)) {
      rewriteReference(ref, entries, locations);
    }
  });
  return out;
}

function rewriteReference(
  ref: Reference,
  entries: readonly BundleEntry[],
  locations: ReadonlyMap<string, string>,
): void {
  const urn = ref.reference!;
  const location = locations.get(bundleLocalName(urn));
  if (location) {
    ref.reference = location;
    return;
  }
  const target = entries.find((e) => sameBundleName(e.fullUrl, urn))?.resource;
  if (!target) return;
  delete ref.reference;
  ref.type ??= target.resourceType;
  const identifier = ref.identifier ?? businessIdentifier(target);
  if (identifier) ref.identifier = identifier;
  else ref.display ??= `${target.resourceType} of the transaction Bundle (not stored here)`;
}

/** The identifier a reader can find the resource by: a DICOM UID, a record number (MR), else the first. */
function businessIdentifier(resource: Resource): Identifier | undefined {
  const ids = ((resource as { identifier?: Identifier[] }).identifier ?? []).filter(
    (i) => typeof i?.value === 'string' && i.value !== '',
  );
  return (
    ids.find((i) => i.system === 'urn:dicom:uid') ??
    ids.find((i) => i.type?.coding?.some((c) => c.code === 'MR')) ??
    ids[0]
  );
}

/**
 * The Task we keep per order (R4 task.html, workflow "fulfillment": the filler reports
 * progress on a Task that is basedOn the request). id and version follow the order row.
 */
export function buildTask(order: OrderForTask): Task {
  const derived = deriveTaskStatus(order.state, order.upstreamStatus);
  const patientId = primaryPatientId(order.request.patient);
  const patientIdentifier = order.request.patient.identifiers.find((i) => i.value === patientId);
  const task: Task = {
    resourceType: 'Task',
    id: order.orderId,
    meta: { versionId: String(order.version), lastUpdated: order.updatedAt.toISOString() },
    identifier: [{ system: ORDER_IDENTIFIER_SYSTEM, value: order.orderId }],
    status: derived.status,
    businessStatus: derived.businessStatus,
    intent: 'order',
    code: {
      coding: [{ system: 'http://hl7.org/fhir/CodeSystem/task-code', code: 'fulfill' }],
    },
    authoredOn: order.createdAt.toISOString(),
    lastModified: order.updatedAt.toISOString(),
  };
  if (derived.statusReason) task.statusReason = { text: fhirString(derived.statusReason) };
  // cancelled because a newer request replaced it: said so, as the published Task says it
  if (order.state === 'cancelled' && order.replacedBy)
    task.statusReason = { text: CLINICAL_REPLACED };
  // A delivered order's Task points at its report (README: "completed, output → report"), as
  // the Task published to the EHR does (mappings/fhir-result.mapping.ts buildTask).
  if (order.state === 'delivered') {
    task.output = [
      {
        type: { text: 'DiagnosticReport' },
        valueReference: { type: 'DiagnosticReport', identifier: reportIdentifier(order.orderId) },
      },
    ];
  }
  if (order.serviceRequestId) {
    task.basedOn = [{ reference: `ServiceRequest/${order.serviceRequestId}` }];
    task.focus = { reference: `ServiceRequest/${order.serviceRequestId}` };
  }
  if (patientIdentifier) {
    // valid R4 whatever the order held (an HL7 namespace id `HOSP A` as system): mappings/fhir-values.ts
    const system = fhirUri(patientIdentifier.system);
    task.for = {
      identifier: { value: fhirString(patientIdentifier.value), ...(system ? { system } : {}) },
    };
  }
  return task;
}

/** Query parameters that are no search parameters: how to answer (checked by the HTTP layer). */
const RESULT_PARAMETERS = new Set(['_format']);

/**
 * A search's query split into the parameters it uses (`supported`, in the order given) and
 * those it ignores (R4 search.html#errors: an unknown or unsupported parameter is ignored,
 * and named as such; refused under `Prefer: handling=strict`).
 */
export function searchParameters(
  query: URLSearchParams,
  supported: readonly string[],
): { used: URLSearchParams; ignored: string[] } {
  const used = new URLSearchParams();
  const ignored: string[] = [];
  for (const [name, value] of query) {
    if (supported.includes(name)) used.append(name, value);
    else if (!RESULT_PARAMETERS.has(name) && !ignored.includes(name)) ignored.push(name);
  }
  return { used, ignored };
}

/** The issue naming a search parameter that was not applied. */
export function ignoredParameterIssue(
  name: string,
  severity: 'warning' | 'error',
): OperationOutcomeIssue {
  return {
    severity,
    code: 'not-supported',
    diagnostics: `the search parameter ${name.slice(0, 64)} is not supported here${severity === 'warning' ? ' and was not applied' : ''}`,
    expression: [name.slice(0, 64)],
  };
}

/**
 * A searchset of `type` under `base` (this server's FHIR base, `fhirBaseOf`): its self link
 * holds only the parameters used (R4 search.html#self); the ones ignored are named by an
 * OperationOutcome entry (search mode `outcome`). The self link echoed the whole query, so
 * `status=cancelled` read as applied when it was not.
 */
export function searchSet(
  resources: Resource[],
  base: string,
  type: string,
  used: URLSearchParams,
  ignored: readonly string[] = [],
): Bundle {
  const query = used.toString();
  const entry: BundleEntry[] = resources.map((r) => ({
    fullUrl: `${base}/${r.resourceType}/${r.id}`,
    resource: r,
    search: { mode: 'match' },
  }));
  if (ignored.length > 0) {
    entry.push({
      resource: {
        resourceType: 'OperationOutcome',
        issue: ignored.map((name) => ignoredParameterIssue(name, 'warning')),
      },
      search: { mode: 'outcome' },
    });
  }
  return {
    resourceType: 'Bundle',
    type: 'searchset',
    total: resources.length,
    link: [{ relation: 'self', url: `${base}/${type}${query ? `?${query}` : ''}` }],
    entry,
  };
}

/**
 * What this server supports, exactly (R4 capabilitystatement.html): JSON only, ServiceRequest
 * create (conditional on identifier) / read / update, transaction and batch, Task read and
 * search by based-on. Public, so that a client can discover it before authenticating.
 */
export function capabilityStatement(baseUrl: string, version: string): CapabilityStatement {
  return {
    resourceType: 'CapabilityStatement',
    status: 'active',
    date: '2026-11-21',
    publisher: 'imaging-ai-adapter',
    kind: 'instance',
    software: { name: 'imaging-ai-adapter', version },
    implementation: { description: 'Imaging-AI adapter FHIR front door', url: baseUrl },
    fhirVersion: '4.0.1',
    format: ['application/fhir+json', 'application/json', 'json'],
    patchFormat: [],
    rest: [
      {
        mode: 'server',
        documentation: `Orders in as ServiceRequest (POST, conditional create on identifier; PUT with status revoked or entered-in-error cancels). Progress as Task (read, search by based-on). Subscription notifications (R4 Subscriptions Backport, rest-hook) are received at POST ${NOTIFICATION_PATH}.`,
        security: {
          cors: false,
          service: [
            {
              coding: [
                {
                  system: 'http://terminology.hl7.org/CodeSystem/restful-security-service',
                  code: 'OAuth',
                },
              ],
              text: 'Bearer token (role sender)',
            },
          ],
          description:
            'Authorization: Bearer <token> with the sender role; 401 without, 403 with another role.',
        },
        resource: [
          {
            type: 'ServiceRequest',
            profile: 'http://hl7.org/fhir/StructureDefinition/ServiceRequest',
            interaction: [{ code: 'create' }, { code: 'read' }, { code: 'update' }],
            versioning: 'versioned-update',
            readHistory: false,
            updateCreate: false,
            conditionalCreate: true,
            conditionalRead: 'not-supported',
            conditionalUpdate: false,
            conditionalDelete: 'not-supported',
            searchParam: [],
          },
          {
            type: 'Task',
            profile: 'http://hl7.org/fhir/StructureDefinition/Task',
            interaction: [{ code: 'read' }, { code: 'search-type' }],
            versioning: 'versioned',
            readHistory: false,
            updateCreate: false,
            conditionalCreate: false,
            searchParam: [
              {
                name: 'based-on',
                type: 'reference',
                definition: 'http://hl7.org/fhir/SearchParameter/Task-based-on',
              },
              {
                name: '_id',
                type: 'token',
                definition: 'http://hl7.org/fhir/SearchParameter/Resource-id',
              },
            ],
          },
        ],
        interaction: [{ code: 'transaction' }, { code: 'batch' }],
      },
    ],
  };
}
