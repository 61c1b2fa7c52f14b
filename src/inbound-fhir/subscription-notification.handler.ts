import type { Bundle, OperationOutcomeIssue, Resource, ServiceRequest } from '@medplum/fhirtypes';
import { sha256Hex } from '../common/hash';
import { FHIR_ID } from '../fhir/fhir-primitives';
import { EhrFhirError } from './ehr-fhir.client';
import {
  deletedOnEhr,
  EhrOrderIntake,
  notificationPoster,
  requireEhr,
  type EhrServiceRequest,
} from './ehr-order.intake';
import { isOlderVersion, newestVersion, versionTag } from './fhir-versions';
import { assertJsonMediaType, bodyStalled, bodyTooLarge, parseResource } from './fhir-http';
import type { FhirAnswer, FhirCaller, FhirOperationDeps } from './fhir-operation.shared';
import { FhirError, operationOutcome } from './fhir.error';
import type { SiblingEntry } from './order-context.resolver';
import type { SubscriptionCatchUp } from './subscription-catch-up.service';
import {
  parseNotification,
  type NotificationEvent,
  type ParsedNotification,
} from './subscription-notification.parser';
import type { SubscriptionState } from '../persistence/subscription.repository';
import type { ToleratedQuirk } from '../domain/order-request';

/**
 * A focus read the EHR answered 410 Gone (deleted there) or 404 Not Found (not there, or not
 * there yet: see deletedOnEhr).
 */
interface Gone {
  gone: 404 | 410;
}

/**
 * How long after its event a focus the EHR answers 404 for is taken as not there yet (a read
 * replica behind the event) rather than not there: the notification is refused 503 and resent.
 */
const FOCUS_NOT_FOUND_GRACE_MS = 5 * 60_000;

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
 * R4 Subscriptions Backport notifications (rest-hook), received at
 * POST /fhir/subscription-notifications. Handshakes and heartbeats are answered and recorded;
 * event notifications bring ServiceRequests in whichever payload the Subscription asked for
 * (`full-resource`: in the Bundle; `id-only`: read from the EHR; `empty`: searched for on the
 * EHR). An event processed already (same number, same focus) is a resend and ignored; a
 * number processed for another focus means the EHR's numbering went back without a handshake
 * and is processed (`subscription-events-restarted`); a gap in the numbers (or in
 * events-since-subscription-start) is caught up by a search on the EHR (errors.html).
 */
export class SubscriptionNotificationHandler {
  constructor(
    private readonly deps: FhirOperationDeps,
    private readonly orders: EhrOrderIntake,
    private readonly catchUp: SubscriptionCatchUp,
  ) {}

  async handle(caller: FhirCaller): Promise<FhirAnswer> {
    try {
      return await this.handleNotification(caller);
    } catch (caught) {
      // A TypeError means a shape the parser's checks let through (e.g. in a full-resource
      // entry): the notification is refused (422) and kept, as on the REST API, never a 500.
      if (!(caught instanceof TypeError)) throw caught;
      this.deps.logger.warn({ err: caught.message }, 'notification body could not be read');
      const error = new FhirError(
        'invalid',
        `the notification could not be read: ${caught.message}`,
      );
      await this.refuse(caller, error);
      throw error;
    }
  }

  private async handleNotification(caller: FhirCaller): Promise<FhirAnswer> {
    let parsed: ParsedNotification;
    try {
      // over FHIR_MAX_BODY_BYTES: answered 413 and kept with the body's head
      if (caller.tooLarge !== undefined) throw bodyTooLarge(caller.tooLarge);
      if (caller.stalled !== undefined) throw bodyStalled(caller.stalled);
      assertJsonMediaType(caller.contentType, caller.raw, {
        notification: true,
        contentEncoding: caller.contentEncoding,
      });
      const resource = parseResource(caller.raw, this.deps.config.maxJsonValues);
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
      this.assertWithinEventBound(parsed);
    } catch (error) {
      if (error instanceof FhirError) await this.refuse(caller, error);
      throw error;
    }
    const state = await this.deps.subscriptions.findState(parsed.subscriptionRef);
    const keyBase = `fhir-subscription|${parsed.subscriptionRef}`;
    switch (parsed.type) {
      case 'handshake':
      case 'heartbeat':
      case 'query-status':
      case 'query-event': {
        // A heartbeat counting fewer events since the Subscription's start than we processed:
        // the EHR's numbering went back without a handshake (restored, its subscription store
        // reset). Recorded, and the numbering counted from its start: later events under
        // numbers we processed are judged by their focus, and the events it counts, which may
        // not have reached us, are caught up by search (as for a heartbeat ahead of us).
        const restart =
          parsed.type === 'heartbeat' &&
          parsed.eventsSinceStart !== undefined &&
          state !== undefined &&
          parsed.eventsSinceStart < state.lastEventNumber
            ? this.restarted(
                parsed,
                state,
                0,
                `heartbeat counts ${parsed.eventsSinceStart} event(s) since the subscription's start, ${state.lastEventNumber} were processed`,
              )
            : undefined;
        await this.orders.record({
          raw: caller.raw,
          contentType: caller.contentType,
          quirks: restart ? [...parsed.quirks, restart.quirk] : parsed.quirks,
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
            restart: restart?.change,
          },
        });
        // A heartbeat saying more events happened than we processed: some were lost.
        if (
          parsed.type === 'heartbeat' &&
          parsed.eventsSinceStart !== undefined &&
          parsed.eventsSinceStart > (restart ? 0 : (state?.lastEventNumber ?? 0))
        ) {
          await this.catchUp.catchUp(parsed, parsed.eventsSinceStart);
        }
        return ok(`${parsed.type} recorded`);
      }
      case 'event-notification':
        return this.handleEvents(caller, parsed, state, keyBase);
      default:
        return parsed.type satisfies never;
    }
  }

  private async handleEvents(
    caller: FhirCaller,
    parsed: ParsedNotification,
    state: SubscriptionState | undefined,
    keyBase: string,
  ): Promise<FhirAnswer> {
    const numbers = parsed.events.map((e) => e.number);
    const seen = await this.deps.subscriptions.seenEvents(parsed.subscriptionRef, numbers);
    const focusKeys = new Map(parsed.events.map((e) => [e, this.focusKey(e, parsed)]));
    // A number processed before that names another focus is no resend: the EHR's numbering
    // went back without a handshake (restored, its subscription store reset, the Subscription
    // re-created). By number alone it was "events already processed" and its order never made.
    const reused = parsed.events.filter((e) => {
      const before = seen.get(e.number);
      const now = focusKeys.get(e);
      return before != null && now != null && before !== now;
    });
    const fresh = parsed.events.filter((e) => !seen.has(e.number) || reused.includes(e));
    const last0 = state?.lastEventNumber ?? 0;
    const restartFrom = reused.length ? Math.min(...reused.map((e) => e.number)) : undefined;
    // The numbering went back below what we processed: its gaps are counted from its start.
    const wentBack = restartFrom !== undefined && restartFrom <= last0;
    const last = wentBack ? 0 : last0;
    const freshNumbers = fresh.map((e) => e.number);
    const minFresh = freshNumbers.length ? Math.min(...freshNumbers) : undefined;
    const maxFresh = freshNumbers.length ? Math.max(...freshNumbers) : undefined;
    const gap =
      (minFresh !== undefined && minFresh > last + 1) ||
      (parsed.eventsSinceStart !== undefined &&
        maxFresh !== undefined &&
        parsed.eventsSinceStart > maxFresh);
    const restart = reused.length
      ? this.restarted(
          parsed,
          state,
          wentBack ? (gap ? 0 : (maxFresh ?? 0)) : undefined,
          reused.length === 1
            ? `event ${reused[0]!.number} was processed before for another focus`
            : `events ${reused.map((e) => e.number).join(',')} were processed before for other focuses`,
        )
      : undefined;
    // Event numbers count from the last handshake, and from the last time they went back
    // without one: after the EHR restarts a Subscription's numbering, its event 1 is not the
    // event 1 answered before (it was, and never ordered).
    const restartedAt = restart?.change.at ?? state?.eventsRestartedAt?.toISOString();
    const epoch =
      (state?.handshakeAt ? `@${state.handshakeAt.toISOString()}` : '') +
      (restartedAt ? `~${restartedAt}` : '');
    const key = numbers.length
      ? `${keyBase}|events${epoch}:${[...numbers].sort((a, b) => a - b).join(',')}`
      : `${keyBase}|sha256:${sha256Hex(caller.raw)}`;
    const quirks = restart ? [...parsed.quirks, restart.quirk] : [...parsed.quirks];
    const subscription = {
      ref: parsed.subscriptionRef,
      topic: parsed.topic,
      status: parsed.status,
      kind: 'event' as const,
    };
    if (numbers.length > 0 && fresh.length === 0) {
      // Every event was processed before: a resend. Answered from the stored answer.
      await this.orders.record({
        raw: caller.raw,
        contentType: caller.contentType,
        quirks,
        messageType: 'notification event-notification (resend)',
        idempotencyKey: key,
        subscription: { ...subscription, eventNumbers: [] },
      });
      return ok('events already processed');
    }

    const collected = new Map<string, EhrServiceRequest>();
    let needSearch = false;
    for (const event of fresh) {
      if (!event.focus) {
        needSearch = true; // `empty` payload: no focus, ask the EHR what changed
        continue;
      }
      // A focus naming its entry by `urn:uuid:` (R4 bundle.html#references) is that entry's
      // resource. It was taken for no ServiceRequest ("focus unknown ignored"), nothing ordered.
      const byUrn = /^urn:/i.test(event.focus)
        ? parsed.entries.find(
            (e) => e.hasResource && e.fullUrl?.toLowerCase() === event.focus!.toLowerCase(),
          )
        : undefined;
      const focus = byUrn
        ? `${byUrn.resource.resourceType}/${byUrn.resource.id ?? ''}`
        : event.focus;
      if (!/(^|\/)ServiceRequest\/[^/]+(\/_history\/[^/]+)?$/.test(focus)) {
        quirks.push({
          code: 'notification-focus-not-servicerequest',
          detail: `event ${event.number}: focus ${focus.split('/').slice(-2, -1)[0] ?? 'unknown'} ignored`,
        });
        continue;
      }
      // Of several entries for the focus (versions 1 and 2 of one request in one delivery),
      // the newest: the first was taken, and version 1 undid version 2's stat or revoke.
      const inBundle = newestVersion(
        parsed.entries.filter(
          (e) =>
            e.hasResource &&
            (e.fullUrl === focus ||
              (e.fullUrl && focus.endsWith(`/${e.resource.resourceType}/${e.resource.id}`)) ||
              focus === `${e.resource.resourceType}/${e.resource.id}`),
        ),
      );
      if (inBundle && inBundle.resource.resourceType === 'ServiceRequest') {
        // Within FHIR_SERVER_URL (else refused), then known as an id-only focus is, by the
        // request's own URL: a versioned fullUrl (`…/ServiceRequest/7/_history/2`) was one
        // order per version, and the revoke under the plain URL found none of them.
        // An entry named by a `urn:uuid:`/`urn:oid:` fullUrl is the request the focus names
        // (it matched by type and id): known by the focus. The urn was resolved as a URL on
        // the EHR, and the notification was a 500.
        const named = this.absolute(
          inBundle.fullUrl && !/^urn:/i.test(inBundle.fullUrl) ? inBundle.fullUrl : focus,
        );
        const fullUrl = this.requestUrl(inBundle.resource.id, named);
        const before = collected.get(fullUrl)?.sr;
        if (!before || !isOlderVersion(versionTag(inBundle.resource), versionTag(before)))
          collected.set(fullUrl, { sr: inBundle.resource as ServiceRequest, fullUrl });
        continue;
      }
      // The notification says the focus was deleted (a history entry with request DELETE and
      // no resource, R4 http.html#history): as a 410, its order is cancelled, nothing is read.
      // Before, the EHR was read for it, and its 404 (a server that keeps no deleted versions)
      // left the order running ("a 404 is not a withdrawal").
      // An entry named by a `urn:uuid:` fullUrl is named by its request.url (`ServiceRequest/7`):
      // it was matched only by a URL fullUrl, and the order kept running.
      if (
        parsed.entries.some(
          (e) =>
            e.deleted &&
            (this.namesFocus(e.fullUrl, focus) ||
              (/^urn:/i.test(e.fullUrl ?? '') && this.namesFocus(e.deletedUrl, focus))),
        )
      ) {
        const deleted = await this.deletedOnEhr(caller, event, 410, quirks, 'deleted-entry');
        if (deleted) collected.set(deleted.fullUrl, deleted);
        continue;
      }
      // id-only naming a version we hold, or one older than it: nothing to read. Before, the
      // EHR was read for it on every event (a retry queue, a second topic), with its credential.
      if (await this.heldAlready(event, quirks)) continue;
      // id-only: read the focus from the EHR (EhrFhirClient).
      const sr = await this.readFromEhr<ServiceRequest>(caller, event.focus);
      if ('gone' in sr) {
        const deleted = await this.deletedOnEhr(caller, event, sr.gone, quirks);
        if (deleted) collected.set(deleted.fullUrl, deleted);
        continue;
      }
      // The EHR's identity of the request: its canonical URL, however the focus spelled it
      // (`?_format=json`, `%73pelled`, `/_history/2`): each spelling was another order.
      const fullUrl = this.absolute(`ServiceRequest/${encodeURIComponent(sr.id ?? '')}`);
      collected.set(fullUrl, { sr, fullUrl });
    }
    if (needSearch) {
      const since = state?.lastEventAt ?? undefined;
      for (const item of await this.catchUp.searchForEvents(
        parsed.subscriptionRef,
        caller,
        since,
      )) {
        collected.set(item.fullUrl, item);
      }
    }
    const siblings: SiblingEntry[] = parsed.entries.filter((e) => e.hasResource);
    const eventAt = fresh
      .map((e) => e.timestamp)
      .filter((t): t is string => Boolean(t))
      .sort()
      .pop();
    const warnings = await this.orders.ingest([...collected.values()], siblings, {
      raw: caller.raw,
      contentType: caller.contentType,
      quirks,
      messageType: `notification event-notification (${needSearch ? 'empty' : collected.size ? 'with focus' : 'no ServiceRequest'})`,
      idempotencyKey: key,
      subscription: {
        ...subscription,
        eventNumbers: freshNumbers,
        focusKeys: fresh.map((e) => focusKeys.get(e) ?? null),
        handledUpTo: gap ? undefined : maxFresh,
        restart: restart?.change,
        eventAt: eventAt ? new Date(eventAt).toISOString() : undefined,
      },
      ...notificationPoster(caller, this.deps.config.subscriptionToken),
    });
    if (gap) {
      await this.catchUp.catchUp(parsed, Math.max(parsed.eventsSinceStart ?? 0, maxFresh ?? 0));
    }
    return ok(
      `${fresh.length} event(s) processed${gap ? '; missed events caught up by search' : ''}`,
      warnings,
    );
  }

  /**
   * What an event names, as a key kept with its number (fhir_subscription_events.focus_key): a
   * resend names the same, a new event under a number the EHR used before (its numbering went
   * back) another. The focus reference with the version of its full resource in the Bundle
   * (versionId, else lastUpdated, else a hash of the resource), or with the version it pins
   * (`…/_history/2`); an unversioned id-only focus with the event's timestamp (the request's
   * next change is another event of the same reference); an `empty` event its timestamp. Null
   * when nothing tells events apart (empty without timestamp): judged by number, as before.
   * Hashed: bounded, and no resource content is kept.
   */
  private focusKey(event: NotificationEvent, parsed: ParsedNotification): string | null {
    if (!event.focus) return event.timestamp ? sha256Hex(`empty|${event.timestamp}`) : null;
    const inBundle = this.bundleEntryFor(parsed, event.focus);
    if (inBundle) return sha256Hex(`focus|${event.focus}|version|${versionTag(inBundle.resource)}`);
    if (/\/_history\/[^/]+$/.test(event.focus)) return sha256Hex(`focus|${event.focus}`);
    return sha256Hex(`focus|${event.focus}|at|${event.timestamp ?? ''}`);
  }

  /** Of several entries for the focus (versions 1 and 2 of one request), the newest. */
  private bundleEntryFor(
    parsed: ParsedNotification,
    focus: string,
  ): (SiblingEntry & { hasResource: boolean }) | undefined {
    return newestVersion(
      parsed.entries.filter(
        (e) =>
          e.hasResource &&
          (e.fullUrl === focus ||
            (e.fullUrl && focus.endsWith(`/${e.resource.resourceType}/${e.resource.id}`)) ||
            focus === `${e.resource.resourceType}/${e.resource.id}`),
      ),
    );
  }

  /**
   * The EHR's event numbering went back without a handshake: the quirk the audit shows the
   * analyst (numbers only, no PHI), a warning in the log, and the subscription's change: the
   * instant, which keys the events from then on (so a reused number's notification is not
   * taken for the old one's by its idempotency key, and its resend is), and, when the numbers
   * went back below what we processed, `lastEventNumber` to count the new numbering from.
   */
  private restarted(
    parsed: ParsedNotification,
    state: SubscriptionState | undefined,
    lastEventNumber: number | undefined,
    why: string,
  ): {
    quirk: ToleratedQuirk;
    change: { lastEventNumber?: number; at: string };
  } {
    this.deps.logger.warn(
      {
        subscription: parsed.subscriptionRef,
        lastEventNumber: state?.lastEventNumber,
        countingFrom: lastEventNumber,
      },
      "the EHR's subscription event numbers went back without a handshake",
    );
    const at = this.deps.clock().toISOString();
    return {
      quirk: {
        code: 'subscription-events-restarted',
        detail: `${why}: the EHR's event numbering went back without a handshake (restored, its subscription store reset, or the Subscription re-created); processed as new events, judged by their focus`,
      },
      change: lastEventNumber === undefined ? { at } : { lastEventNumber, at },
    };
  }

  /**
   * Every URL the notification names must lie within FHIR_SERVER_URL (docs/security.md): a
   * focus on another host would otherwise be read with the EHR's credential and audited as
   * the EHR's answer. Refused as a whole, before anything is read, naming the element.
   */
  private assertWithinEhr(parsed: ParsedNotification): void {
    const ehr = this.deps.ehr;
    if (!ehr) return;
    for (const ref of parsed.references) {
      if (/^(urn:|#)/i.test(ref.value)) continue;
      const why = ehr.whyNotOurs(ref.value);
      if (why === undefined) continue;
      const diagnostics = `${ref.expression} names ${why.text}; nothing was read from it`;
      throw new FhirError('invalid', diagnostics, [
        { severity: 'error', code: 'security', diagnostics, expression: [ref.expression] },
      ]);
    }
  }

  /** Whether an entry's fullUrl names the focus (absolute or relative, any version). */
  private namesFocus(fullUrl: string | undefined, focus: string): boolean {
    if (!fullUrl) return false;
    if (fullUrl === focus) return true;
    const plain = (u: string) => {
      try {
        return this.absolute(u).replace(/\/_history\/[^/]+$/, '');
      } catch {
        return undefined;
      }
    };
    const named = plain(fullUrl);
    return named !== undefined && named === plain(focus);
  }

  private absolute(ref: string): string {
    return this.deps.ehr ? this.deps.ehr.absolute(ref) : ref;
  }

  /** `<FHIR_SERVER_URL>/ServiceRequest/<id>`; without an EHR or a valid id, `named` unversioned. */
  private requestUrl(id: string | undefined, named: string): string {
    if (this.deps.ehr && id !== undefined && FHIR_ID.test(id) && !/^\.+$/.test(id))
      return this.deps.ehr.absolute(`ServiceRequest/${id}`);
    return named.replace(/\/_history\/[^/]+$/, '');
  }

  /**
   * The focus is gone from the EHR. 410 Gone says it was deleted there: the event is processed
   * (it was 503 for every resend, for ever), the order we have for that request is cancelled as
   * for a `revoked` version (the orderer withdrew it), and with none nothing is ordered
   * (`notification-focus-deleted`).
   *
   * 404 Not Found does not say as much: a server that keeps no deleted versions (HAPI after
   * `$expunge`, a request entered in error and purged) answers it, but so does a read replica
   * that has not caught up with the event yet, a server that hides what the caller may not
   * see, and a proxy routing the EHR's base wrongly (every read 404). So:
   * - an event younger than FOCUS_NOT_FOUND_GRACE_MS whose request we do not hold is refused
   *   503: the EHR resends it, by which time a lagging replica has the request;
   * - otherwise the event is processed (200, no endless resend) with
   *   `notification-focus-not-found`, and an order we hold is NOT cancelled: a clinical order
   *   is withdrawn by the EHR saying so (revoked, entered-in-error, DELETE, 410), never by a
   *   read that found nothing. The quirk and a warning tell the analyst to check with the EHR.
   */
  private async deletedOnEhr(
    caller: FhirCaller,
    event: { number: number; focus?: string; timestamp?: string },
    status: 404 | 410,
    quirks: ToleratedQuirk[],
    /** How the deletion was learnt: the EHR's answer to a read, or the notification's entry. */
    said: 'read' | 'deleted-entry' = 'read',
  ): Promise<EhrServiceRequest | undefined> {
    const focus = event.focus ?? '';
    // cut at the first ? or # by index: `/[?#].*$/` retried from every ? of a long focus
    const query = focus.search(/[?#]/);
    const bare = query < 0 ? focus : focus.slice(0, query);
    const fullUrl = this.absolute(bare.replace(/\/_history\/[^/]+$/, ''));
    const stored = (await this.deps.resources.findBySourceUrls([fullUrl])).get(fullUrl);
    if (status === 410) {
      quirks.push({
        code: 'notification-focus-deleted',
        detail: `event ${event.number}: ${fullUrl} ${said === 'read' ? 'is gone from the EHR (410)' : 'is deleted by the notification (entry with request DELETE)'}: ${stored?.orderId ? 'its order is cancelled' : 'no order here, nothing ordered'}`,
      });
      return stored ? deletedOnEhr(stored, fullUrl) : undefined;
    }
    const at = event.timestamp ? Date.parse(event.timestamp) : NaN;
    const age = Date.now() - at;
    if (!stored && Number.isFinite(at) && age < FOCUS_NOT_FOUND_GRACE_MS) {
      const e = new FhirError(
        'upstream-unavailable',
        `the EHR does not know ${fullUrl} yet (404) though event ${event.number} names it; resend the notification (a read replica may lag the event)`,
      );
      await this.refuse(caller, e);
      throw e;
    }
    this.deps.logger.warn(
      { status: 404, heldOrder: Boolean(stored?.orderId) },
      'notification focus not found on the EHR',
    );
    quirks.push({
      code: 'notification-focus-not-found',
      detail: `event ${event.number}: ${fullUrl} is not known to the EHR (404): ${stored?.orderId ? 'its order is kept (a 404 is not a withdrawal: revoke or delete the request on the EHR, or cancel the order here)' : 'no order here, nothing ordered'}`,
    });
    return undefined;
  }

  /**
   * Whether an id-only focus names a version (`ServiceRequest/<id>/_history/<v>`, R4
   * http.html#vread) that is the one we hold of that request, or older by numeric version id
   * (fhir-versions.ts): then nothing is read, and the event is recorded with the quirk the
   * intake gives such a version. A newer version, one that cannot be ordered (opaque ids), or
   * a request we hold none of, is read.
   */
  private async heldAlready(
    event: { number: number; focus?: string },
    quirks: ToleratedQuirk[],
  ): Promise<boolean> {
    const pinned =
      /(?:^|\/)ServiceRequest\/([A-Za-z0-9\-.]{1,64})\/_history\/([A-Za-z0-9\-.]{1,64})$/.exec(
        event.focus ?? '',
      );
    if (!pinned || !this.deps.ehr) return false;
    const [, id, version] = pinned as unknown as [string, string, string];
    const fullUrl = this.requestUrl(id, this.absolute(event.focus!));
    const held = (await this.deps.resources.findBySourceUrls([fullUrl])).get(
      fullUrl,
    )?.sourceVersion;
    if (!held || (held !== version && !isOlderVersion(version, held))) return false;
    quirks.push(
      held === version
        ? {
            code: 'notification-version-already-processed',
            detail: `event ${event.number}: ${fullUrl} version ${version} is held: not read`,
          }
        : {
            code: 'notification-version-older',
            detail: `event ${event.number}: ${fullUrl} version ${version} is older than version ${held} held: not read, not applied`,
          },
    );
    return true;
  }

  private async readFromEhr<T extends Resource>(
    caller: FhirCaller,
    ref: string,
  ): Promise<T | Gone> {
    const ehr = requireEhr(this.deps.ehr, 'an id-only notification');
    try {
      return await ehr.read<T>(ref);
    } catch (error) {
      if (error instanceof EhrFhirError && error.status === 410) return { gone: 410 };
      // A focus naming a version the EHR does not serve by vread (no version history, or
      // history pruned): the request itself is what the order follows, so its current
      // version is read. It was 503 for every resend of that notification, for ever.
      const unversioned = ref.replace(/\/_history\/[^/?#]+(?=[?#]|$)/, '');
      if (error instanceof EhrFhirError && error.status === 404 && unversioned !== ref) {
        return this.readFromEhr<T>(caller, unversioned);
      }
      if (error instanceof EhrFhirError && error.status === 404) return { gone: 404 };
      const e = new FhirError(
        'upstream-unavailable',
        `could not read ${ref} from the EHR: ${(error as Error).message}; resend the notification (or wait for the next heartbeat: the gap is caught up by search)`,
      );
      await this.refuse(caller, e);
      throw e;
    }
  }

  /**
   * A notification's events with a focus (each a read of the EHR when id-only) and the
   * resources beside them (each an order) are handled within the EHR's one request: more than
   * FHIR_MAX_NOTIFICATION_EVENTS is refused whole (413 too-costly), before any of them, so the
   * EHR sees why and nothing is half done (20,000 JSON values hold 2,000 id-only events).
   * Events without a focus (`empty` payload) cost one search together and are not counted.
   */
  private assertWithinEventBound(parsed: ParsedNotification): void {
    const max = this.deps.config.maxNotificationEvents;
    const focused = parsed.events.filter((e) => e.focus !== undefined).length;
    const count = Math.max(focused, parsed.entries.length);
    if (count <= max) return;
    const what = focused >= parsed.entries.length ? 'events with a focus' : 'resource entries';
    const diagnostics = `the notification holds ${count} ${what}; at most ${max} are handled in one notification (FHIR_MAX_NOTIFICATION_EVENTS): send fewer per notification`;
    throw new FhirError('too-large', diagnostics, [
      { severity: 'error', code: 'too-costly', diagnostics, expression: ['Bundle.entry'] },
    ]);
  }

  private async refuse(caller: FhirCaller, error: FhirError): Promise<void> {
    await this.deps.refusals.record(caller, 'fhir-subscription', 'notification', error);
  }
}
