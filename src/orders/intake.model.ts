import type { InboundTransport } from '../domain/inbound-message';
import { primaryIdentifier } from '../domain/patient-identity';
import type {
  MappedField,
  OrderRequest,
  PatientInfo,
  ToleratedQuirk,
} from '../domain/order-request';
import type { PatientEvent } from '../domain/patient-event';
import type { IntakeOutcome, IntakeResponse } from '../domain/intake-outcome';

/** What the intake takes and answers, whatever the transport (see OrderIntakeService). */

export type { IntakeOrderResult, IntakeOutcome, IntakeResponse } from '../domain/intake-outcome';

export const ORDER_JOBS = {
  place: 'order.place-upstream',
  cancel: 'order.cancel-upstream',
  updateMetadata: 'order.update-metadata',
} as const;

export interface IntakeOrder {
  request: OrderRequest;
  lineage: MappedField[];
  /** Where in the message the order came from, e.g. `ORC/OBR group 2` or `Bundle.entry[0]`. */
  sourceRef: string;
  /**
   * The order this message names explicitly (FHIR `PUT /ServiceRequest/{id}`), or the one a
   * conditional create's If-None-Exist search matched; used when the sender's placer number
   * does not find it.
   */
  targetOrderId?: string;
  /**
   * Asked as a conditional create (FHIR If-None-Exist on its placer identifier): an order
   * already under that number is the answer (R4 http.html#ccreate), whoever's patient it is.
   * Otherwise a new order under another patient's order number is refused.
   */
  conditional?: boolean;
  /**
   * Earlier requests this one takes the place of (FHIR `ServiceRequest.replaces`), as the
   * front door matched them: the order it found for each (within the sender's base), or why
   * none. The intake cancels a matched order of the same sender and patient that is still
   * open (replace-decision.ts); every other case is recorded on the timelines.
   */
  replaces?: ReplacedRequest[];
}

/**
 * `replaces` references read of one request (each a lookup, and a lock in the intake); past
 * them, one `not-read` entry names the rest.
 */
export const MAX_REPLACES_READ = 20;

/** One `replaces` reference of a request, as its front door matched it. */
export interface ReplacedRequest {
  /** The element, as FHIRPath: `ServiceRequest.replaces[0]`, `Bundle.entry[1].resource.replaces[0]`. */
  element: string;
  /** What it names, PHI-free: `ServiceRequest/123`, a URL, `identifier (system …)`. */
  named: string;
  /** The order held for the request it names (found by id, EHR URL or placer identifier). */
  orderId?: string;
  /**
   * Why no order was looked for or found; `not-read`: past the references read of one request
   * (replaces.matcher.ts), these were not looked at.
   */
  unmatched?: 'not-held' | 'outside-base' | 'not-a-service-request' | 'not-read';
  /**
   * The order's request is one this sender notified us of itself (the EHR's request, held
   * under its URL there), though another sender first POSTed it: the EHR changes and revokes
   * it by notification, so it may replace it too.
   */
  notifiedBySender?: true;
}

/** A patient update or merge the intake applies to the open orders (see PatientEvent). */
export type IntakePatientEvent = PatientEvent;

export interface IntakeInput {
  transport: InboundTransport;
  sender: string | null;
  remoteAddress: string | null;
  messageType: string | null;
  messageControlId: string | null;
  idempotencyKey: string;
  raw: Buffer;
  contentType: string;
  quirks: ToleratedQuirk[];
  mappingVersion: string;
  orders: IntakeOrder[];
  patientEvents?: IntakePatientEvent[];
  actor?: string;
}

export interface IntakeReply {
  duplicate: boolean;
  inboundMessageId: string;
  response: IntakeResponse;
  outcome?: IntakeOutcome;
}

export interface RejectionInput {
  transport: InboundTransport;
  sender: string | null;
  remoteAddress: string | null;
  messageType: string | null;
  messageControlId: string | null;
  raw: Buffer;
  contentType: string;
  quirks: ToleratedQuirk[];
  response: IntakeResponse;
  /** What was wrong, for the analyst (PHI-free). */
  problems: Array<{ location?: string; code: string; message: string }>;
  /** A FHIR create's If-None-Exist header: a reprocess runs the body again with it. */
  ifNoneExist?: string;
}

/** The identifier our indexes use (domain/patient-identity.ts: the hospital's record number). */
export function primaryPatientId(patient: PatientInfo | undefined): string | null {
  return primaryIdentifier(patient)?.value ?? null;
}

export function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
