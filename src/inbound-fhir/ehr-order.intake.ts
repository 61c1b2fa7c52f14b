import type { OperationOutcomeIssue, ServiceRequest } from '@medplum/fhirtypes';
import { KeyedMutex } from '../common/keyed-mutex';
import { uuidv7 } from '../common/uuid-v7';
import { dedupeQuirks } from '../common/quirks';
import type { ToleratedQuirk } from '../domain/order-request';
import type { IntakeOrder } from '../orders/order-intake.service';
import type { EhrFhirClient } from './ehr-fhir.client';
import {
  FHIR_JSON,
  fhirResponse,
  mapToOrder,
  type FhirOperationDeps,
} from './fhir-operation.shared';
import { servedServiceRequest } from './fhir-served.resources';
import { problemsOf } from './fhir-refusal.recorder';
import { DELETED_ON_EHR, type StoredResource } from '../persistence/fhir-resource.repository';
import { FhirError, operationOutcome } from './fhir.error';
import { validateFhirResource } from '../fhir/fhir-validator';
import { matchReplaces } from './replaces.matcher';
import { ReferenceResolver, type SiblingEntry } from './order-context.resolver';
import { isOlderVersion, versionTag } from './fhir-versions';
import { placerIdentifierOf } from '../mappings/fhir-order.extract-helpers';
import type { NotificationChange } from '../persistence/subscription.repository';
import { sameIdentifierText } from '../domain/identifier-form';

export interface EhrServiceRequest {
  sr: ServiceRequest;
  /** Absolute URL on the EHR (the identity of the request there). */
  fullUrl: string;
}

/** A notification (or catch-up search) as the intake records it, with its subscription effect. */
export interface NotificationRecord {
  raw: Buffer;
  contentType: string;
  messageType: string;
  idempotencyKey: string;
  quirks: ToleratedQuirk[];
  subscription: Omit<NotificationChange, 'subscriptionRef' | 'inboundMessageId'> & {
    ref: string;
  };
  /**
   * The sender whose POSTed requests this notification may take over by placer identifier
   * (`notificationPoster`): set when any sender token may post notifications
   * (FHIR_SUBSCRIPTION_TOKEN unset), so that one sender's notification never takes over and
   * cancels another's order. Unset: the EHR's channel, which takes over any sender's.
   */
  postedBy?: string;
}

/**
 * Whose POSTed requests a notification from `caller` may take over: with
 * FHIR_SUBSCRIPTION_TOKEN unset any sender token posts notifications, and only its own;
 * set, only the EHR's token reaches here (docs/fhir.md), and it takes over any.
 */
export function notificationPoster(
  caller: { sender: string },
  subscriptionToken: string | undefined,
): { postedBy?: string } {
  return subscriptionToken === undefined ? { postedBy: caller.sender } : {};
}

type EhrOrder = IntakeOrder & { item?: EhrServiceRequest; stored?: StoredResource<ServiceRequest> };

/** A request that is no order here (not active), kept for its version: `seen` its row, if any. */
interface Remembered {
  item: EhrServiceRequest;
  seen?: StoredResource<ServiceRequest>;
}

/**
 * The request we keep for an EHR URL, as the EHR withdrew it by deleting it (a DELETE, a focus
 * answered 410): read as a `revoked` version, so its order is cancelled as the
 * orderer's own cancel (ORC-1 CR, Task cancelled); a repeat finds that version already processed.
 */
export function deletedOnEhr(
  stored: StoredResource<ServiceRequest>,
  fullUrl: string,
): EhrServiceRequest {
  return {
    fullUrl,
    sr: { ...stored.resource, status: 'revoked', meta: { versionId: DELETED_ON_EHR } },
  };
}

/** The errors that kept a request from being an order, as warnings of the notification's answer. */
function notOrdered(fullUrl: string, issues: OperationOutcomeIssue[]): OperationOutcomeIssue[] {
  return issues
    .filter((i) => i.severity === 'error' || i.severity === 'fatal')
    .slice(0, 20)
    .map((i) => ({
      severity: 'warning',
      code: i.code,
      diagnostics: `${fullUrl} is no order: ${i.diagnostics ?? i.details?.text ?? i.code}`,
      ...(i.expression ? { expression: i.expression } : {}),
    }));
}

/** The EHR client, or a 422 saying what needs FHIR_SERVER_URL. */
export function requireEhr(ehr: EhrFhirClient | undefined, reason: string): EhrFhirClient {
  if (!ehr) {
    throw new FhirError(
      'invalid',
      `${reason} needs FHIR_SERVER_URL (the EHR's FHIR server), which is not configured`,
      [
        {
          severity: 'error',
          code: 'not-supported',
          diagnostics: `${reason}: FHIR_SERVER_URL is not configured`,
        },
      ],
    );
  }
  return ehr;
}

/** Who the EHR is, as a sender: its FHIR base. */
export function ehrSender(ehr: EhrFhirClient | undefined): string {
  return ehr ? `fhir-ehr:${ehr.baseUrl}` : 'fhir-ehr:unconfigured';
}

/**
 * ServiceRequests read from (or sent by) the EHR → orders, with the notification that brought
 * them and its effect on the subscription state, in one intake transaction.
 */
export class EhrOrderIntake {
  private readonly requests = new KeyedMutex();

  constructor(private readonly deps: FhirOperationDeps) {}

  private get sender(): string {
    return ehrSender(this.deps.ehr);
  }

  /** Records a notification that carries no order (handshake, heartbeat, resend). */
  async record(rec: NotificationRecord): Promise<void> {
    await this.ingestOrders(rec, [], new Map());
  }

  /**
   * New active requests are created; known ones update (or cancel) their order; a version
   * already processed is skipped.
   */
  async ingest(
    items: EhrServiceRequest[],
    siblings: SiblingEntry[],
    rec: NotificationRecord,
  ): Promise<OperationOutcomeIssue[]> {
    // One notification at a time per EHR request: HAPI FHIR's rest-hook deliverer sends a
    // request's versions on several threads at once. Read side by side, an active version 1
    // and its entered-in-error version 2 both found no order: 1 made one, 2 was "no order
    // here" and the order ran. In-process: replicas behind one endpoint still race.
    return this.requests.run(
      items.map((i) => i.fullUrl),
      () => this.ingestExclusive(items, siblings, rec),
    );
  }

  /**
   * The request POSTed to us (no EHR URL) that this EHR request is: the one under its placer
   * identifier, system and value. Not any shared identifier: one accession number covers
   * several requested procedures (CT chest and CT abdomen, two ServiceRequests with their own
   * ids and placer numbers), and matched by it the second was taken as a change of the first's
   * order (refused) and never ordered. A request read from the EHR under another URL is
   * another request (its id on the EHR is its identity there).
   */
  private async postedAs(
    sr: ServiceRequest,
    postedBy: string | undefined,
  ): Promise<StoredResource<ServiceRequest> | undefined> {
    const placer = placerOf(sr);
    if (!placer) return undefined;
    // `postedBy`: any sender's notification took over another sender's order under its placer
    // number (and cancelled it with a revoked version) while FHIR_SUBSCRIPTION_TOKEN was unset
    const candidates = await this.deps.resources.findPostedServiceRequestsByIdentifier(
      placer,
      postedBy,
    );
    return candidates.find((c) => {
      const held = placerOf(c.resource);
      return (
        held !== undefined &&
        sameIdentifierText(held.system, placer.system) &&
        sameIdentifierText(held.value, placer.value)
      );
    });
  }

  private async ingestExclusive(
    items: EhrServiceRequest[],
    siblings: SiblingEntry[],
    rec: NotificationRecord,
  ): Promise<OperationOutcomeIssue[]> {
    // The requests this notification brought that are no order: a warning each in the answer
    // (the EHR's delivery log showed "1 event(s) processed" and nothing of why none ran).
    const warnings: OperationOutcomeIssue[] = [];
    const known = await this.deps.resources.findBySourceUrls(items.map((i) => i.fullUrl));
    const resolver = new ReferenceResolver(siblings, this.deps.ehr);
    const orders: Array<
      IntakeOrder & { item: EhrServiceRequest; stored?: StoredResource<ServiceRequest> }
    > = [];
    let mappingVersion = '';
    const remembered: Remembered[] = [];
    for (const item of items) {
      const { sr } = item;
      const version = versionTag(sr);
      // Known by its EHR URL, or by its placer identifier when it was first POSTed to us. A
      // request deleted on the EHR and then made again under its id (HAPI FHIR takes a PUT of
      // a deleted resource as a create) is a new request: its first order was cancelled for
      // good by the deletion, and the new version was taken as a change of that ended order
      // (order.change-refused) and never ordered.
      const byUrl = known.get(item.fullUrl);
      const madeAgain = byUrl?.sourceVersion === DELETED_ON_EHR && version !== DELETED_ON_EHR;
      const seen = madeAgain ? undefined : (byUrl ?? (await this.postedAs(sr, rec.postedBy)));
      if (madeAgain && sr.status === 'active') {
        rec.quirks.push({
          code: 'notification-request-made-again',
          detail: `${item.fullUrl} was deleted on the EHR and is there again (version ${version}): a new order`,
        });
      }
      const cancelling = sr.status === 'revoked' || sr.status === 'entered-in-error';
      if (seen && seen.sourceVersion === version) {
        rec.quirks.push({
          code: 'notification-version-already-processed',
          detail: `${item.fullUrl} version ${version}`,
        });
        continue;
      }
      // A rest-hook deliverer with several threads, or a retry queue, delivers version 1
      // after version 2: applied, the older version undid the newer one (priority stat back
      // to routine; a version before the revoke changed the cancelled order and was served
      // as the current request). Version ids are compared when both are numbers (HAPI FHIR,
      // Oracle Health); another server's opaque ids (Medplum's UUIDs) cannot be ordered.
      if (seen && isOlderVersion(version, seen.sourceVersion)) {
        rec.quirks.push({
          code: 'notification-version-older',
          detail: `${item.fullUrl} version ${version} arrived after version ${seen.sourceVersion}: not applied`,
        });
        continue;
      }
      // A request seen only while it was no order (revoked, draft) is kept without an order:
      // its version is remembered, so a version from before it, delivered late, orders
      // nothing. The EHR's clerk entering an order in error seconds after making it, delivered
      // revoke first (HAPI FHIR's deliverer has several threads): the revoke was ignored,
      // then the create made an order that ran.
      const stored = seen?.orderId ? seen : undefined;
      if (!stored && sr.status !== 'active') {
        rec.quirks.push({
          code: 'notification-not-an-active-order',
          detail: `${item.fullUrl} has status ${sr.status} and no order here: ignored (its version ${version} kept)`,
        });
        remembered.push({ item, seen });
        continue;
      }
      // The EHR's request is held to the REST door's R4 rules (a dateTime without a zone became
      // the order's requestedAt, a narrative with <script> was stored and served back); a cancel
      // needs only its status, so a revoked version is never held up by them.
      const invalid = cancelling ? [] : validateFhirResource(sr);
      const { mapped, issues } = invalid.length
        ? { mapped: undefined, issues: invalid }
        : await refusalAsIssues(() =>
            mapToOrder(
              sr,
              resolver,
              { lenient: cancelling, srFullUrl: item.fullUrl, siblings },
              stored ? 'update' : 'create',
              this.deps.config,
            ),
          );
      if (mapped) {
        mappingVersion = mapped.mappingVersion;
        rec.quirks.push(...mapped.quirks);
      }
      if (issues.length > 0 || !mapped?.request) {
        // The notification itself is fine; this request is not an order we can run. Kept for the analyst.
        warnings.push(...notOrdered(item.fullUrl, issues));
        await this.deps.intake.recordRejected({
          transport: 'fhir-subscription',
          sender: this.sender,
          remoteAddress: null,
          messageType: 'ServiceRequest (from the EHR)',
          messageControlId: item.fullUrl,
          raw: Buffer.from(JSON.stringify(sr)),
          contentType: FHIR_JSON,
          quirks: [],
          response: fhirResponse(422, operationOutcome(issues), false),
          problems: problemsOf(issues, ''),
        });
        continue;
      }
      // what its `replaces` names among the EHR's requests we hold (never followed elsewhere)
      const replaces = cancelling
        ? []
        : await matchReplaces(sr, {
            relativeTo: 'ehr',
            sender: this.sender,
            ehr: this.deps.ehr,
            resources: this.deps.resources,
            at: 'ServiceRequest',
          });
      orders.push({
        request: mapped.request,
        lineage: mapped.lineage,
        sourceRef: item.fullUrl,
        targetOrderId: stored?.orderId ?? undefined,
        item,
        stored,
        ...(replaces.length ? { replaces } : {}),
      });
    }
    rec.quirks.push(...resolver.quirks);
    await this.ingestOrders(
      rec,
      orders,
      new Map(orders.map((o, k) => [k, o])),
      mappingVersion,
      remembered,
      warnings,
    );
    return warnings;
  }

  private async ingestOrders(
    rec: NotificationRecord,
    orders: IntakeOrder[],
    byIndex: Map<number, EhrOrder>,
    mappingVersion = 'fhir-order-mapping',
    remembered: Remembered[] = [],
    warnings: OperationOutcomeIssue[] = [],
  ): Promise<void> {
    const now = this.deps.clock().toISOString();
    await this.deps.intake.ingest(
      {
        transport: 'fhir-subscription',
        sender: this.sender,
        remoteAddress: null,
        messageType: rec.messageType,
        messageControlId: rec.subscription.eventNumbers.length
          ? rec.subscription.eventNumbers.join(',')
          : null,
        idempotencyKey: rec.idempotencyKey,
        raw: rec.raw,
        contentType: rec.contentType,
        quirks: dedupeQuirks(rec.quirks),
        mappingVersion,
        actor: this.sender,
        orders: orders.map(({ request, lineage, sourceRef, targetOrderId, replaces }) => ({
          request,
          lineage,
          sourceRef,
          targetOrderId,
          ...(replaces?.length ? { replaces } : {}),
        })),
      },
      {
        respond: (outcome) =>
          fhirResponse(
            200,
            operationOutcome([
              {
                severity: 'information',
                code: 'informational',
                diagnostics: outcome.results.length
                  ? outcome.results.map((r) => `${r.sourceRef}: ${r.kind}`).join('; ')
                  : `${rec.messageType} recorded`,
              },
              ...warnings,
            ]),
            true,
          ),
        afterStore: async (manager, stored) => {
          for (const [k, r] of stored.outcome.results.entries()) {
            const o = byIndex.get(k);
            if (!o?.item) continue;
            const tag = versionTag(o.item.sr);
            const source = o.item.fullUrl;
            if (r.kind === 'created') {
              await this.deps.resources.insertServiceRequest(manager, {
                id: r.orderId,
                orderId: r.orderId,
                sender: this.sender,
                resource: servedServiceRequest(o.item.sr, r.orderId, 1, now, source),
                lastUpdated: now,
                sourceUrl: source,
                sourceVersion: tag,
              });
            } else if (
              (r.kind === 'updated' ||
                r.kind === 'change-too-late' ||
                r.kind === 'cancel-accepted' ||
                r.kind === 'cancel-too-late') &&
              o.stored
            ) {
              const version = o.stored.versionId + 1;
              await this.deps.resources.updateServiceRequest(manager, {
                id: o.stored.id,
                resource: servedServiceRequest(o.item.sr, o.stored.id, version, now, source),
                versionId: version,
                lastUpdated: now,
                sourceVersion: tag,
                sourceUrl: source,
              });
            }
          }
          for (const { item, seen } of remembered) {
            const tag = versionTag(item.sr);
            if (seen) {
              await this.deps.resources.updateServiceRequest(manager, {
                id: seen.id,
                resource: servedServiceRequest(
                  item.sr,
                  seen.id,
                  seen.versionId + 1,
                  now,
                  item.fullUrl,
                ),
                versionId: seen.versionId + 1,
                lastUpdated: now,
                sourceVersion: tag,
              });
            } else {
              const id = uuidv7();
              await this.deps.resources.insertServiceRequest(manager, {
                id,
                orderId: null,
                sender: this.sender,
                resource: servedServiceRequest(item.sr, id, 1, now, item.fullUrl),
                lastUpdated: now,
                sourceUrl: item.fullUrl,
                sourceVersion: tag,
              });
            }
          }
          const { ref, ...change } = rec.subscription;
          await this.deps.subscriptions.recordNotification(manager, {
            subscriptionRef: ref,
            ...change,
            inboundMessageId: stored.inboundMessageId,
          });
        },
      },
    );
  }
}

/**
 * The mapping of one notified request, a refusal of it (422: a subject or study on another
 * server, a reference that climbs out of the base, a conditional reference matching none) as
 * that request's issues. Thrown, it refused the whole notification: the delivery's other
 * requests were never ordered, and the EHR's resend was refused the same way for ever. A 503
 * (the EHR could not be read) still refuses the notification, so that the EHR resends it.
 */
async function refusalAsIssues(map: () => ReturnType<typeof mapToOrder>): Promise<{
  mapped?: Awaited<ReturnType<typeof mapToOrder>>['mapped'];
  issues: OperationOutcomeIssue[];
}> {
  try {
    return await map();
  } catch (error) {
    if (error instanceof FhirError && error.code === 'invalid' && error.issues.length > 0)
      return { mapped: undefined, issues: error.issues };
    throw error;
  }
}

/** A request's placer identifier when it names its system (a bare number names no order). */
function placerOf(sr: ServiceRequest): { system: string; value: string } | undefined {
  // read before the request is validated: an `identifier` that is no array names no placer
  if (!Array.isArray(sr.identifier)) return undefined;
  const found = placerIdentifierOf(sr);
  const { system, value } = found?.id ?? {};
  return typeof system === 'string' && system && typeof value === 'string' && value
    ? { system, value }
    : undefined;
}
