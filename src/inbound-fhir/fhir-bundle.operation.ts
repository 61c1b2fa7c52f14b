import { bundleLocalName } from '../fhir/fhir-urn';
import type {
  Bundle,
  BundleEntry,
  OperationOutcomeIssue,
  ServiceRequest,
} from '@medplum/fhirtypes';
import { sha256Hex } from '../common/hash';
import { dedupeQuirks } from '../common/quirks';
import type { ToleratedQuirk } from '../domain/order-request';
import type { IntakeOrder, IntakeOutcome } from '../orders/order-intake.service';
import { parseResource } from './fhir-http';
import {
  fhirResponse,
  placerOfAnotherPatient,
  fromCaller,
  mapToOrder,
  storeCreated,
  type FhirAnswer,
  type FhirCaller,
  type FhirOperationDeps,
  validationIssues,
} from './fhir-operation.shared';
import { servedServiceRequest, withBundleReferences } from './fhir-served.resources';
import { FhirError, operationOutcome } from './fhir.error';
import { matchReplaces } from './replaces.matcher';
import { ReferenceResolver, type SiblingEntry } from './order-context.resolver';
import {
  carriesAll,
  findConditionalMatches,
  multipleMatches,
  parseIfNoneExist,
  placerReusedForOtherContent,
  type IfNoneExistIdentifier,
} from './service-request-create.operation';
import { sameFhirContent } from './fhir-resend';
import { sameOrderNumber } from '../orders/use-cases/intake-planner';
import type { FhirFrontDoorConfig } from './fhir-front-door.config';
import { sameIdentifierText } from '../domain/identifier-form';

/** Resource types a transaction/batch may carry beside its ServiceRequests (used as context, not stored). */
const CONTEXT_TYPES = new Set([
  'Patient',
  'ImagingStudy',
  'Practitioner',
  'PractitionerRole',
  'Condition',
  'Observation',
  'Encounter',
  'Organization',
]);

/** What a context entry may ask (its resource is used, not stored: R4 http.html#trules). */
const CONTEXT_METHODS = new Set(['POST', 'PUT']);

/**
 * `entry.request.ifNoneExist` of a ServiceRequest (R4 bundle.html, http.html#ccreate): the
 * same `identifier=[system]|[value]` search as the REST If-None-Exist header (repeated for AND),
 * run by findConditionalMatches before the intake. It must name identifiers the entry carries
 * (else it matches another order, not this one); a search naming values alone is honoured only
 * for the placer number (the intake matches by it). Before, only the placer identifier was
 * accepted: an entry conditional on its accession, filler or visit was 422.
 */
function ifNoneExistOf(
  ifNoneExist: string | undefined,
  sr: ServiceRequest,
  placer: { system?: string; value: string } | undefined,
  at: string,
): { issues: OperationOutcomeIssue[]; condition?: BundleCondition } {
  let wanted: ReturnType<typeof parseIfNoneExist>;
  try {
    wanted = parseIfNoneExist(ifNoneExist);
  } catch (error) {
    if (!(error instanceof FhirError)) throw error;
    return { issues: error.issues.map((i) => ({ ...i, expression: [at] })) };
  }
  if (!wanted) return { issues: [] };
  const namesPlacer =
    placer !== undefined &&
    wanted.identifiers.some(
      (w) =>
        sameIdentifierText(w.value, placer.value) &&
        (w.system === undefined || sameIdentifierText(w.system, placer.system)),
    );
  const lacking = carriesAll(sr, wanted.identifiers);
  if (!lacking && (namesPlacer || wanted.identifiers.some((w) => w.system))) {
    return { issues: [], condition: { header: ifNoneExist!, identifiers: wanted.identifiers } };
  }
  return {
    issues: [
      {
        severity: 'error',
        code: 'not-supported',
        diagnostics: lacking
          ? `ifNoneExist "${ifNoneExist}" names an identifier this ServiceRequest does not carry (${lacking.system ?? ''}|${lacking.value.slice(0, 64)}): it would match another order, not this one`
          : `ifNoneExist "${ifNoneExist}" names values without a system, and not the ServiceRequest's placer identifier (${placer ? `${placer.system ?? ''}|${placer.value}` : 'none'}): name each identifier as system|value`,
        expression: [at],
      },
    ],
  };
}

/** A Bundle entry's conditional create: its `ifNoneExist` as written, and what it names. */
export interface BundleCondition {
  header: string;
  identifiers: readonly IfNoneExistIdentifier[];
}

export type BundleOrder = IntakeOrder & {
  entryIndex: number;
  sr: ServiceRequest;
  condition?: BundleCondition;
};

/**
 * The R4 validation issues of a batch that are each about one ServiceRequest entry's resource,
 * by entry index; the rest (the Bundle, its other entries) stay in `rest`. In a batch the
 * entries are processed independently (R4 http.html#brules): one ServiceRequest with a value
 * R4 forbids (`priority: "emergent"`, a dateTime without zone) is that entry's 422, as a
 * mapping problem already was. It refused the whole batch, and its other orders with it.
 */
function perEntryIssues(
  b: Bundle,
  issues: OperationOutcomeIssue[],
): { byEntry: Map<number, OperationOutcomeIssue[]>; rest: OperationOutcomeIssue[] } {
  const byEntry = new Map<number, OperationOutcomeIssue[]>();
  const rest: OperationOutcomeIssue[] = [];
  for (const issue of issues) {
    const indexes = new Set(
      (issue.expression ?? []).map(
        (e) => /^Bundle\.entry\[(\d+)\]\.resource(?:[.[]|$)/.exec(e)?.[1] ?? 'none',
      ),
    );
    const [only] = indexes;
    const index = indexes.size === 1 && only !== 'none' ? Number(only) : undefined;
    if (
      b.type === 'batch' &&
      index !== undefined &&
      b.entry?.[index]?.resource?.resourceType === 'ServiceRequest'
    ) {
      byEntry.set(index, [...(byEntry.get(index) ?? []), issue]);
    } else {
      rest.push(issue);
    }
  }
  return { byEntry, rest };
}

/**
 * The body as a transaction or batch Bundle, valid FHIR R4 (else 400/422); in a batch, the
 * issues of a ServiceRequest entry are returned as that entry's (`invalidEntries`).
 */
function parseBundle(
  raw: Buffer,
  maxJsonValues: number,
): { b: Bundle; invalidEntries: Map<number, OperationOutcomeIssue[]> } {
  const bundle = parseResource(raw, maxJsonValues);
  if (bundle.resourceType !== 'Bundle') {
    throw new FhirError(
      'bad-request',
      `POST to the base takes a transaction or batch Bundle, not a ${bundle.resourceType}`,
      [
        {
          severity: 'error',
          code: 'invalid',
          diagnostics: 'expected a Bundle',
          expression: ['resourceType'],
        },
      ],
    );
  }
  const b = bundle as Bundle;
  // bdl-3 (entry.request required): an entry without one is a POST, recorded (checkEntries);
  // the invariant refused the whole Bundle on `Bundle`, a FHIRPath its only explanation.
  const { byEntry, rest } = perEntryIssues(b, validationIssues(b, ['bdl-3']));
  if (rest.length > 0) {
    throw new FhirError('invalid', `the Bundle is not valid FHIR R4`, [
      ...rest,
      ...[...byEntry.values()].flat(),
    ]);
  }
  if (b.type !== 'transaction' && b.type !== 'batch') {
    throw new FhirError('invalid', `Bundle.type ${b.type} is not processed here`, [
      {
        severity: 'error',
        code: 'not-supported',
        diagnostics: `only transaction and batch Bundles are accepted (got ${b.type})`,
        expression: ['Bundle.type'],
      },
    ]);
  }
  return { b, invalidEntries: byEntry };
}

/**
 * A PUT entry's resource is the one its URL names (R4 http.html#update: "the request body
 * SHALL be a Resource with an id element that has an identical value to the [id] in the URL"):
 * `PUT Patient/example` carrying a Patient without that id was not taken for Patient/example,
 * so a reference to Patient/example was read from the EHR, another patient than the one the
 * transaction sent, and the order was made for that one. A conditional PUT (`Patient?…`) names
 * no id.
 */
function putTargetIssue(e: BundleEntry, i: number): OperationOutcomeIssue | undefined {
  if (e.request?.method !== 'PUT' || !e.resource) return undefined;
  const m = /^(?:.*\/)?([A-Z][A-Za-z]+)\/([^/?#]+)$/.exec(e.request.url ?? '');
  if (!m) return undefined;
  const [, type, id] = m;
  if (e.resource.resourceType === type && e.resource.id === id) return undefined;
  const what = `${e.resource.resourceType}${e.resource.id === undefined ? ' without an id' : `/${e.resource.id}`}`;
  return {
    severity: 'error',
    code: 'invalid',
    diagnostics: `Bundle.entry[${i}].request is PUT ${type}/${id} but its resource is ${what}: an update's resource has the id of its URL (R4 http.html#update)`,
    expression: [`Bundle.entry[${i}].resource.id`],
  };
}

/** Each entry a POSTed ServiceRequest or a context resource (else 422); the entries as siblings. */
function checkEntries(entries: BundleEntry[], quirks: ToleratedQuirk[]): SiblingEntry[] {
  const siblings: SiblingEntry[] = [];
  const structural: OperationOutcomeIssue[] = [];
  // fullUrl → the entry it first named, in its one spelling: `urn:uuid:5CBC…` and
  // `urn:uuid:5cbc…` are one name (RFC 4122), so two entries so named break bdl-7 like two
  // under one spelling (the validator's); a reference found the first, and the order was
  // made for that Patient whatever the other said.
  const named = new Map<string, number>();
  entries.forEach((e, i) => {
    if (e.fullUrl !== undefined) {
      const first = named.get(bundleLocalName(e.fullUrl));
      if (first !== undefined && entries[first]!.fullUrl !== e.fullUrl) {
        structural.push({
          severity: 'error',
          code: 'invariant',
          diagnostics: `Bundle.entry[${i}].fullUrl names the same resource as Bundle.entry[${first}].fullUrl (a UUID is case-insensitive, RFC 4122): a fullUrl is unique in a Bundle (bdl-7)`,
          expression: [`Bundle.entry[${i}].fullUrl`],
        });
      }
      if (first === undefined) named.set(bundleLocalName(e.fullUrl), i);
    }
    if (!e.resource) {
      structural.push({
        severity: 'error',
        code: 'required',
        diagnostics: 'each entry needs a resource (only POST/PUT of resources is supported)',
        expression: [`Bundle.entry[${i}].resource`],
      });
      return;
    }
    if (!e.request) {
      quirks.push({
        code: 'fhir-bundle-entry-without-request',
        detail: `Bundle.entry[${i}] has no request: treated as POST`,
      });
    }
    const type = e.resource.resourceType;
    if (type === 'ServiceRequest') {
      const method = e.request?.method ?? 'POST';
      if (method !== 'POST') {
        structural.push({
          severity: 'error',
          code: 'not-supported',
          diagnostics: `ServiceRequest entries must be POST (create); got ${method}. Use PUT /fhir/ServiceRequest/{id} to change an order`,
          expression: [`Bundle.entry[${i}].request.method`],
        });
      }
    } else if (e.request?.method !== undefined && !CONTEXT_METHODS.has(e.request.method)) {
      // A DELETE, PATCH or GET of the Patient was answered "200 OK, used as order context":
      // neither done nor refused, and the order used the very resource it asked to delete.
      structural.push({
        severity: 'error',
        code: 'not-supported',
        diagnostics: `${e.request.method} of a ${type} is not performed here: context entries are POST or PUT (the resource is used as order context, not stored)`,
        expression: [`Bundle.entry[${i}].request.method`],
      });
    } else if (!CONTEXT_TYPES.has(type)) {
      structural.push({
        severity: 'error',
        code: 'not-supported',
        diagnostics: `${type} is not supported in an order Bundle (ServiceRequest with ${[...CONTEXT_TYPES].join(', ')})`,
        expression: [`Bundle.entry[${i}].resource.resourceType`],
      });
    } else {
      const put = putTargetIssue(e, i);
      if (put) structural.push(put);
    }
    siblings.push({
      fullUrl: e.fullUrl,
      resource: e.resource,
      location: `Bundle.entry[${i}]`,
    });
  });
  if (structural.length > 0)
    throw new FhirError('invalid', 'the Bundle cannot be processed', structural);
  return siblings;
}

/**
 * The checks and the mapping of a Bundle, nothing stored: its entries checked, each
 * ServiceRequest resolved and mapped (errors per entry); a FhirError when the Bundle as a
 * whole cannot be processed. Shared by the operation and the dry run; tolerated quirks are
 * pushed onto `quirks`.
 */
export async function prepareBundle(
  raw: Buffer,
  resolverFor: (siblings: SiblingEntry[]) => ReferenceResolver,
  config: FhirFrontDoorConfig,
  quirks: ToleratedQuirk[],
): Promise<{
  b: Bundle;
  entries: BundleEntry[];
  orders: BundleOrder[];
  entryErrors: Map<number, OperationOutcomeIssue[]>;
  mappingVersion: string;
}> {
  const { b, invalidEntries } = parseBundle(raw, config.maxJsonValues);
  const entries = b.entry ?? [];
  const siblings = checkEntries(entries, quirks);

  const resolver = resolverFor(siblings);
  const orders: BundleOrder[] = [];
  const entryErrors = new Map<number, OperationOutcomeIssue[]>(invalidEntries);
  let mappingVersion = '';
  for (const [i, e] of entries.entries()) {
    if (e.resource?.resourceType !== 'ServiceRequest' || entryErrors.has(i)) continue;
    const sr = e.resource as ServiceRequest;
    const path = `Bundle.entry[${i}].resource`;
    let prepared: Awaited<ReturnType<typeof mapToOrder>>;
    try {
      prepared = await mapToOrder(
        sr,
        resolver,
        { lenient: false, path, srFullUrl: e.fullUrl, siblings },
        'create',
        config,
      );
    } catch (error) {
      // A reference refused (outside the EHR, a conditional one matching nothing): in a batch
      // that entry's own 422 (R4 http.html#brules), in a transaction the whole (below).
      if (!(error instanceof FhirError) || error.code !== 'invalid') throw error;
      entryErrors.set(i, error.issues);
      continue;
    }
    const { mapped, issues } = prepared;
    mappingVersion = mapped.mappingVersion;
    quirks.push(...mapped.quirks);
    const conditional = mapped.request
      ? ifNoneExistOf(
          e.request?.ifNoneExist,
          sr,
          mapped.request.placerOrderNumber,
          `Bundle.entry[${i}].request.ifNoneExist`,
        )
      : { issues: [] };
    issues.push(...conditional.issues);
    if (issues.length > 0 || !mapped.request) {
      entryErrors.set(i, issues);
      continue;
    }
    orders.push({
      request: mapped.request,
      lineage: mapped.lineage,
      sourceRef: `Bundle.entry[${i}]`,
      entryIndex: i,
      sr,
      conditional: Boolean(e.request?.ifNoneExist),
      ...(conditional.condition ? { condition: conditional.condition } : {}),
    });
  }
  quirks.push(...resolver.quirks);
  if (orders.length === 0 && entryErrors.size === 0) {
    throw new FhirError('invalid', 'the Bundle carries no ServiceRequest', [
      {
        severity: 'error',
        code: 'required',
        diagnostics: 'at least one ServiceRequest entry is required',
        expression: ['Bundle.entry'],
      },
    ]);
  }
  if (b.type === 'transaction') {
    for (const [index, issue] of orderTwice(orders)) entryErrors.set(index, [issue]);
  }
  if (b.type === 'transaction' && entryErrors.size > 0) {
    // A transaction succeeds or fails as a whole (R4 http.html#trules).
    throw new FhirError(
      'invalid',
      'the transaction cannot be processed',
      [...entryErrors.values()].flat(),
    );
  }

  return { b, entries, orders, entryErrors, mappingVersion };
}

/**
 * The ServiceRequest entries of a transaction that create an order an earlier entry creates
 * (the same placer number), each with its issue. R4 http.html#trules: identities that
 * overlap fail the transaction. The second was answered "200 OK" as the first's resend
 * and dropped, whatever it asked (priority stat on a routine order).
 */
function orderTwice(orders: BundleOrder[]): Array<[number, OperationOutcomeIssue]> {
  const twice: Array<[number, OperationOutcomeIssue]> = [];
  orders.forEach((o, k) => {
    const placer = o.request.placerOrderNumber;
    if (!placer?.value) return;
    const earlier = orders
      .slice(0, k)
      .find(
        (p) => p.request.placerOrderNumber && sameOrderNumber(placer, p.request.placerOrderNumber),
      );
    if (!earlier) return;
    twice.push([
      o.entryIndex,
      {
        severity: 'error',
        code: 'duplicate',
        diagnostics: `Bundle.entry[${o.entryIndex}] creates the order Bundle.entry[${earlier.entryIndex}] creates (placer identifier ${placer.value}): one transaction creates an order once; send one ServiceRequest per placer number`,
        expression: [`Bundle.entry[${o.entryIndex}].resource.identifier`],
      },
    ]);
  });
  return twice;
}

/** One response entry per request entry (R4 http.html#transaction-response). */
export function responseEntries(
  entries: BundleEntry[],
  entryErrors: Map<number, OperationOutcomeIssue[]>,
  orders: BundleOrder[],
  outcome: IntakeOutcome,
  now: string,
  servedByIndex: Map<number, ServiceRequest>,
  conflicts: ReadonlySet<number> = new Set(),
  preconditionFailed: ReadonlyMap<number, OperationOutcomeIssue[]> = new Map(),
): BundleEntry[] {
  // Where each ServiceRequest of the Bundle now is, for references to it by its fullUrl.
  const locations = new Map<string, string>();
  for (const [k, r] of outcome.results.entries()) {
    const fullUrl = entries[orders[k]?.entryIndex ?? -1]?.fullUrl;
    if (fullUrl && (r.kind === 'created' || r.kind === 'already-known'))
      locations.set(bundleLocalName(fullUrl), `ServiceRequest/${r.orderId}`);
  }
  return entries.map((e, i) => {
    const errors = entryErrors.get(i);
    if (errors) {
      return {
        response: {
          status: '422 Unprocessable Entity',
          outcome: operationOutcome(errors),
        },
      };
    }
    const failed = preconditionFailed.get(i);
    if (failed) {
      // its ifNoneExist matches several orders (R4 http.html#ccreate): 412, nothing made
      return { response: { status: '412 Precondition Failed', outcome: operationOutcome(failed) } };
    }
    if (e.resource?.resourceType !== 'ServiceRequest') {
      return {
        response: {
          status: '200 OK',
          outcome: operationOutcome([
            {
              severity: 'information',
              code: 'informational',
              diagnostics: `${e.resource?.resourceType} used as order context; it is not stored as a resource here`,
            },
          ]),
        },
      };
    }
    const k = orders.findIndex((o) => o.entryIndex === i);
    const r = outcome.results[k];
    if (r?.kind === 'created') {
      const sr = withBundleReferences(orders[k]!.sr, entries, locations);
      const served = servedServiceRequest(sr, r.orderId, 1, now);
      servedByIndex.set(i, served);
      return {
        resource: served,
        response: {
          status: '201 Created',
          location: `ServiceRequest/${r.orderId}/_history/1`,
          etag: 'W/"1"',
          lastModified: now,
        },
      };
    }
    if (r?.kind === 'already-known' && conflicts.has(k)) {
      return {
        response: {
          status: '409 Conflict',
          outcome: operationOutcome([
            placerReusedForOtherContent(r.orderId, `Bundle.entry[${i}].resource.identifier`),
          ]),
        },
      };
    }
    if (r?.kind === 'already-known') {
      return {
        response: { status: '200 OK', location: `ServiceRequest/${r.orderId}` },
      };
    }
    if (r?.kind === 'change-refused' && r.action === 'create') {
      return {
        response: {
          status: '409 Conflict',
          outcome: operationOutcome([
            placerOfAnotherPatient(`Bundle.entry[${i}].resource.identifier`),
          ]),
        },
      };
    }
    return { response: { status: '500 Internal Server Error' } };
  });
}

/**
 * The orders (by index) of plain POST entries (no `ifNoneExist`) answered "already known" whose
 * content is not that order's: a change sent as a create, answered 200 and lost before (as a
 * single POST was). The order is that entry's only when the entry is the request we serve for
 * it (`known`, read before the intake; its references as this Bundle's would be kept), or, in
 * a batch, the earlier entry of this Bundle that made it. A conditional entry keeps R4's
 * answer (http.html#ccreate: the match).
 */
function placerConflicts(
  orders: BundleOrder[],
  outcome: IntakeOutcome,
  entries: BundleEntry[],
  known: ReadonlyMap<number, ServiceRequest>,
): Set<number> {
  const conflicts = new Set<number>();
  for (const [k, r] of outcome.results.entries()) {
    const order = orders[k];
    if (r.kind !== 'already-known' || !order || order.conditional) continue;
    const maker = outcome.results.findIndex((o) => o.kind === 'created' && o.orderId === r.orderId);
    const served =
      maker >= 0 ? orders[maker]?.sr : known.get(k)?.id === r.orderId ? known.get(k) : undefined;
    const mine = withBundleReferences(order.sr, entries, new Map());
    const theirs = maker >= 0 && served ? withBundleReferences(served, entries, new Map()) : served;
    if (!theirs || !sameFhirContent(mine, theirs, { ignoreId: true })) conflicts.add(k);
  }
  return conflicts;
}

/** POST /fhir with a transaction or batch Bundle (R4 http.html#transaction). */
export class FhirBundleOperation {
  constructor(private readonly deps: FhirOperationDeps) {}

  async execute(
    caller: FhirCaller,
    options: { idempotencyKey?: string } = {},
  ): Promise<FhirAnswer> {
    const quirks: ToleratedQuirk[] = [];
    return this.deps.refusals.keeping(
      caller,
      'Bundle',
      async () => {
        const prepared = await prepareBundle(
          caller.raw,
          (siblings) => new ReferenceResolver(siblings, this.deps.ehr),
          this.deps.config,
          quirks,
        );
        const { b, entries, entryErrors, mappingVersion } = prepared;
        // Each entry's ifNoneExist, searched as the REST header is (findConditionalMatches):
        // one match is the order it answers 200 with; several are 412, the entry's in a batch,
        // the whole transaction's (R4 http.html#trules: all or nothing).
        const preconditionFailed = new Map<number, OperationOutcomeIssue[]>();
        const orders: BundleOrder[] = [];
        for (const o of prepared.orders) {
          if (!o.condition) {
            orders.push(o);
            continue;
          }
          const matched = await findConditionalMatches(
            this.deps.resources,
            o.condition.identifiers,
            caller.sender,
          );
          if (matched.length > 1) {
            const refusal = multipleMatches(
              o.condition.header,
              matched.length,
              `Bundle.entry[${o.entryIndex}].request.ifNoneExist`,
            );
            if (b.type === 'transaction') throw refusal;
            preconditionFailed.set(o.entryIndex, refusal.issues);
            continue;
          }
          orders.push(matched[0] ? { ...o, targetOrderId: matched[0] } : o);
        }
        const key =
          options.idempotencyKey ??
          (b.identifier?.value
            ? `fhir-rest|${caller.sender}|Bundle|${b.identifier.system ?? ''}|${b.identifier.value}`
            : `fhir-rest|${caller.sender}|sha256:${sha256Hex(caller.raw)}`);
        const now = this.deps.clock().toISOString();
        const servedByIndex = new Map<number, ServiceRequest>();
        // The requests we serve under the placer numbers of plain POST entries (placerConflicts),
        // this sender's: the intake matches its own order, and another sender's request under
        // an overlapping number, served later, made a resend of ours a 409 "other content".
        const known = new Map<number, ServiceRequest>();
        for (const [k, o] of orders.entries()) {
          if (o.conditional || !o.request.placerOrderNumber) continue;
          const found = await this.deps.resources.findServiceRequestByIdentifier(
            [o.request.placerOrderNumber],
            caller.sender,
          );
          if (found) known.set(k, found.resource);
        }
        // what each request's `replaces` names here (our id, an EHR URL, a placer identifier)
        const replacesOf = await Promise.all(
          orders.map((o) =>
            matchReplaces(o.sr, {
              relativeTo: 'ours',
              sender: caller.sender,
              ehr: this.deps.ehr,
              publicBaseUrl: this.deps.config.publicBaseUrl,
              resources: this.deps.resources,
              at: `Bundle.entry[${o.entryIndex}].resource`,
            }),
          ),
        );
        const reply = await this.deps.intake.ingest(
          {
            ...fromCaller(caller),
            messageType: `Bundle ${b.type}`,
            messageControlId: b.identifier?.value ?? b.id ?? null,
            idempotencyKey: key,
            quirks: dedupeQuirks(quirks),
            mappingVersion: mappingVersion || 'fhir-order-mapping',
            orders: orders.map(
              ({ request, lineage, sourceRef, conditional, targetOrderId }, k) => ({
                request,
                lineage,
                sourceRef,
                conditional,
                ...(targetOrderId ? { targetOrderId } : {}),
                ...(replacesOf[k]?.length ? { replaces: replacesOf[k] } : {}),
              }),
            ),
          },
          {
            respond: (outcome) => {
              // A transaction is all or nothing (R4 http.html#trules): one ServiceRequest under
              // another patient's order number refuses it whole.
              const clash = outcome.results.findIndex(
                (r) => r.kind === 'change-refused' && r.action === 'create',
              );
              if (b.type === 'transaction' && clash >= 0) {
                return fhirResponse(
                  409,
                  operationOutcome([
                    placerOfAnotherPatient(
                      `Bundle.entry[${orders[clash]!.entryIndex}].resource.identifier`,
                    ),
                  ]),
                  false,
                );
              }
              const conflicts = placerConflicts(orders, outcome, entries, known);
              if (b.type === 'transaction' && conflicts.size > 0) {
                return fhirResponse(
                  409,
                  operationOutcome(
                    [...conflicts].map((k) =>
                      placerReusedForOtherContent(
                        (outcome.results[k] as { orderId?: string }).orderId,
                        `Bundle.entry[${orders[k]!.entryIndex}].resource.identifier`,
                      ),
                    ),
                  ),
                  false,
                );
              }
              const response: Bundle = {
                resourceType: 'Bundle',
                type: b.type === 'transaction' ? 'transaction-response' : 'batch-response',
                entry: responseEntries(
                  entries,
                  entryErrors,
                  orders,
                  outcome,
                  now,
                  servedByIndex,
                  conflicts,
                  preconditionFailed,
                ),
              };
              return fhirResponse(200, response, true);
            },
            afterStore: async (manager, stored) => {
              for (const [k, r] of stored.outcome.results.entries()) {
                const served = servedByIndex.get(orders[k]!.entryIndex);
                if (r.kind === 'created' && served) {
                  await storeCreated(this.deps.resources, manager, caller, r.orderId, served, now);
                }
              }
            },
          },
        );
        return {
          // refused inside the intake (a transaction's order under another patient's number):
          // its stored answer and status
          status: reply.response.accepted ? 200 : Number(reply.response.code),
          resource: JSON.parse(reply.response.body.toString('utf8')) as Bundle,
          duplicate: reply.duplicate,
        };
      },
      () => dedupeQuirks(quirks),
    );
  }
}
