import type {
  Bundle,
  BundleEntry,
  BundleLink,
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
  /**
   * `deletedUrl`: a deleted entry's `request.url`, the resource it deletes (R4 http.html#history);
   * what names it when its fullUrl is a `urn:uuid:`.
   */
  entries: Array<SiblingEntry & { hasResource: boolean; deleted?: boolean; deletedUrl?: string }>;
  /**
   * Every URL or reference the notification names (event focus and additional-context,
   * entry fullUrls, Bundle links), with the element it came from: each must lie within the
   * EHR's base before anything is read from it (docs/security.md).
   */
  references: Array<{ value: string; expression: string }>;
  quirks: ToleratedQuirk[];
}

/** The longest Subscription reference taken (a URL of the EHR's base and a FHIR id). */
const MAX_SUBSCRIPTION_REF_CHARS = 1024;

function invalid(message: string, expression: string): FhirError {
  const issue: OperationOutcomeIssue = {
    severity: 'error',
    code: 'invalid',
    diagnostics: message,
    expression: [expression],
  };
  return new FhirError('invalid', message, [issue]);
}

/**
 * The shape checks of what is read here (the structure validator does not run on
 * notifications: the 2021 draft's SubscriptionStatus is no R4 resource). Whatever is not the
 * JSON type the element has is refused with its path, never read as something else.
 */
function listAt<T>(value: unknown, where: string): T[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw invalid(`${where} must be an array`, where);
  value.forEach((v: unknown, i) => {
    if (v === null || typeof v !== 'object' || Array.isArray(v))
      throw invalid(`${where}[${i}] must be an object`, `${where}[${i}]`);
  });
  return value as T[];
}

function objectAt<T>(value: unknown, where: string): T | undefined {
  if (value === undefined) return undefined;
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw invalid(`${where} must be an object`, where);
  return value as T;
}

function stringAt(value: unknown, where: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw invalid(`${where} must be a string`, where);
  return value;
}

/** An instant or dateTime (R4 datatypes.html#instant): a time it names is stored. */
function timeAt(value: unknown, where: string): string | undefined {
  const text = stringAt(value, where);
  if (text !== undefined && (!/^\d{4}/.test(text) || Number.isNaN(Date.parse(text))))
    throw invalid(`${where} is not a valid instant or dateTime`, where);
  return text;
}

/** A reference-valued parameter, tolerating the string-typed forms servers send. */
function referenceValue(
  p: ParametersParameter,
  where: string,
  quirks: ToleratedQuirk[],
): string | undefined {
  const ref = objectAt<{ reference?: unknown }>(p.valueReference, `${where}.valueReference`);
  const reference = stringAt(ref?.reference, `${where}.valueReference.reference`);
  if (reference) return reference;
  const text = stringAt(
    p.valueString ?? p.valueUri ?? p.valueCanonical ?? p.valueUrl,
    `${where}.value[x]`,
  );
  if (text) {
    quirks.push({
      code: 'notification-reference-as-string',
      detail: `${where} carries a string, not a Reference`,
    });
    return text;
  }
  return undefined;
}

/**
 * An event counter (event-number, events-since-subscription-start; Backport STU 1.1: an
 * integer64 as valueString): digits only, within what we track. It was read with Number():
 * `0x10` was event 16, `1e1` event 10 (so skipped as a duplicate of 10), and `-5` or `1e400`
 * were dropped without a word; each is now 422 on the element.
 */
function counterAt(raw: unknown, where: string): number {
  const text = typeof raw === 'number' ? String(raw) : raw;
  const n = typeof text === 'string' && /^[0-9]{1,16}$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n)) {
    throw invalid(
      `${where} must be a non-negative integer (digits only, at most 2^53-1), got ${JSON.stringify(raw)?.slice(0, 40)}`,
      where,
    );
  }
  return n;
}

/** A number sent as string (STU 1.1: valueString) or, tolerated, as an integer type. */
function numberValue(
  p: ParametersParameter,
  where: string,
  quirks: ToleratedQuirk[],
): number | undefined {
  if (p.valueString !== undefined) return counterAt(p.valueString, where);
  const raw =
    (p as { valueInteger64?: string }).valueInteger64 ??
    p.valueUnsignedInt ??
    p.valueInteger ??
    p.valuePositiveInt ??
    p.valueDecimal;
  if (raw === undefined) return undefined;
  quirks.push({ code: 'notification-number-not-string', detail: `${where} is not a valueString` });
  return counterAt(raw, where);
}

function fromParameters(params: Parameters, at: string, quirks: ToleratedQuirk[]) {
  const list = listAt<ParametersParameter>(params.parameter, `${at}.parameter`);
  const get = (name: string) => list.filter((p) => p.name === name);
  const text = (name: string, p: ParametersParameter | undefined) =>
    p === undefined
      ? undefined
      : stringAt(
          p.valueCode ?? p.valueCanonical ?? p.valueUri ?? p.valueString,
          `${at}.parameter[${name}].value[x]`,
        );
  const sub = get('subscription')[0];
  const subscriptionRef = sub
    ? referenceValue(sub, `${at}.parameter[subscription]`, quirks)
    : undefined;
  const topic = text('topic', get('topic')[0]) ?? null;
  const status = text('status', get('status')[0]) ?? null;
  const type = text('type', get('type')[0]);
  const sinceP = get('events-since-subscription-start')[0];
  const eventsSinceStart = sinceP
    ? numberValue(sinceP, `${at}.parameter[events-since-subscription-start]`, quirks)
    : undefined;
  const events: NotificationEvent[] = [];
  const references: ParsedNotification['references'] = [];
  get('notification-event').forEach((ev, i) => {
    const where = `${at}.parameter[notification-event][${i}]`;
    const parts = listAt<ParametersParameter>(ev.part, `${where}.part`);
    const numberP = parts.find((p) => p.name === 'event-number');
    const number = numberP ? numberValue(numberP, `${where}.event-number`, quirks) : undefined;
    if (number === undefined)
      throw invalid('a notification-event needs an event-number', `${where}.part[event-number]`);
    const tsAt = parts.findIndex((p) => p.name === 'timestamp');
    const ts = parts[tsAt];
    const focusP = parts.find((p) => p.name === 'focus');
    parts.forEach((p, j) => {
      if (p.name !== 'focus' && p.name !== 'additional-context') return;
      const value = referenceValue(p, `${where}.${p.name}`, []);
      if (value) references.push({ value, expression: `${where}.part[${j}]` });
    });
    events.push({
      number,
      timestamp: timeAt(ts?.valueInstant ?? ts?.valueDateTime, `${where}.part[${tsAt}]`),
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
  const notificationEvents = listAt<NonNullable<SubscriptionStatusLike['notificationEvent']>[0]>(
    s.notificationEvent,
    `${at}.notificationEvent`,
  );
  notificationEvents.forEach((ev, i) => {
    const where = `${at}.notificationEvent[${i}]`;
    const focus = objectAt<{ reference?: unknown }>(ev.focus, `${where}.focus`);
    const focusRef = stringAt(focus?.reference, `${where}.focus.reference`);
    if (focusRef) references.push({ value: focusRef, expression: `${where}.focus.reference` });
    listAt<{ reference?: unknown }>(ev.additionalContext, `${where}.additionalContext`).forEach(
      (a, j) => {
        const ref = stringAt(a.reference, `${where}.additionalContext[${j}].reference`);
        if (ref)
          references.push({ value: ref, expression: `${where}.additionalContext[${j}].reference` });
      },
    );
    timeAt(ev.timestamp, `${where}.timestamp`);
  });
  const events: NotificationEvent[] = notificationEvents.map((ev, i) => {
    if (ev.eventNumber === undefined)
      throw invalid(
        'a notificationEvent needs an eventNumber',
        `${at}.notificationEvent[${i}].eventNumber`,
      );
    const number = counterAt(ev.eventNumber, `${at}.notificationEvent[${i}].eventNumber`);
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
      : counterAt(s.eventsSinceSubscriptionStart, `${at}.eventsSinceSubscriptionStart`);
  const subscription = objectAt<{ reference?: unknown }>(s.subscription, `${at}.subscription`);
  return {
    subscriptionRef: stringAt(subscription?.reference, `${at}.subscription.reference`),
    topic: stringAt(s.topic, `${at}.topic`) ?? null,
    status: stringAt(s.status, `${at}.status`) ?? null,
    type: stringAt(s.type, `${at}.type`),
    eventsSinceStart: since,
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
  const entries = listAt<BundleEntry>(bundle.entry, 'Bundle.entry');
  entries.forEach((e, i) => {
    objectAt(e.resource, `Bundle.entry[${i}].resource`);
    stringAt(e.fullUrl, `Bundle.entry[${i}].fullUrl`);
  });
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
  // Its key here (fhir_subscriptions.subscription_ref, the events' idempotency): a random
  // 6,000-character reference passed the largest row a PostgreSQL index holds, a 500 for ever.
  // `[base]/Subscription/[id]` is the base plus at most 77 characters.
  if ([...raw.subscriptionRef].length > MAX_SUBSCRIPTION_REF_CHARS) {
    const expression =
      (statusResource.resourceType as string) === 'SubscriptionStatus'
        ? `${at}.subscription.reference`
        : `${at}.parameter[subscription]`;
    throw invalid(
      `the Subscription reference is ${[...raw.subscriptionRef].length} characters, more than the ${MAX_SUBSCRIPTION_REF_CHARS} taken ([base]/Subscription/[id])`,
      expression,
    );
  }
  if (!raw.type || !TYPES.includes(raw.type as NotificationType)) {
    throw invalid(
      `notification type ${raw.type ?? '(missing)'} is not one of ${TYPES.join(', ')}`,
      `${at}.parameter[type]`,
    );
  }
  // The Subscription is the EHR's: one on another server is not a notification of ours.
  const references = [
    {
      value: raw.subscriptionRef,
      expression:
        (statusResource.resourceType as string) === 'SubscriptionStatus'
          ? `${at}.subscription.reference`
          : `${at}.parameter[subscription]`,
    },
    ...raw.references,
  ];
  listAt<BundleLink>(bundle.link, 'Bundle.link').forEach((l, i) => {
    if (stringAt(l.url, `Bundle.link[${i}].url`))
      references.push({ value: l.url, expression: `Bundle.link[${i}].url` });
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
      // a history Bundle's deleted resource: no resource, request DELETE (R4 http.html#history)
      ...(!e.resource && /^delete$/i.test(String(e.request?.method ?? ''))
        ? {
            deleted: true,
            ...(typeof e.request?.url === 'string' ? { deletedUrl: e.request.url } : {}),
          }
        : {}),
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
