import type { Subscription } from '@medplum/fhirtypes';
import pino from 'pino';
import { EhrFhirClient } from '../../src/inbound-fhir/ehr-fhir.client';
import type { FhirOperationDeps } from '../../src/inbound-fhir/fhir-operation.shared';
import { SubscriptionRegistration } from '../../src/inbound-fhir/subscription-registration.service';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

const BACKPORT = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';
const ENDPOINT = 'https://adapter.example.org/fhir/subscription-notifications';
const TOPIC = 'http://example.org/SubscriptionTopic/imaging-orders';

/**
 * Our Subscription on the EHR at startup (conditional create on the endpoint, R4
 * http.html#ccreate) when the EHR already holds one, against a real FHIR engine.
 */
describe('Subscription registration against an EHR that holds one already', () => {
  let ehr: TestFhirServer;
  beforeEach(async () => {
    ehr = await startTestFhirServer();
  });
  afterEach(async () => {
    await ehr?.close();
  });

  const register = (token: string) =>
    new SubscriptionRegistration({
      config: {
        subscription: {
          topic: TOPIC,
          endpoint: ENDPOINT,
          payload: 'id-only',
          filter: 'ServiceRequest?category=363679005',
          header: `Authorization: Bearer ${token}`,
        },
      } as FhirOperationDeps['config'],
      ehr: new EhrFhirClient({ baseUrl: ehr.baseUrl, timeoutMs: 5_000 }),
      logger: pino({ level: 'silent' }),
    }).ensureSubscription();

  /** The Subscription as an earlier run of the adapter created it, then as the EHR left it. */
  const held = (status: Subscription['status'], token: string) =>
    ({
      resourceType: 'Subscription',
      id: 'imaging-orders',
      meta: { profile: [`${BACKPORT}/backport-subscription`] },
      status,
      reason: 'Imaging-AI adapter: orders (ServiceRequest) for AI analysis',
      criteria: TOPIC,
      _criteria: {
        extension: [
          {
            url: `${BACKPORT}/backport-filter-criteria`,
            valueString: 'ServiceRequest?category=363679005',
          },
        ],
      },
      channel: {
        type: 'rest-hook',
        endpoint: ENDPOINT,
        payload: 'application/fhir+json',
        _payload: {
          extension: [{ url: `${BACKPORT}/backport-payload-content`, valueCode: 'id-only' }],
        },
        header: [`Authorization: Bearer ${token}`],
      },
    }) as Subscription;

  const onEhr = async () =>
    (await (await fetch(`${ehr.baseUrl}/Subscription/imaging-orders`)).json()) as Subscription;

  it.each([
    ['off', 'the EHR turned it off after failed deliveries'],
    ['error', 'the EHR set it to error'],
  ] as const)('a Subscription %s (%s) is requested again', async (status, _why) => {
    await ehr.seed(held(status, 'token-1'));
    expect(await register('token-1')).toBe('imaging-orders');
    const now = await onEhr();
    // before: left as it was, and no notification ever came again
    expect(now.status).toBe('requested');
    expect(now.channel.endpoint).toBe(ENDPOINT);
  });

  it('after FHIR_SUBSCRIPTION_TOKEN is rotated, the EHR is given the new header', async () => {
    await ehr.seed(held('active', 'old-token'));
    await register('new-token');
    // before: the EHR kept sending the old token, and every notification was refused 401
    expect((await onEhr()).channel.header).toEqual(['Authorization: Bearer new-token']);
  });

  it('an active Subscription as we want it is left alone (no update)', async () => {
    await ehr.seed(held('active', 'token-1'));
    await register('token-1');
    expect(ehr.requests.filter((r) => r.method === 'PUT')).toEqual([]);
    expect((await onEhr()).status).toBe('active');
  });
});
