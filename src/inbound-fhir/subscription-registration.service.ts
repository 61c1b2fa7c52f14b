import type { Subscription } from '@medplum/fhirtypes';
import { FHIR_JSON, type FhirOperationDeps } from './fhir-operation.shared';

const BACKPORT = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';

/**
 * Creates our Subscription on the EHR (R4 backport-subscription profile: topic canonical in
 * `criteria`, filter and payload content as extensions). Conditional on the endpoint, so a
 * restart does not create a second one.
 */
export class SubscriptionRegistration {
  constructor(private readonly deps: Pick<FhirOperationDeps, 'config' | 'ehr' | 'logger'>) {}

  async ensureSubscription(): Promise<string | undefined> {
    const want = this.deps.config.subscription;
    const ehr = this.deps.ehr;
    if (!want || !ehr) return undefined;
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
    const created = await ehr.create(subscription, {
      'If-None-Exist': `url=${encodeURIComponent(want.endpoint)}`,
    });
    // R4 http.html#ccreate: with one match the EHR answers the Subscription it holds, as it is.
    const stale =
      typeof created.id === 'string'
        ? staleParts(created as BackportSubscription, subscription as BackportSubscription)
        : [];
    if (stale.length > 0) {
      // A Subscription the EHR turned `off` or to `error` after failed deliveries, or one with
      // an old FHIR_SUBSCRIPTION_TOKEN in its header after a rotation: left as it was, no
      // notification came again (or each came with the old token and was refused 401) and the
      // EHR's orders never reached us. It is requested again with what we want.
      const updated = await ehr.update({ ...subscription, id: created.id! });
      this.deps.logger.warn(
        { subscription: updated.id ?? created.id, changed: stale },
        'Subscription on the EHR was stale; requested again',
      );
      return updated.id ?? created.id;
    }
    this.deps.logger.info({ subscription: created.id }, 'Subscription on the EHR ensured');
    return created.id;
  }
}

/** R4 Subscription with the backport's extensions on primitives (`_criteria`, `_payload`). */
type BackportSubscription = Subscription & {
  _criteria?: { extension?: unknown[] };
  channel: Subscription['channel'] & { _payload?: { extension?: unknown[] } };
};

/**
 * What differs between the Subscription the EHR holds and ours (names only: the header holds
 * our secret): its status when not `requested`/`active` (R4 subscription-status: `off`,
 * `error`), the topic, the filter, and the channel.
 */
function staleParts(held: BackportSubscription, want: BackportSubscription): string[] {
  const parts: string[] = [];
  if (held.status !== 'requested' && held.status !== 'active') parts.push('status');
  if (held.criteria !== want.criteria) parts.push('criteria');
  if (!sameJson(held._criteria?.extension, want._criteria?.extension)) parts.push('filter');
  const [h, w] = [held.channel, want.channel];
  if (h?.type !== w.type || h?.endpoint !== w.endpoint) parts.push('channel.endpoint');
  if (h?.payload !== w.payload || !sameJson(h?._payload?.extension, w._payload?.extension))
    parts.push('channel.payload');
  if (!sameJson(h?.header ?? [], w.header ?? [])) parts.push('channel.header');
  return parts;
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
}
