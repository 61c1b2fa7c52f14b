import { isDeepStrictEqual } from 'node:util';
import type { OperationOutcomeIssue, Resource, ServiceRequest } from '@medplum/fhirtypes';
import { sha256Hex } from '../common/hash';
import type { IntakeOutcome, IntakeResponse } from '../orders/order-intake.service';
import { namesVersion } from './fhir-http';
import {
  fhirResponse,
  fromCaller,
  mapOrRefuse,
  parseTyped,
  unexpectedResult,
  type FhirAnswer,
  type FhirCaller,
  type FhirOperationDeps,
} from './fhir-operation.shared';
import { servedServiceRequest } from './fhir-served.resources';
import { FhirError, operationOutcome } from './fhir.error';
import { matchReplaces } from './replaces.matcher';
import { ReferenceResolver } from './order-context.resolver';
import type { OrderRequest } from '../domain/order-request';
import { sameOrderNumber } from '../orders/use-cases/intake-planner';
import type { OrderForTask } from '../persistence/fhir-resource.repository';

/**
 * PUT /fhir/ServiceRequest/{id}: revoked / entered-in-error cancel; anything else updates
 * metadata. The new version is written in the intake transaction.
 */
export class UpdateServiceRequestOperation {
  constructor(private readonly deps: FhirOperationDeps) {}

  async execute(
    caller: FhirCaller,
    id: string,
    preconditions: { ifMatch?: string; ifNoneMatch?: string },
  ): Promise<FhirAnswer> {
    let resolver: ReferenceResolver | undefined;
    return this.deps.refusals.keeping(
      caller,
      'ServiceRequest update',
      async () => {
        // A PUT without If-Match made from a version another PUT has just replaced is made
        // again from the new one; with If-Match the sender named that version: 412.
        for (let attempt = 1; ; attempt++) {
          try {
            return await this.attempt(caller, id, preconditions, (r) => (resolver = r));
          } catch (error) {
            if (!(error instanceof VersionMoved)) throw error;
            if (preconditions.ifMatch !== undefined || attempt === MAX_ATTEMPTS) {
              throw new FhirError(
                preconditions.ifMatch !== undefined ? 'precondition-failed' : 'conflict',
                `ServiceRequest/${id} was changed by another request while this one was applied (version ${error.from} is no longer current); nothing of this one was applied: read it and send the change again`,
              );
            }
          }
        }
      },
      () => resolver?.quirks ?? [],
    );
  }

  private async assertSamePlacer(request: OrderRequest, orderId: string): Promise<void> {
    const held = await placerMoved(request, await this.deps.resources.orderForTask(orderId));
    if (held === undefined) return;
    const diagnostics = `this ServiceRequest's order was created under placer number ${held}; a change cannot give it another (${request.placerOrderNumber!.value}): nothing was changed; revoke it and create a new ServiceRequest for the other number`;
    throw new FhirError('conflict', diagnostics, [
      {
        severity: 'error',
        code: 'business-rule',
        diagnostics,
        expression: ['ServiceRequest.identifier'],
      },
    ]);
  }

  /** One try of the update, made from the version read at its start (VersionMoved if it moved on). */
  private async attempt(
    caller: FhirCaller,
    id: string,
    preconditions: { ifMatch?: string; ifNoneMatch?: string },
    resolving: (resolver: ReferenceResolver) => void,
  ): Promise<FhirAnswer> {
    const stored = await this.deps.resources.findServiceRequest(id);
    // Another sender's ServiceRequest is treated as unknown: its existence is not confirmed.
    const foreign = caller.restrictedTo !== undefined && stored?.sender !== caller.restrictedTo;
    if (!stored || !stored.orderId || foreign) {
      // R4 http.html#update: no update-as-create (CapabilityStatement updateCreate=false) → 405.
      throw new FhirError(
        'method-not-allowed',
        `ServiceRequest/${id} does not exist and this server does not create resources by update: POST the ServiceRequest`,
        undefined,
        // a 405 names what the URL answers (RFC 9110 §15.5.6): a read, which is 404 here
        { Allow: 'GET, HEAD' },
      );
    }
    const sr = parseTyped<ServiceRequest>(
      caller.raw,
      'ServiceRequest',
      this.deps.config.maxJsonValues,
    );
    if (sr.id !== id) {
      throw new FhirError(
        'bad-request',
        'the resource id must match the URL (R4 http.html#update)',
        [
          {
            severity: 'error',
            code: 'invalid',
            diagnostics: `ServiceRequest.id is ${sr.id === undefined ? 'missing' : `"${sr.id}"`}, the URL names ${id}`,
            expression: ['ServiceRequest.id'],
          },
        ],
      );
    }
    const current = String(stored.versionId);
    if (preconditions.ifMatch !== undefined && !namesVersion(preconditions.ifMatch, current)) {
      throw new FhirError(
        'precondition-failed',
        `If-Match names version ${preconditions.ifMatch.trim()}; the current version is ${current}`,
      );
    }
    // If-None-Match on a PUT: "only if it does not exist" (`*`) or "not this version"; it
    // was ignored and the existing resource changed (RFC 9110 §13.1.2).
    if (
      preconditions.ifNoneMatch !== undefined &&
      namesVersion(preconditions.ifNoneMatch, current)
    ) {
      throw new FhirError(
        'precondition-failed',
        `If-None-Match ${preconditions.ifNoneMatch.trim()}: ServiceRequest/${id} exists at version ${current}`,
      );
    }
    const resolver = new ReferenceResolver([], this.deps.ehr);
    resolving(resolver);
    const cancelling = sr.status === 'revoked' || sr.status === 'entered-in-error';
    const { mapped, request } = await mapOrRefuse(
      sr,
      resolver,
      { lenient: cancelling },
      'update',
      this.deps.config,
      'the ServiceRequest change cannot be applied',
    );
    if (!cancelling) await this.assertSamePlacer(request, stored.orderId);
    const version = stored.versionId + 1;
    const now = this.deps.clock().toISOString();
    const served = servedServiceRequest(sr, id, version, now);
    // a revoke replaces nothing: it withdraws this request
    const replaces = cancelling
      ? []
      : await matchReplaces(sr, {
          relativeTo: 'ours',
          sender: caller.sender,
          ehr: this.deps.ehr,
          publicBaseUrl: this.deps.config.publicBaseUrl,
          resources: this.deps.resources,
          at: 'ServiceRequest',
        });
    const reply = await this.deps.intake.ingest(
      {
        ...fromCaller(caller),
        messageType: `ServiceRequest update (${sr.status})`,
        messageControlId: `ServiceRequest/${id}`,
        idempotencyKey: `fhir-rest|${caller.sender}|PUT|ServiceRequest/${id}|v${appliesTo(sr, stored)}|sha256:${sha256Hex(caller.raw)}`,
        quirks: [...resolver.quirks, ...mapped.quirks],
        mappingVersion: mapped.mappingVersion,
        orders: [
          {
            request,
            lineage: mapped.lineage,
            sourceRef: `ServiceRequest/${id}`,
            targetOrderId: stored.orderId,
            ...(replaces.length ? { replaces } : {}),
          },
        ],
      },
      {
        respond: (outcome) => respondToUpdate(outcome, served),
        afterStore: async (manager) => {
          // The If-Match check above and this write are one step: only over the version
          // read (the order's row lock orders concurrent changes). Four PUTs sent at once
          // with If-Match W/"1" were each answered 200 W/"2", each applied to the order,
          // three versions overwritten. Thrown, the whole change is rolled back.
          const written = await this.deps.resources.updateServiceRequest(manager, {
            id,
            resource: served,
            versionId: version,
            lastUpdated: now,
            fromVersion: stored.versionId,
          });
          if (!written) throw new VersionMoved(stored.versionId);
        },
      },
    );
    if (!reply.response.accepted) {
      return {
        status: Number(reply.response.code),
        resource: JSON.parse(reply.response.body.toString('utf8')) as Resource,
      };
    }
    if (reply.duplicate) {
      const current = await this.deps.resources.findServiceRequest(id);
      return { status: 200, resource: current?.resource ?? served, duplicate: true };
    }
    return {
      status: 200,
      resource: served,
      location: `ServiceRequest/${id}/_history/${version}`,
    };
  }
}

/**
 * A change names the order by the placer number it was created under (an order keeps its
 * numbers): another one is 409 on ServiceRequest.identifier. Answered 200, the served
 * resource took the new number while the order stayed under the old one, results went out
 * under it, and a POST of the new number made a second order. A cancel is never held up.
 */
function placerMoved(request: OrderRequest, order: OrderForTask | undefined): string | undefined {
  const asked = request.placerOrderNumber;
  const held = order?.request.placerOrderNumber;
  if (!asked?.value || !held?.value || sameOrderNumber(asked, held)) return undefined;
  return held.value;
}

/** Tries of a PUT without If-Match whose version another change replaced meanwhile. */
const MAX_ATTEMPTS = 5;

/** The resource moved past the version an update was made from (rolled back). */
class VersionMoved extends Error {
  constructor(readonly from: number) {
    super(`version ${from} is no longer current`);
  }
}

/**
 * The version a PUT is applied to, part of its idempotency key: the current one, unless the
 * current version already holds this content (a resend of the PUT that made it, whose answer
 * was lost), then the one before, so the resend finds that PUT and its answer. Keyed by the
 * body alone, a PUT back to an earlier content (priority routine → stat → routine, a note
 * taken back) was taken for a resend of the first: answered 200 and never applied, the order
 * left as the second asked.
 */
function appliesTo(
  sr: ServiceRequest,
  stored: { resource: ServiceRequest; versionId: number },
): number {
  const content = (r: ServiceRequest) => {
    const { versionId: _version, lastUpdated: _updated, ...meta } = r.meta ?? {};
    return { ...r, meta };
  };
  return isDeepStrictEqual(content(sr), content(stored.resource))
    ? stored.versionId - 1
    : stored.versionId;
}

function respondToUpdate(outcome: IntakeOutcome, served: ServiceRequest): IntakeResponse {
  const r = outcome.results[0];
  const refuse = (status: number, issue: OperationOutcomeIssue): IntakeResponse =>
    fhirResponse(status, operationOutcome([issue]), false);
  switch (r?.kind) {
    // change-too-late: the EHR's own resource moves on (e.g. status completed once the result
    // is in); the ended order does not change, and its audit trail says so
    case 'cancel-accepted':
    case 'updated':
    case 'change-too-late':
      return fhirResponse(200, served, true);
    case 'cancel-too-late':
      // A revoke of an order already cancelled (a newer request replaced it, or an earlier
      // revoke ended it) asks for what holds: the request takes its new version, 200. It was
      // 409 "can no longer be cancelled", and an EHR that revokes the request it replaced (as
      // R4 servicerequest.html#replaces expects of it) took its revoke for failed.
      if (r.state === 'cancelled') return fhirResponse(200, served, true);
      return refuse(409, {
        severity: 'error',
        code: 'business-rule',
        diagnostics: `the order is already ${r.state}; it can no longer be cancelled (see Task/${r.orderId})`,
        expression: ['ServiceRequest.status'],
      });
    case 'change-refused':
      return refuse(409, {
        severity: 'error',
        code: 'business-rule',
        diagnostics:
          r.reason === 'other-patient'
            ? `this ServiceRequest's order (Task for order ${r.orderId}) is another patient's: the subject does not identify its patient; nothing was changed`
            : r.reason === 'study-used'
              ? `the order's study was already found by its ${r.field === 'accession-number' ? 'accession number' : 'Study Instance UID'} and used; a result under another one would not be the images' own: revoke this ServiceRequest and create a new one`
              : `the order already runs upstream with AI products ${r.products?.placed.join(', ') || 'none'}; the new code asks for ${r.products?.asked.join(', ') || 'none'}, which a running order cannot change: revoke this ServiceRequest and create a new one`,
        expression: [
          r.reason === 'other-patient'
            ? 'ServiceRequest.subject'
            : r.reason === 'study-used'
              ? r.field === 'accession-number'
                ? 'ServiceRequest.identifier'
                : 'ServiceRequest.supportingInfo'
              : 'ServiceRequest.code',
        ],
      });
    case 'unknown-order':
      return refuse(404, {
        severity: 'error',
        code: 'not-found',
        diagnostics: 'no order for this ServiceRequest',
      });
    default:
      return unexpectedResult(r?.kind);
  }
}
