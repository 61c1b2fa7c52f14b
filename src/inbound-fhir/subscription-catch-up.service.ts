import type { ServiceRequest } from '@medplum/fhirtypes';
import { KeyedCoalescedRuns } from '../common/coalesced-runs';
import { sha256Hex } from '../common/hash';
import { EhrOrderIntake, requireEhr, type EhrServiceRequest } from './ehr-order.intake';
import { FHIR_JSON, type FhirCaller, type FhirOperationDeps } from './fhir-operation.shared';
import { FhirError } from './fhir.error';
import type { ParsedNotification } from './subscription-notification.parser';
import type { SubscriptionState } from '../persistence/subscription.repository';

/** Pages of 100 (or the site's _count) one catch-up reads at most. */
export const CATCH_UP_PAGES = 20;

/**
 * The last-updated time of the last ServiceRequest when they came oldest first (as asked with
 * `_sort=_lastUpdated`), else undefined: a server that ignores the sort gives no cursor.
 */
function lastOfAscending(found: EhrServiceRequest[]): string | undefined {
  const times = found.map((f) => f.sr.meta?.lastUpdated);
  if (times.length === 0 || times.some((t) => !t || Number.isNaN(Date.parse(t)))) return undefined;
  const ms = times.map((t) => Date.parse(t!));
  for (let i = 1; i < ms.length; i++) if (ms[i]! < ms[i - 1]!) return undefined;
  return new Date(ms[ms.length - 1]!).toISOString();
}

/**
 * Events went missing (a gap in the event numbers, or a heartbeat counting more events than
 * we processed): the EHR is searched for the ServiceRequests changed since the last event we
 * handled, and those are ingested (R4 Subscriptions Backport errors.html).
 */
export class SubscriptionCatchUp {
  private readonly eventSearches = new KeyedCoalescedRuns<EhrServiceRequest[]>();
  /** Per Subscription: the earliest `since` asked by the callers the next search answers. */
  private readonly searchFrom = new Map<string, { since: Date | undefined }>();
  private readonly catchUps = new KeyedCoalescedRuns<void>();
  /** Per Subscription: the highest event number the next catch-up is asked to reach. */
  private readonly catchUpTo = new Map<string, number>();

  constructor(
    private readonly deps: FhirOperationDeps,
    private readonly orders: EhrOrderIntake,
  ) {}

  /**
   * The search an `empty`-payload event asks for, coalesced per Subscription: an EHR that
   * sends one notification per changed request (a bulk update of 30 requests: 30 at once)
   * made one search each, and each gap they seemed to leave a catch-up (59 searches of up to
   * 20 pages for 30 events). A notification arriving while a search runs is answered by the
   * next one, which starts after it arrived (so sees its change) and reads from the earliest
   * point any of its callers asked for.
   */
  async searchForEvents(
    subscriptionRef: string,
    caller: FhirCaller,
    since: Date | undefined,
  ): Promise<EhrServiceRequest[]> {
    const wanted = this.searchFrom.get(subscriptionRef);
    if (!wanted) this.searchFrom.set(subscriptionRef, { since });
    else if (since === undefined || (wanted.since !== undefined && since < wanted.since))
      wanted.since = since;
    let ranHere = false;
    try {
      const { value } = await this.eventSearches.run(subscriptionRef, () => {
        ranHere = true;
        const from = this.searchFrom.get(subscriptionRef);
        this.searchFrom.delete(subscriptionRef);
        return this.search(caller, from ? from.since : since);
      });
      return value;
    } catch (error) {
      // the search that was to answer this notification failed: kept refused as its own
      if (!ranHere && error instanceof FhirError) {
        await this.deps.refusals.record(caller, 'fhir-subscription', 'notification', error);
      }
      throw error;
    }
  }

  /** ServiceRequests on the EHR changed since `since` (the latest ones when unknown). */
  async search(
    caller: FhirCaller | undefined,
    since: Date | undefined,
  ): Promise<EhrServiceRequest[]> {
    const ehr = requireEhr(this.deps.ehr, 'an empty notification or a catch-up');
    const params: Record<string, string | number> = {
      ...this.deps.config.catchUpSearch,
      _count: 100,
    };
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
      if (caller) await this.deps.refusals.record(caller, 'fhir-subscription', 'notification', e);
      throw e;
    }
  }

  /**
   * The ServiceRequests changed since `since`, oldest first, over at most CATCH_UP_PAGES
   * pages; when more changed, `goOnFrom` is the last-updated time of the last one read (the
   * next catch-up starts there), or `since` itself when the EHR did not answer in that order
   * (then nothing tells which ones are still unread).
   */
  private async changedSince(
    since: Date,
  ): Promise<{ found: EhrServiceRequest[]; goOnFrom?: string }> {
    const ehr = requireEhr(this.deps.ehr, 'a catch-up');
    const params: Record<string, string | number> = {
      _count: 100, // a site may choose its own page size in FHIR_CATCHUP_SEARCH
      ...this.deps.config.catchUpSearch,
      _lastUpdated: `ge${since.toISOString()}`,
      _sort: '_lastUpdated',
    };
    try {
      const { entries, truncated } = await ehr.searchPages<ServiceRequest>(
        'ServiceRequest',
        params,
        CATCH_UP_PAGES,
      );
      const found = entries.map((f) => ({
        sr: f.resource,
        fullUrl: f.fullUrl.replace(/\/_history\/[^/]+$/, ''),
      }));
      if (!truncated) return { found };
      return { found, goOnFrom: lastOfAscending(found) ?? since.toISOString() };
    } catch (error) {
      throw new FhirError(
        'upstream-unavailable',
        `could not search the EHR: ${(error as Error).message}`,
      );
    }
  }

  /**
   * Catches up to event `upTo`; a failure is logged and retried at the next heartbeat. More
   * changes than one catch-up reads leave the gap open (the event numbers are not marked
   * handled) and the next heartbeat's catch-up goes on from where this one stopped.
   */
  async catchUp(parsed: ParsedNotification, upTo: number): Promise<void> {
    // One catch-up at a time per Subscription; one asked while another runs is done by the
    // next, from the state as it then is, up to the highest event any caller asked for.
    const ref = parsed.subscriptionRef;
    this.catchUpTo.set(ref, Math.max(this.catchUpTo.get(ref) ?? 0, upTo));
    await this.catchUps.run(ref, async () => {
      const to = this.catchUpTo.get(ref) ?? upTo;
      this.catchUpTo.delete(ref);
      const state = await this.deps.subscriptions.findState(ref);
      if (state && state.lastEventNumber >= to) return; // done meanwhile
      await this.catchUpOnce(parsed, state, to);
    });
  }

  private async catchUpOnce(
    parsed: ParsedNotification,
    state: SubscriptionState | undefined,
    upTo: number,
  ): Promise<void> {
    const { logger } = this.deps;
    if (!this.deps.ehr) {
      logger.warn(
        { subscription: parsed.subscriptionRef },
        'events missed but FHIR_SERVER_URL is unset: cannot catch up',
      );
      return;
    }
    try {
      const since = state?.catchUpFrom ?? state?.lastEventAt ?? state?.handshakeAt ?? undefined;
      const { found, goOnFrom } = since
        ? await this.changedSince(since)
        : { found: await this.search(undefined, undefined), goOnFrom: undefined };
      const raw = Buffer.from(
        JSON.stringify({
          resourceType: 'Bundle',
          type: 'searchset',
          entry: found.map((f) => ({ fullUrl: f.fullUrl, resource: f.sr })),
        }),
      );
      await this.orders.ingest(found, [], {
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
          handledUpTo: goOnFrom ? undefined : upTo,
          catchUpFrom: goOnFrom ?? null,
        },
      });
      if (goOnFrom) {
        logger.warn(
          { subscription: parsed.subscriptionRef, found: found.length, goOnFrom },
          since && goOnFrom === since.toISOString()
            ? 'catch-up unfinished: more ServiceRequests changed than one search reads, and the EHR did not sort them by _lastUpdated; the gap stays open'
            : 'catch-up unfinished: more ServiceRequests changed than one search reads; the next heartbeat goes on from the last one read',
        );
        return;
      }
      logger.info(
        { subscription: parsed.subscriptionRef, found: found.length, upTo },
        'missed subscription events caught up',
      );
    } catch (error) {
      // The gap stays recorded (last_event_number not advanced): the next heartbeat retries.
      // A refusal of what a found request names (FhirError) is logged by its code and element
      // paths: its message names the read (`Patient/<id>`, `identifier=…|<MRN>`), which the
      // log never holds (DESIGN §5).
      logger.warn(
        {
          subscription: parsed.subscriptionRef,
          ...(error instanceof FhirError
            ? {
                code: error.code,
                elements: error.issues.flatMap((i) => i.expression ?? []),
              }
            : { err: (error as Error).message }),
        },
        'catch-up failed',
      );
    }
  }
}
