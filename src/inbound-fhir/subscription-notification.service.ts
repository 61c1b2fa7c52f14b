import type { Bundle, Resource, ServiceRequest, Subscription } from '@medplum/fhirtypes';
import type { Logger } from 'pino';
import { sha256Hex } from '../common/hash';
import { dedupeQuirks } from '../common/quirks';
import { mapServiceRequest } from '../mappings/fhir-order.mapping';
import type { ToleratedQuirk } from '../orders/domain/order-request';
import type { IntakeOrder, OrderIntakeService } from '../orders/order-intake.service';
import { EhrFhirError, type EhrFhirClient } from './ehr-fhir.client';
import type { FhirFrontDoorConfig } from './fhir-front-door.config';
import { assertJsonMediaType, parseResource } from './fhir-http';
import type { FhirCaller, FhirAnswer } from './fhir-order.service';
import { toIssues } from './fhir-order.service';
import type { FhirResourceRepository, StoredResource } from './fhir-resource.repository';
import type { SubscriptionRepository, SubscriptionState } from './subscription.repository';
import { FhirError, operationOutcome } from './fhir.error';
import { buildOrderContext, ReferenceResolver, type SiblingEntry } from './order-context.resolver';
import { parseNotification, type ParsedNotification } from './subscription-notification.parser';

const FHIR_JSON = 'application/fhir+json';
const BACKPORT = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';

interface EhrServiceRequest {
  sr: ServiceRequest;
  /** Absolute URL on the EHR (the identity of the request there). */
  fullUrl: string;
}

interface NotificationRecord {
  raw: Buffer;
  contentType: string;
  messageType: string;
  idempotencyKey: string;
  quirks: ToleratedQuirk[];
  subscription: {
    ref: string;
    topic: string | null;
    status: string | null;
    kind: 'handshake' | 'heartbeat' | 'event' | 'catch-up' | 'other';
    eventNumbers: number[];
    handledUpTo?: number;
    eventAt?: string;
  };
}

/**
 * R4 Subscriptions Backport notifications (rest-hook), received at
 * POST /fhir/subscription-notifications. Handshakes and heartbeats are answered and recorded;
 * event notifications bring ServiceRequests in whichever payload the Subscription asked for
 * (`full-resource`: in the Bundle; `id-only`: read from the EHR; `empty`: searched for on the
 * EHR). Event numbers already processed are ignored; a gap in the numbers (or in
 * events-since-subscription-start) is caught up by a search on the EHR (errors.html).
 */
export class SubscriptionNotificationService {
  constructor(
    private readonly intake: OrderIntakeService,
    private readonly store: FhirResourceRepository,
    private readonly subscriptions: SubscriptionRepository,
    private readonly config: FhirFrontDoorConfig,
    private readonly ehr: EhrFhirClient | undefined,
    private readonly logger: Logger,
    private readonly clock: () => Date = () => new Date(),
  ) {}

  private get sender(): string {
    return this.ehr ? `fhir-ehr:${this.ehr.baseUrl}` : 'fhir-ehr:unconfigured';
  }

  async handle(caller: FhirCaller): Promise<FhirAnswer> {
    let parsed: ParsedNotification;
    try {
      assertJsonMediaType(caller.contentType);
      const resource = parseResource(caller.raw);
      if (resource.resourceType !== 'Bundle') {
        throw new FhirError(
          'bad-request',
          `a notification is a history Bundle, not a ${resource.resourceType}`,
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
      parsed = parseNotification(resource as Bundle);
      this.assertWithinEhr(parsed);
    } catch (error) {
      if (error instanceof FhirError) await this.refuse(caller, error);
      throw error;
    }
    const state = await this.subscriptions.findState(parsed.subscriptionRef);
    const base = {
      raw: caller.raw,
      contentType: caller.contentType,
      quirks: parsed.quirks,
    };
    const keyBase = `fhir-subscription|${parsed.subscriptionRef}`;
    switch (parsed.type) {
      case 'handshake':
      case 'heartbeat':
      case 'query-status':
      case 'query-event': {
        await this.record({
          ...base,
          messageType: `notification ${parsed.type}`,
          idempotencyKey: `${keyBase}|${parsed.type}|sha256:${sha256Hex(caller.raw)}`,
          subscription: {
            ref: parsed.subscriptionRef,
            topic: parsed.topic,
            status: parsed.status,
            kind:
              parsed.type === 'handshake' || parsed.type === 'heartbeat' ? parsed.type : 'other',
            eventNumbers: [],
            handledUpTo: parsed.type === 'handshake' ? parsed.eventsSinceStart : undefined,
          },
        });
        // A heartbeat saying more events happened than we processed: some were lost.
        if (
          parsed.type === 'heartbeat' &&
          parsed.eventsSinceStart !== undefined &&
          parsed.eventsSinceStart > (state?.lastEventNumber ?? 0)
        ) {
          await this.catchUp(parsed, state, parsed.eventsSinceStart);
        }
        return this.ok(`${parsed.type} recorded`);
      }
      case 'event-notification':
        return this.handleEvents(caller, parsed, state, keyBase);
      default:
        return parsed.type satisfies never;
    }
  }

  private ok(text: string): FhirAnswer {
    return {
      status: 200,
      resource: operationOutcome([
        { severity: 'information', code: 'informational', diagnostics: text },
      ]),
    };
  }

  private async handleEvents(
    caller: FhirCaller,
    parsed: ParsedNotification,
    state: SubscriptionState | undefined,
    keyBase: string,
  ): Promise<FhirAnswer> {
    const numbers = parsed.events.map((e) => e.number);
    const seen = await this.subscriptions.seenEvents(parsed.subscriptionRef, numbers);
    const fresh = parsed.events.filter((e) => !seen.has(e.number));
    const key = numbers.length
      ? `${keyBase}|events:${[...numbers].sort((a, b) => a - b).join(',')}`
      : `${keyBase}|sha256:${sha256Hex(caller.raw)}`;
    const quirks = [...parsed.quirks];
    if (numbers.length > 0 && fresh.length === 0) {
      // Every event was processed before: a resend. Answered from the stored answer.
      await this.record({
        raw: caller.raw,
        contentType: caller.contentType,
        quirks,
        messageType: 'notification event-notification (resend)',
        idempotencyKey: key,
        subscription: {
          ref: parsed.subscriptionRef,
          topic: parsed.topic,
          status: parsed.status,
          kind: 'event',
          eventNumbers: [],
        },
      });
      return this.ok('events already processed');
    }
    const last = state?.lastEventNumber ?? 0;
    const freshNumbers = fresh.map((e) => e.number);
    const minFresh = freshNumbers.length ? Math.min(...freshNumbers) : undefined;
    const maxFresh = freshNumbers.length ? Math.max(...freshNumbers) : undefined;
    const gap =
      (minFresh !== undefined && minFresh > last + 1) ||
      (parsed.eventsSinceStart !== undefined &&
        maxFresh !== undefined &&
        parsed.eventsSinceStart > maxFresh);

    const collected = new Map<string, EhrServiceRequest>();
    let needSearch = false;
    for (const event of fresh) {
      if (!event.focus) {
        needSearch = true; // `empty` payload: no focus, ask the EHR what changed
        continue;
      }
      if (!/(^|\/)ServiceRequest\/[^/]+(\/_history\/[^/]+)?$/.test(event.focus)) {
        quirks.push({
          code: 'notification-focus-not-servicerequest',
          detail: `event ${event.number}: focus ${event.focus.split('/').slice(-2, -1)[0] ?? 'unknown'} ignored`,
        });
        continue;
      }
      const focus = event.focus;
      const inBundle = parsed.entries.find(
        (e) =>
          e.hasResource &&
          (e.fullUrl === focus ||
            (e.fullUrl && focus.endsWith(`/${e.resource.resourceType}/${e.resource.id}`)) ||
            focus === `${e.resource.resourceType}/${e.resource.id}`),
      );
      if (inBundle && inBundle.resource.resourceType === 'ServiceRequest') {
        const fullUrl = this.absolute(inBundle.fullUrl ?? event.focus);
        collected.set(fullUrl, { sr: inBundle.resource as ServiceRequest, fullUrl });
        continue;
      }
      // id-only: read the focus from the EHR (fhir-kit-client).
      const sr = await this.readFromEhr<ServiceRequest>(caller, event.focus);
      const fullUrl = this.absolute(event.focus.replace(/\/_history\/[^/]+$/, ''));
      collected.set(fullUrl, { sr, fullUrl });
    }
    if (needSearch) {
      const since = state?.lastEventAt ?? undefined;
      for (const item of await this.searchEhr(caller, since)) collected.set(item.fullUrl, item);
    }
    const siblings: SiblingEntry[] = parsed.entries.filter((e) => e.hasResource);
    const eventAt = fresh
      .map((e) => e.timestamp)
      .filter((t): t is string => Boolean(t))
      .sort()
      .pop();
    await this.ingestFromEhr([...collected.values()], siblings, {
      raw: caller.raw,
      contentType: caller.contentType,
      quirks,
      messageType: `notification event-notification (${needSearch ? 'empty' : collected.size ? 'with focus' : 'no ServiceRequest'})`,
      idempotencyKey: key,
      subscription: {
        ref: parsed.subscriptionRef,
        topic: parsed.topic,
        status: parsed.status,
        kind: 'event',
        eventNumbers: freshNumbers,
        handledUpTo: gap ? undefined : maxFresh,
        eventAt: eventAt ? new Date(eventAt).toISOString() : undefined,
      },
    });
    if (gap) {
      await this.catchUp(parsed, state, Math.max(parsed.eventsSinceStart ?? 0, maxFresh ?? 0));
    }
    return this.ok(
      `${fresh.length} event(s) processed${gap ? '; missed events caught up by search' : ''}`,
    );
  }

  /**
   * Every URL the notification names must lie within FHIR_SERVER_URL (docs/security.md): a
   * focus on another host would otherwise be read with the EHR's credential and audited as
   * the EHR's answer. Refused as a whole, before anything is read, naming the element.
   */
  private assertWithinEhr(parsed: ParsedNotification): void {
    if (!this.ehr) return;
    for (const ref of parsed.references) {
      if (/^(urn:|#)/i.test(ref.value) || this.ehr.isOurs(ref.value)) continue;
      const diagnostics = `${ref.expression} names a URL outside the EHR's FHIR base (FHIR_SERVER_URL); nothing was read from it`;
      throw new FhirError('invalid', diagnostics, [
        { severity: 'error', code: 'security', diagnostics, expression: [ref.expression] },
      ]);
    }
  }

  private absolute(ref: string): string {
    return this.ehr ? this.ehr.absolute(ref) : ref;
  }

  private requireEhr(reason: string): EhrFhirClient {
    if (!this.ehr) {
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
    return this.ehr;
  }

  private async readFromEhr<T extends Resource>(caller: FhirCaller, ref: string): Promise<T> {
    const ehr = this.requireEhr('an id-only notification');
    try {
      return await ehr.read<T>(ref);
    } catch (error) {
      const e = new FhirError(
        'upstream-unavailable',
        `could not read ${ref} from the EHR: ${(error as Error).message}; resend the notification (or wait for the next heartbeat: the gap is caught up by search)`,
      );
      if (error instanceof EhrFhirError && error.status === 404) {
        this.logger.warn({ status: 404 }, 'notification focus not found on the EHR');
      }
      await this.refuse(caller, e);
      throw e;
    }
  }

  private async searchEhr(
    caller: FhirCaller | undefined,
    since: Date | undefined,
  ): Promise<EhrServiceRequest[]> {
    const ehr = this.requireEhr('an empty notification or a catch-up');
    const params: Record<string, string | number> = { ...this.config.catchUpSearch, _count: 100 };
    if (since) params._lastUpdated = `ge${since.toISOString()}`;
    else params._sort = '-_lastUpdated';
    try {
      const found = await ehr.searchAll<ServiceRequest>('ServiceRequest', params, since ? 20 : 1);
      return found.map((f) => ({
        sr: f.resource,
        fullUrl: f.fullUrl.replace(/\/_history\/[^/]+$/, ''),
      }));
    } catch (error) {
      const e = new FhirError(
        'upstream-unavailable',
        `could not search the EHR: ${(error as Error).message}`,
      );
      if (caller) await this.refuse(caller, e);
      throw e;
    }
  }

  /** Events went missing: search the EHR for ServiceRequests changed since the last event we handled. */
  private async catchUp(
    parsed: ParsedNotification,
    state: SubscriptionState | undefined,
    upTo: number,
  ): Promise<void> {
    if (!this.ehr) {
      this.logger.warn(
        { subscription: parsed.subscriptionRef },
        'events missed but FHIR_SERVER_URL is unset: cannot catch up',
      );
      return;
    }
    try {
      const since = state?.lastEventAt ?? state?.handshakeAt ?? undefined;
      const found = await this.searchEhr(undefined, since);
      const raw = Buffer.from(
        JSON.stringify({
          resourceType: 'Bundle',
          type: 'searchset',
          entry: found.map((f) => ({ fullUrl: f.fullUrl, resource: f.sr })),
        }),
      );
      await this.ingestFromEhr(found, [], {
        raw,
        contentType: FHIR_JSON,
        quirks: [],
        messageType: 'catch-up search',
        idempotencyKey: `fhir-subscription|${parsed.subscriptionRef}|catch-up|${upTo}|sha256:${sha256Hex(raw)}`,
        subscription: {
          ref: parsed.subscriptionRef,
          topic: parsed.topic,
          status: parsed.status,
          kind: 'catch-up',
          eventNumbers: [],
          handledUpTo: upTo,
        },
      });
      this.logger.info(
        { subscription: parsed.subscriptionRef, found: found.length, upTo },
        'missed subscription events caught up',
      );
    } catch (error) {
      // The gap stays recorded (last_event_number not advanced): the next heartbeat retries.
      this.logger.warn(
        { subscription: parsed.subscriptionRef, err: (error as Error).message },
        'catch-up failed',
      );
    }
  }

  /** Records a notification that carries no order (handshake, heartbeat, resend). */
  private async record(rec: NotificationRecord): Promise<void> {
    await this.ingestOrders(rec, [], new Map());
  }

  /**
   * ServiceRequests read from (or sent by) the EHR → orders. New active requests are created;
   * known ones update (or cancel) their order; a version already processed is skipped.
   */
  private async ingestFromEhr(
    items: EhrServiceRequest[],
    siblings: SiblingEntry[],
    rec: NotificationRecord,
  ): Promise<void> {
    const known = await this.store.findBySourceUrls(items.map((i) => i.fullUrl));
    const resolver = new ReferenceResolver(siblings, this.ehr);
    const orders: Array<
      IntakeOrder & { item: EhrServiceRequest; stored?: StoredResource<ServiceRequest> }
    > = [];
    let mappingVersion = '';
    for (const item of items) {
      const { sr } = item;
      // Known by its EHR URL, or by a business identifier when it was first POSTed to us.
      const stored =
        known.get(item.fullUrl) ??
        (await this.store.findServiceRequestByIdentifier(sr.identifier ?? []));
      const version = versionTag(sr);
      const cancelling = sr.status === 'revoked' || sr.status === 'entered-in-error';
      if (stored && stored.sourceVersion === version) {
        rec.quirks.push({
          code: 'notification-version-already-processed',
          detail: `${item.fullUrl} version ${version}`,
        });
        continue;
      }
      if (!stored && sr.status !== 'active') {
        rec.quirks.push({
          code: 'notification-not-an-active-order',
          detail: `${item.fullUrl} has status ${sr.status} and no order here: ignored`,
        });
        continue;
      }
      const built = await buildOrderContext(sr, resolver, {
        lenient: cancelling,
        srFullUrl: item.fullUrl,
        siblings,
      });
      const mapped = mapServiceRequest(
        sr,
        built.ctx,
        stored ? 'update' : 'create',
        this.config.mapping,
      );
      mappingVersion = mapped.mappingVersion;
      rec.quirks.push(...mapped.quirks);
      const issues = [
        ...built.issues,
        ...toIssues(mapped.issues.filter((i) => i.severity === 'error')),
      ];
      if (issues.length > 0 || !mapped.request) {
        // The notification itself is fine; this request is not an order we can run. Kept for the analyst.
        await this.intake.recordRejected({
          transport: 'fhir-subscription',
          sender: this.sender,
          remoteAddress: null,
          messageType: 'ServiceRequest (from the EHR)',
          messageControlId: item.fullUrl,
          raw: Buffer.from(JSON.stringify(sr)),
          contentType: FHIR_JSON,
          quirks: [],
          response: {
            code: '422',
            body: Buffer.from(JSON.stringify(operationOutcome(issues))),
            contentType: FHIR_JSON,
            accepted: false,
          },
          problems: issues.map((i) => ({
            location: i.expression?.[0],
            code: String(i.code),
            message: i.diagnostics ?? '',
          })),
        });
        continue;
      }
      orders.push({
        request: mapped.request,
        lineage: mapped.lineage,
        sourceRef: item.fullUrl,
        targetOrderId: stored?.orderId ?? undefined,
        item,
        stored,
      });
    }
    rec.quirks.push(...resolver.quirks);
    await this.ingestOrders(rec, orders, new Map(orders.map((o, k) => [k, o])), mappingVersion);
  }

  private async ingestOrders(
    rec: NotificationRecord,
    orders: IntakeOrder[],
    byIndex: Map<
      number,
      IntakeOrder & { item?: EhrServiceRequest; stored?: StoredResource<ServiceRequest> }
    >,
    mappingVersion = 'fhir-order-mapping',
  ): Promise<void> {
    const now = this.clock().toISOString();
    await this.intake.ingest(
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
        orders: orders.map(({ request, lineage, sourceRef, targetOrderId }) => ({
          request,
          lineage,
          sourceRef,
          targetOrderId,
        })),
        afterStore: async (manager, stored) => {
          for (const [k, r] of stored.outcome.results.entries()) {
            const o = byIndex.get(k);
            if (!o?.item) continue;
            const tag = versionTag(o.item.sr);
            if (r.kind === 'created') {
              await this.store.insertServiceRequest(manager, {
                id: r.orderId,
                orderId: r.orderId,
                sender: this.sender,
                resource: served(o.item.sr, r.orderId, 1, now, o.item.fullUrl),
                lastUpdated: now,
                sourceUrl: o.item.fullUrl,
                sourceVersion: tag,
              });
            } else if (
              (r.kind === 'updated' ||
                r.kind === 'cancel-accepted' ||
                r.kind === 'cancel-too-late') &&
              o.stored
            ) {
              const version = o.stored.versionId + 1;
              await this.store.updateServiceRequest(manager, {
                id: o.stored.id,
                resource: served(o.item.sr, o.stored.id, version, now, o.item.fullUrl),
                versionId: version,
                lastUpdated: now,
                sourceVersion: tag,
                sourceUrl: o.item.fullUrl,
              });
            }
          }
          await this.subscriptions.recordNotification(manager, {
            subscriptionRef: rec.subscription.ref,
            topic: rec.subscription.topic,
            status: rec.subscription.status,
            kind: rec.subscription.kind,
            eventNumbers: rec.subscription.eventNumbers,
            handledUpTo: rec.subscription.handledUpTo,
            eventAt: rec.subscription.eventAt,
            inboundMessageId: stored.inboundMessageId,
          });
        },
      },
      (outcome) => ({
        code: '200',
        body: Buffer.from(
          JSON.stringify(
            operationOutcome([
              {
                severity: 'information',
                code: 'informational',
                diagnostics: outcome.results.length
                  ? outcome.results.map((r) => `${r.sourceRef}: ${r.kind}`).join('; ')
                  : `${rec.messageType} recorded`,
              },
            ]),
          ),
        ),
        contentType: FHIR_JSON,
        accepted: true,
      }),
    );
  }

  private async refuse(caller: FhirCaller, error: FhirError): Promise<void> {
    try {
      await this.intake.recordRejected({
        transport: 'fhir-subscription',
        sender: caller.sender,
        remoteAddress: caller.remoteAddress,
        messageType: 'notification',
        messageControlId: null,
        raw: caller.raw,
        contentType: caller.contentType,
        quirks: [],
        response: {
          code: String(error.httpStatus),
          body: Buffer.from(JSON.stringify(error.toOperationOutcome())),
          contentType: FHIR_JSON,
          accepted: false,
        },
        problems: error.issues.map((i) => ({
          location: i.expression?.[0],
          code: String(i.code),
          message: i.diagnostics ?? error.message,
        })),
      });
    } catch (storeError) {
      this.logger.error(
        { err: (storeError as Error).message },
        'refused notification could not be stored',
      );
    }
  }

  /**
   * Creates our Subscription on the EHR (R4 backport-subscription profile: topic canonical in
   * `criteria`, filter and payload content as extensions). Conditional on the endpoint, so a
   * restart does not create a second one.
   */
  async ensureSubscription(): Promise<string | undefined> {
    const want = this.config.subscription;
    if (!want || !this.ehr) return undefined;
    const subscription: Subscription = {
      resourceType: 'Subscription',
      meta: { profile: [`${BACKPORT}/backport-subscription`] },
      status: 'requested',
      reason: 'Imaging-AI adapter: orders (ServiceRequest) for AI analysis',
      criteria: want.topic,
      ...(want.filter
        ? {
            _criteria: {
              extension: [
                { url: `${BACKPORT}/backport-filter-criteria`, valueString: want.filter },
              ],
            },
          }
        : {}),
      channel: {
        type: 'rest-hook',
        endpoint: want.endpoint,
        payload: FHIR_JSON,
        _payload: {
          extension: [{ url: `${BACKPORT}/backport-payload-content`, valueCode: want.payload }],
        },
        ...(want.header ? { header: [want.header] } : {}),
      },
    } as Subscription;
    const created = await this.ehr.create(subscription, {
      'If-None-Exist': `url=${encodeURIComponent(want.endpoint)}`,
    });
    this.logger.info({ subscription: created.id }, 'Subscription on the EHR ensured');
    return created.id;
  }
}

function versionTag(sr: ServiceRequest): string {
  return sr.meta?.versionId ?? sr.meta?.lastUpdated ?? `sha256:${sha256Hex(JSON.stringify(sr))}`;
}

/** The EHR's request as we serve it: our id and version; meta.source says where it lives. */
function served(
  sr: ServiceRequest,
  id: string,
  version: number,
  now: string,
  source: string,
): ServiceRequest {
  return { ...sr, id, meta: { ...sr.meta, versionId: String(version), lastUpdated: now, source } };
}
