import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Bundle } from '@medplum/fhirtypes';
import { FhirError } from './fhir.error';
import { parseNotification } from './subscription-notification.parser';

const FIXTURES = join(__dirname, '..', '..', 'test', 'fixtures', 'fhir');
const fixture = (name: string): Bundle =>
  JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8')) as Bundle;

describe('Subscriptions Backport notification parser', () => {
  it('reads the published R4 id-only example', () => {
    expect(parseNotification(fixture('backport-r4-notification-id-only'))).toEqual({
      subscriptionRef: 'https://example.org/fhir/Subscription/admission',
      topic: 'http://hl7.org/SubscriptionTopic/admission',
      status: 'active',
      type: 'event-notification',
      eventsSinceStart: 2,
      events: [
        {
          number: 2,
          timestamp: '2020-05-29T11:44:13.1882432-05:00',
          focus: 'https://example.org/fhir/Encounter/86009987-eabe-42bf-8c02-b112b18cb616',
          additionalContext: [],
        },
      ],
      entries: [],
      // Every URL it names, with its element: each must lie within FHIR_SERVER_URL.
      references: [
        {
          expression: 'Bundle.entry[0].resource.parameter[subscription]',
          value: 'https://example.org/fhir/Subscription/admission',
        },
        {
          expression: 'Bundle.entry[0].resource.parameter[notification-event][0].part[2]',
          value: 'https://example.org/fhir/Encounter/86009987-eabe-42bf-8c02-b112b18cb616',
        },
        {
          expression: 'Bundle.entry[0].fullUrl',
          value: 'urn:uuid:292d3c72-edc1-4d8a-afaa-d85e19c7f563',
        },
      ],
      quirks: [],
    });
  });

  it('reads the handshake and the full-resource example', () => {
    expect(parseNotification(fixture('backport-r4-notification-handshake'))).toMatchObject({
      type: 'handshake',
      status: 'requested',
      eventsSinceStart: 0,
      events: [],
    });
    const full = parseNotification(fixture('backport-r4-notification-full-resource'));
    expect(full.entries).toHaveLength(1);
    expect(full.entries[0]).toMatchObject({
      hasResource: true,
      resource: { resourceType: 'Encounter' },
    });
  });

  it('tolerates the 2021 draft SubscriptionStatus resource and entries without request', () => {
    const parsed = parseNotification(fixture('draft-2021-notification-subscriptionstatus'));
    expect(parsed).toMatchObject({
      subscriptionRef: 'https://example.org/fhir/Subscription/imaging-orders',
      type: 'event-notification',
      eventsSinceStart: 3,
      events: [{ number: 3, focus: 'https://example.org/fhir/ServiceRequest/sr-draft-3' }],
      entries: [
        { fullUrl: 'https://example.org/fhir/ServiceRequest/sr-draft-3', hasResource: false },
      ],
    });
    expect(parsed.quirks.map((q) => q.code)).toEqual([
      'notification-subscriptionstatus-resource',
      'notification-entry-without-request',
    ]);
  });

  it('tolerates a string where a reference belongs and integers where strings belong', () => {
    const bundle = fixture('backport-r4-notification-id-only');
    const params = (
      bundle.entry![0]!.resource as unknown as { parameter: Array<Record<string, unknown>> }
    ).parameter;
    params[0] = { name: 'subscription', valueString: 'Subscription/admission' };
    params[4] = { name: 'events-since-subscription-start', valueInteger: 2 };
    const parsed = parseNotification(bundle);
    expect(parsed.subscriptionRef).toBe('Subscription/admission');
    expect(parsed.eventsSinceStart).toBe(2);
    expect(parsed.quirks.map((q) => q.code)).toEqual([
      'notification-reference-as-string',
      'notification-number-not-string',
    ]);
  });

  it('refuses a notification without its status or Subscription, naming the path', () => {
    expect(() => parseNotification({ resourceType: 'Bundle', type: 'history', entry: [] })).toThrow(
      FhirError,
    );
    const bundle = fixture('backport-r4-notification-heartbeat');
    const params = (bundle.entry![0]!.resource as unknown as { parameter: Array<{ name: string }> })
      .parameter;
    (bundle.entry![0]!.resource as unknown as { parameter: unknown[] }).parameter = params.filter(
      (p) => p.name !== 'subscription',
    );
    try {
      parseNotification(bundle);
      throw new Error('expected a refusal');
    } catch (error) {
      expect((error as FhirError).httpStatus).toBe(422);
      expect((error as FhirError).issues[0]!.expression).toEqual([
        'Bundle.entry[0].resource.parameter[subscription]',
      ]);
    }
  });

  it.each(['0x10', '1e1', '-5', '1e400', '99999999999999999999999', ' 2', '2.0', ''])(
    'an event counter %p is refused on its element, never read as another number or dropped',
    (value) => {
      const heartbeat = fixture('backport-r4-notification-heartbeat');
      const params = heartbeat.entry![0]!.resource as {
        parameter: Array<{ name: string; valueString?: string }>;
      };
      params.parameter.find((p) => p.name === 'events-since-subscription-start')!.valueString =
        value;
      expect(() => parseNotification(heartbeat)).toThrow(FhirError);
      try {
        parseNotification(heartbeat);
      } catch (error) {
        expect((error as FhirError).issues[0]!.expression).toEqual([
          'Bundle.entry[0].resource.parameter[events-since-subscription-start]',
        ]);
      }
      const event = fixture('backport-r4-notification-id-only');
      const ev = (
        event.entry![0]!.resource as {
          parameter: Array<{ name: string; part?: Array<{ name: string; valueString?: string }> }>;
        }
      ).parameter.find((p) => p.name === 'notification-event')!;
      ev.part!.find((p) => p.name === 'event-number')!.valueString = value;
      expect(() => parseNotification(event)).toThrow(/event-number must be a non-negative integer/);
    },
  );
});
