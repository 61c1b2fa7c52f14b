import type { OperationOutcomeIssue, ServiceRequest } from '@medplum/fhirtypes';
import { CoalescedRuns } from '../common/coalesced-runs';
import { sha256Hex } from '../common/hash';
import { FHIR_ID } from '../fhir/fhir-primitives';
import type { ToleratedQuirk } from '../domain/order-request';
import {
  deletedOnEhr,
  EhrOrderIntake,
  notificationPoster,
  requireEhr,
  type EhrServiceRequest,
} from './ehr-order.intake';
import { assertJsonMediaType, bodyStalled, bodyTooLarge } from './fhir-http';
import {
  parseTyped,
  type FhirAnswer,
  type FhirCaller,
  type FhirOperationDeps,
} from './fhir-operation.shared';
import { FhirError, operationOutcome } from './fhir.error';
import type { SubscriptionCatchUp } from './subscription-catch-up.service';

/**
 * How far back a search after a payload-less notification reaches before the last one we
 * handled: the EHR's clock and its commit of the change may lag ours; a version already
 * processed is skipped, so the overlap costs nothing.
 */
const SEARCH_OVERLAP_MS = 5 * 60_000;

function ok(text: string, warnings: OperationOutcomeIssue[] = []): FhirAnswer {
  return {
    status: 200,
    resource: operationOutcome([
      { severity: 'information', code: 'informational', diagnostics: text },
      ...warnings,
    ]),
  };
}

/**
 * The `<id>` of `ServiceRequest/<id>` under the endpoint is the EHR's logical id (R4
 * datatypes.html#id), and becomes `<FHIR_SERVER_URL>/ServiceRequest/<id>`, the URL the order
 * is filed and read under. Anything else is refused 400 before a URL is made: `../x` (sent as
 * `..%2Fx`) failed the EHR base check and was answered 500, and `.` (`%2e`), a valid id by the
 * pattern alone, resolved to the EHR's `ServiceRequest/` collection, filed as the request.
 */
function checkPathId(id: string): void {
  if (FHIR_ID.test(id) && !/^\.+$/.test(id)) return;
  const diagnostics = `the id in the URL is not a FHIR id of a ServiceRequest on the EHR (R4 datatypes.html#id: 1-64 letters, digits, '-' and '.', not dots alone)`;
  throw new FhirError('bad-request', diagnostics, [
    { severity: 'error', code: 'invalid', diagnostics, expression: ['ServiceRequest.id'] },
  ]);
}

/**
 * Classic R4 rest-hook notifications (R4 subscription.html, channel type `rest-hook`, no
 * Backport topic), as HAPI FHIR's rest-hook deliverer sends them to the channel endpoint:
 *
 * - no `channel.payload`: `POST <endpoint>` with no body, "something matching the criteria
 *   changed". Read like a Backport `empty` event: the EHR is searched for what changed.
 * - a payload: `PUT <endpoint>/ServiceRequest/<id>` carrying the resource (created or updated),
 *   `DELETE <endpoint>/ServiceRequest/<id>` when it was deleted (the order is cancelled).
 *
 * The empty POST was answered 400 ("the body is empty") and the PUT/DELETE 404: such an EHR
 * could never deliver an order, and retried for ever. A classic notification names no
 * Subscription: its state is kept under one reference per EHR (`classicSubscriptionRef`).
 */
export class RestHookNotificationHandler {
  /** The EHR searches of payload-less notifications, one at a time (see `empty`). */
  private readonly searches = new CoalescedRuns<{ key: string; found: number }>();

  constructor(
    private readonly deps: FhirOperationDeps,
    private readonly orders: EhrOrderIntake,
    private readonly catchUp: SubscriptionCatchUp,
  ) {}

  /** The subscription state key of the EHR's classic rest-hook Subscription(s). */
  private get ref(): string {
    return `rest-hook:${this.deps.ehr?.baseUrl ?? 'unconfigured'}`;
  }

  private subscription(eventAt: string | undefined) {
    return {
      ref: this.ref,
      topic: null,
      status: 'active',
      kind: 'event' as const,
      eventNumbers: [],
      eventAt,
    };
  }

  /**
   * `POST <endpoint>` with no body: search the EHR for ServiceRequests changed since the last
   * one. HAPI FHIR sends one such POST per changed resource, at once: a bulk load of 200
   * requests was 200 concurrent searches, each reading every change (76 s, 15,382 reads of the
   * EHR, /health 2.6 s late). The searches are coalesced (`CoalescedRuns`): one at a time,
   * and a notification that arrives while one runs is answered by the next search, which
   * starts after it and so sees its change; such a notification is kept as a duplicate of
   * the search that answered it.
   */
  async empty(caller: FhirCaller): Promise<FhirAnswer> {
    await this.guard(caller, 'notification', () =>
      requireEhr(this.deps.ehr, 'a rest-hook notification without payload'),
    );
    let ranHere = false;
    const outcome = await this.searches
      .run(() => {
        ranHere = true;
        return this.searchAndIngest(caller);
      })
      .catch(async (error: unknown) => {
        // The search that was to answer this notification failed (the EHR unreachable): kept
        // refused like that search's own notification, and answered with its error.
        if (!ranHere && error instanceof FhirError) {
          await this.deps.refusals.record(caller, 'fhir-subscription', 'notification', error);
        }
        throw error;
      });
    if (outcome.kind === 'covered') {
      await this.orders.record({
        raw: caller.raw,
        contentType: caller.contentType,
        quirks: [],
        messageType: 'notification rest-hook (no payload)',
        idempotencyKey: outcome.value.key,
        subscription: this.subscription(undefined),
      });
    }
    return ok(
      `${outcome.value.found} ServiceRequest(s) found changed on the EHR and processed${outcome.kind === 'covered' ? ' (by a search that started after this notification arrived)' : ''}`,
    );
  }

  private async searchAndIngest(caller: FhirCaller): Promise<{ key: string; found: number }> {
    const state = await this.deps.subscriptions.findState(this.ref);
    const startedAt = this.deps.clock().getTime();
    const since = state?.lastEventAt
      ? new Date(state.lastEventAt.getTime() - SEARCH_OVERLAP_MS)
      : undefined;
    const found = await this.catchUp.search(caller, since);
    const searched = JSON.stringify(found.map((f) => [f.fullUrl, f.sr.meta?.versionId ?? f.sr]));
    // The same search answer again is the same notification: nothing changed.
    const key = `fhir-subscription|${this.ref}|empty|sha256:${sha256Hex(searched)}`;
    await this.orders.ingest(found, [], {
      raw: caller.raw,
      contentType: caller.contentType,
      quirks: [
        {
          code: 'notification-rest-hook-empty',
          detail: `R4 rest-hook without payload: the EHR was searched (${found.length} ServiceRequest(s) changed since ${since?.toISOString() ?? 'the latest'})`,
        },
      ],
      messageType: 'notification rest-hook (no payload)',
      idempotencyKey: key,
      subscription: this.subscription(new Date(startedAt).toISOString()),
      ...notificationPoster(caller, this.deps.config.subscriptionToken),
    });
    return { key, found: found.length };
  }

  /** `PUT <endpoint>/ServiceRequest/<id>`: the EHR's request as it now is. */
  async updated(caller: FhirCaller, id: string): Promise<FhirAnswer> {
    const sr = await this.guard(caller, 'notification rest-hook (ServiceRequest)', () => {
      checkPathId(id);
      assertJsonMediaType(caller.contentType, caller.raw, {
        contentEncoding: caller.contentEncoding,
      });
      const parsed = parseTyped<ServiceRequest>(
        caller.raw,
        'ServiceRequest',
        this.deps.config.maxJsonValues,
      );
      if (parsed.id !== id) {
        // R4 http.html#update: the id in the body SHALL match the URL's.
        const diagnostics = `the ServiceRequest's id (${parsed.id ?? 'none'}) is not the id in the URL (${id})`;
        throw new FhirError('bad-request', diagnostics, [
          { severity: 'error', code: 'invalid', diagnostics, expression: ['ServiceRequest.id'] },
        ]);
      }
      // Held to the R4 rules by the intake (a request that breaks them is kept refused, 200).
      return parsed;
    });
    const fullUrl = this.fullUrl(id);
    const warnings = await this.orders.ingest([{ sr, fullUrl }], [], {
      raw: caller.raw,
      contentType: caller.contentType,
      quirks: [],
      messageType: 'notification rest-hook (ServiceRequest)',
      idempotencyKey: `fhir-subscription|${this.ref}|${fullUrl}|sha256:${sha256Hex(caller.raw)}`,
      subscription: this.subscription(undefined),
      ...notificationPoster(caller, this.deps.config.subscriptionToken),
    });
    return ok(`${fullUrl} processed`, warnings);
  }

  /** `DELETE <endpoint>/ServiceRequest/<id>`: gone from the EHR; its order (if any) is cancelled. */
  async deleted(caller: FhirCaller, id: string): Promise<FhirAnswer> {
    // 413 over the limit; 400 for a path id that names no EHR request
    await this.guard(caller, 'notification rest-hook (ServiceRequest deleted)', () =>
      checkPathId(id),
    );
    const fullUrl = this.fullUrl(id);
    const stored = (await this.deps.resources.findBySourceUrls([fullUrl])).get(fullUrl);
    const quirks: ToleratedQuirk[] = [
      {
        code: 'notification-focus-deleted',
        detail: `${fullUrl} was deleted on the EHR: ${stored?.orderId ? 'its order is cancelled' : 'no order here, nothing ordered'}`,
      },
    ];
    const items: EhrServiceRequest[] = stored ? [deletedOnEhr(stored, fullUrl)] : [];
    await this.orders.ingest(items, [], {
      raw: caller.raw,
      contentType: caller.contentType,
      quirks,
      messageType: 'notification rest-hook (ServiceRequest deleted)',
      // Per request we keep: a request made again after a DELETE and deleted once more is
      // another deletion (it was answered as the first one's resend, and its order ran on).
      idempotencyKey: `fhir-subscription|${this.ref}|${fullUrl}|deleted|${stored?.id ?? 'none'}`,
      subscription: this.subscription(undefined),
      ...notificationPoster(caller, this.deps.config.subscriptionToken),
    });
    return ok(`${fullUrl} deleted on the EHR${stored?.orderId ? ': its order is cancelled' : ''}`);
  }

  private fullUrl(id: string): string {
    const ref = `ServiceRequest/${encodeURIComponent(id)}`;
    return this.deps.ehr ? this.deps.ehr.absolute(ref) : ref;
  }

  /** Runs a check; a FhirError it throws is kept with the raw input (as every refusal), then answered. */
  private async guard<T>(caller: FhirCaller, messageType: string, check: () => T): Promise<T> {
    try {
      // over FHIR_MAX_BODY_BYTES: answered 413 and kept with the body's head
      if (caller.tooLarge !== undefined) throw bodyTooLarge(caller.tooLarge);
      if (caller.stalled !== undefined) throw bodyStalled(caller.stalled);
      return check();
    } catch (error) {
      if (error instanceof FhirError) {
        await this.deps.refusals.record(caller, 'fhir-subscription', messageType, error);
      }
      throw error;
    }
  }
}
