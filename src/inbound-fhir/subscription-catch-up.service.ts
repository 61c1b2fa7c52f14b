import type { ServiceRequest } from '@medplum/fhirtypes';
import { sha256Hex } from '../common/hash';
import { EhrOrderIntake, requireEhr, type EhrServiceRequest } from './ehr-order.intake';
import { FHIR_JSON, type FhirCaller, type FhirOperationDeps } from './fhir-operation.shared';
import { FhirError } from './fhir.error';
import type { ParsedNotification } from './subscription-notification.parser';
import type { SubscriptionState } from '../persistence/subscription.repository';

/**
 * Events went missing (a gap in the event numbers, or a heartbeat counting more events than
 * we processed): the EHR is searched for the ServiceRequests changed since the last event we
 * handled, and those are ingested (R4 Subscriptions Backport errors.html).
 */
export class SubscriptionCatchUp {
  constructor(
    private readonly deps: FhirOperationDeps,
    private readonly orders: EhrOrderIntake,
  ) {}

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

  /** Catches up to event `upTo`; a failure is logged and retried at the next heartbeat. */
  async catchUp(
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
      const since = state?.lastEventAt ?? state?.handshakeAt ?? undefined;
      const found = await this.search(undefined, since);
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
          handledUpTo: upTo,
        },
      });
      logger.info(
        { subscription: parsed.subscriptionRef, found: found.length, upTo },
        'missed subscription events caught up',
      );
    } catch (error) {
      // The gap stays recorded (last_event_number not advanced): the next heartbeat retries.
      logger.warn(
        { subscription: parsed.subscriptionRef, err: (error as Error).message },
        'catch-up failed',
      );
    }
  }
}
