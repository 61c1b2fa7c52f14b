import type {
  Bundle,
  OperationOutcomeIssue,
  Parameters,
  ParametersParameter,
  Resource,
} from '@medplum/fhirtypes';
import type { ToleratedQuirk } from '../domain/order-request';
import { modifierIssues } from '../mappings/fhir-modifiers';
import { FhirError } from './fhir.error';
import type { SiblingEntry } from './order-context.resolver';

/**
 * Reads an R4 Subscriptions Backport notification (STU 1.1, notifications.html): a `history`
 * Bundle whose first entry is the SubscriptionStatus as a Parameters resource
 * (backport-subscription-status-r4: subscription, topic, status, type,
 * events-since-subscription-start, notification-event{event-number, timestamp, focus,
 * additional-context}). Shapes real servers send are tolerated and recorded as quirks: the
 * 2021 draft's SubscriptionStatus resource, a Parameters that is not first, valueString where
 * a reference or a number belongs, entries without `request`.
 */

export type NotificationType =
  'handshake' | 'heartbeat' | 'event-notification' | 'query-status' | 'query-event';
const TYPES: readonly NotificationType[] = [
  'handshake',
  'heartbeat',
  'event-notification',
  'query-status',
  'query-event',
];

export interface NotificationEvent {
  number: number;
  timestamp?: string;
  focus?: string;
  additionalContext: string[];
}

export interface ParsedNotification {
  subscriptionRef: string;
  topic: string | null;
  status: string | null;
  type: NotificationType;
  eventsSinceStart?: number;
  events: NotificationEvent[];
  /** The entries after the status (resources of a full-resource payload, or id-only stubs). */
  entries: Array<SiblingEntry & { hasResource: boolean }>;
  /**
   * Every URL or reference the notification names (event focus and additional-context,
   * entry fullUrls, Bundle links), with the element it came from: each must lie within the
   * EHR's base before anything is read from it (docs/security.md).
   */
  references: Array<{ value: string; expression: string }>;
  quirks: ToleratedQuirk[];
}

function invalid(message: string, expression: string): FhirError {
  const issue: OperationOutcomeIssue = {
    severity: 'error',
    code: 'invalid',
    diagnostics: message,
    expression: [expression],
  };
  return new FhirError('invalid', message, [issue]);
}

/** A reference-valued parameter, tolerating the string-typed forms servers send. */
function referenceValue(
  p: ParametersParameter,
  where: string,
  quirks: ToleratedQuirk[],
): string | undefined {
  if (p.valueReference?.reference) return p.valueReference.reference;
  const text = p.valueString ?? p.valueUri ?? p.valueCanonical ?? p.valueUrl;
  if (text) {
    quirks.push({
      code: 'notification-reference-as-string',
      detail: `${where} carries a string, not a Reference`,
    });
    return text;
  }
  return undefined;
}

/** A number sent as string (STU 1.1: valueString) or, tolerated, as an integer type. */
function numberValue(
  p: ParametersParameter,
  where: string,
  quirks: ToleratedQuirk[],
): number | undefined {
  if (p.valueString !== undefined) {
    const n = Number(p.valueString);
    return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
  }
  const raw =
    (p as { valueInteger64?: string }).valueInteger64 ??
    p.valueUnsignedInt ??
    p.valueInteger ??
    p.valuePositiveInt ??
    p.valueDecimal;
  if (raw === undefined) return undefined;
  quirks.push({ code: 'notification-number-not-string', detail: `${where} is not a valueString` });
  const n = Number(raw);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

function fromParameters(params: Parameters, at: string, quirks: ToleratedQuirk[]) {
  const list = params.parameter ?? [];
  const get = (name: string) => list.filter((p) => p.name === name);
  const sub = get('subscription')[0];
  const subscriptionRef = sub
    ? referenceValue(sub, `${at}.parameter[subscription]`, quirks)
    : undefined;
  const topicP = get('topic')[0];
  const topic = topicP?.valueCanonical ?? topicP?.valueUri ?? topicP?.valueString ?? null;
  const status = get('status')[0]?.valueCode ?? get('status')[0]?.valueString ?? null;
  const type = get('type')[0]?.valueCode ?? get('type')[0]?.valueString;
  const sinceP = get('events-since-subscription-start')[0];
  const eventsSinceStart = sinceP
    ? numberValue(sinceP, `${at}.parameter[events-since-subscription-start]`, quirks)
    : undefined;
  const events: NotificationEvent[] = [];
  const references: ParsedNotification['references'] = [];
  get('notification-event').forEach((ev, i) => {
    const parts = ev.part ?? [];
    const where = `${at}.parameter[notification-event][${i}]`;
    const numberP = parts.find((p) => p.name === 'event-number');
    const number = numberP ? numberValue(numberP, `${where}.event-number`, quirks) : undefined;
    if (number === undefined)
      throw invalid('a notification-event needs an event-number', `${where}.part[event-number]`);
    const ts = parts.find((p) => p.name === 'timestamp');
    const focusP = parts.find((p) => p.name === 'focus');
    parts.forEach((p, j) => {
      if (p.name !== 'focus' && p.name !== 'additional-context') return;
      const value = referenceValue(p, `${where}.${p.name}`, []);
      if (value) references.push({ value, expression: `${where}.part[${j}]` });
    });
    events.push({
      number,
      timestamp: ts?.valueInstant ?? ts?.valueDateTime,
      focus: focusP ? referenceValue(focusP, `${where}.focus`, quirks) : undefined,
      additionalContext: parts
        .filter((p) => p.name === 'additional-context')
        .map((p) => referenceValue(p, `${where}.additional-context`, quirks))
        .filter((r): r is string => Boolean(r)),
    });
  });
  return { subscriptionRef, topic, status, type, eventsSinceStart, events, references };
}

/** The 2021 draft (and R4B/R5) SubscriptionStatus resource. */
interface SubscriptionStatusLike {
  resourceType: 'SubscriptionStatus';
  status?: string;
  type?: string;
  eventsSinceSubscriptionStart?: string | number;
  notificationEvent?: Array<{
    eventNumber?: string | number;
    timestamp?: string;
    focus?: { reference?: string };
    additionalContext?: Array<{ reference?: string }>;
  }>;
  subscription?: { reference?: string };
  topic?: string;
}

function fromSubscriptionStatus(s: SubscriptionStatusLike, at: string) {
  const references: ParsedNotification['references'] = [];
  (s.notificationEvent ?? []).forEach((ev, i) => {
    const where = `${at}.notificationEvent[${i}]`;
    if (ev.focus?.reference)
      references.push({ value: ev.focus.reference, expression: `${where}.focus.reference` });
    (ev.additionalContext ?? []).forEach((a, j) => {
      if (a.reference)
        references.push({
          value: a.reference,
          expression: `${where}.additionalContext[${j}].reference`,
        });
    });
  });
  const events: NotificationEvent[] = (s.notificationEvent ?? []).map((ev, i) => {
    const number = Number(ev.eventNumber);
    if (!Number.isSafeInteger(number))
      throw invalid(
        'a notificationEvent needs an eventNumber',
        `${at}.notificationEvent[${i}].eventNumber`,
      );
    return {
      number,
      timestamp: ev.timestamp,
      focus: ev.focus?.reference,
      additionalContext: (ev.additionalContext ?? [])
        .map((a) => a.reference)
        .filter((r): r is string => Boolean(r)),
    };
  });
  const since =
    s.eventsSinceSubscriptionStart === undefined
      ? undefined
      : Number(s.eventsSinceSubscriptionStart);
  return {
    subscriptionRef: s.subscription?.reference,
    topic: s.topic ?? null,
    status: s.status ?? null,
    type: s.type,
    eventsSinceStart: since !== undefined && Number.isSafeInteger(since) ? since : undefined,
    events,
    references,
  };
}

export function parseNotification(bundle: Bundle): ParsedNotification {
  const quirks: ToleratedQuirk[] = [];
  if (bundle.type !== 'history') {
    quirks.push({
      code: 'notification-bundle-type',
      detail: `Bundle.type is ${bundle.type}, not history`,
    });
  }
  const entries = bundle.entry ?? [];
  const statusIndex = entries.findIndex(
    (e) =>
      e.resource?.resourceType === 'Parameters' ||
      (e.resource?.resourceType as string) === 'SubscriptionStatus',
  );
  if (statusIndex < 0) {
    throw invalid(
      'a notification Bundle starts with its SubscriptionStatus (Parameters)',
      'Bundle.entry[0].resource',
    );
  }
  if (statusIndex > 0) {
    quirks.push({
      code: 'notification-status-not-first',
      detail: `the status is Bundle.entry[${statusIndex}], not entry[0]`,
    });
  }
  const statusResource = entries[statusIndex]!.resource as Resource;
  const at = `Bundle.entry[${statusIndex}].resource`;
  // A modifier extension anywhere in the notification changes what it says: refused whole.
  const modifier = [
    ...modifierIssues(bundle, 'Bundle'),
    ...modifierIssues(statusResource, at),
  ].find((i) => i.code === 'not-supported');
  if (modifier) throw invalid(modifier.diagnostics, modifier.expression);
  let raw;
  if ((statusResource.resourceType as string) === 'SubscriptionStatus') {
    quirks.push({
      code: 'notification-subscriptionstatus-resource',
      detail: 'SubscriptionStatus resource (2021 draft / R4B shape) instead of Parameters',
    });
    raw = fromSubscriptionStatus(statusResource as unknown as SubscriptionStatusLike, at);
  } else {
    raw = fromParameters(statusResource as Parameters, at, quirks);
  }
  if (!raw.subscriptionRef)
    throw invalid(
      'the notification does not name its Subscription',
      `${at}.parameter[subscription]`,
    );
  if (!raw.type || !TYPES.includes(raw.type as NotificationType)) {
    throw invalid(
      `notification type ${raw.type ?? '(missing)'} is not one of ${TYPES.join(', ')}`,
      `${at}.parameter[type]`,
    );
  }
  const references = [...raw.references];
  (bundle.link ?? []).forEach((l, i) => {
    if (l.url) references.push({ value: l.url, expression: `Bundle.link[${i}].url` });
  });
  entries.forEach((e, i) => {
    if (e.fullUrl) references.push({ value: e.fullUrl, expression: `Bundle.entry[${i}].fullUrl` });
  });
  const others: ParsedNotification['entries'] = [];
  entries.forEach((e, i) => {
    if (i === statusIndex) return;
    if (!e.request)
      quirks.push({
        code: 'notification-entry-without-request',
        detail: `Bundle.entry[${i}] has no request`,
      });
    if (!e.resource && !e.fullUrl) return;
    others.push({
      fullUrl: e.fullUrl,
      resource: e.resource ?? ({ resourceType: 'Basic' } as Resource),
      hasResource: Boolean(e.resource),
      location: `notification Bundle.entry[${i}]`,
    });
  });
  return {
    subscriptionRef: raw.subscriptionRef,
    topic: raw.topic,
    status: raw.status,
    type: raw.type as NotificationType,
    eventsSinceStart: raw.eventsSinceStart,
    events: raw.events,
    entries: others,
    references,
    quirks,
  };
}
