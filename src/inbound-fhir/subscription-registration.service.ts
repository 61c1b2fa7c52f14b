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
    this.deps.logger.info({ subscription: created.id }, 'Subscription on the EHR ensured');
    return created.id;
  }
}
