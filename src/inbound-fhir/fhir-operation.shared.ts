import type { OperationOutcomeIssue, Resource, ServiceRequest } from '@medplum/fhirtypes';
import type { Logger } from 'pino';
import {
  mapServiceRequest,
  type FhirInteraction,
  type FhirMappingIssue,
  type FhirMappingResult,
} from '../mappings/fhir-order.mapping';
import type { EntityManager } from 'typeorm';
import type { IntakeResponse, OrderIntakeService } from '../orders/order-intake.service';
import type { EhrFhirClient } from './ehr-fhir.client';
import type { FhirFrontDoorConfig } from './fhir-front-door.config';
import { parseResource } from './fhir-http';
import type { FhirRefusalRecorder } from './fhir-refusal.recorder';
import type { FhirResourceRepository } from '../persistence/fhir-resource.repository';
import { FhirError, operationOutcome } from './fhir.error';
import { unreferencedContained, validateFhirResource } from '../fhir/fhir-validator';
import { buildOrderContext, type ReferenceResolver } from './order-context.resolver';
import type { SubscriptionRepository } from '../persistence/subscription.repository';

/** Who sent a request and what exactly (the raw bytes go to the audit log). */
export interface FhirCaller {
  sender: string;
  /**
   * Set for a `sender` token: it reads and changes only what it submitted (least privilege,
   * issue #15). Absent for admin, who may act on every order.
   */
  restrictedTo?: string;
  actor: string;
  remoteAddress: string | null;
  raw: Buffer;
  contentType: string;
  /** The request's Content-Encoding, when it named one: a coding is refused 415 (bodies are read as sent). */
  contentEncoding?: string;
  /**
   * What the caller asked to be answered in (`_format`, Accept): checked where the refusal is
   * kept, so a 406 keeps the body too. Absent for a reprocessed message.
   */
  wants?: { format: unknown; accept: string | undefined };
  /** The body was over this limit (FHIR_MAX_BODY_BYTES): `raw` holds its first bytes only. */
  tooLarge?: number;
  /** Why the body was cut (it stopped arriving, or came too slowly): `raw` holds what came, up to its head. */
  stalled?: string;
  /** A create's If-None-Exist header: kept with a refusal, so that a reprocess is conditional too. */
  ifNoneExist?: string;
}

/** The answer the controller sends: a status and a resource (or none). */
export interface FhirAnswer {
  status: number;
  resource?: Resource;
  location?: string;
  duplicate?: boolean;
}

export const FHIR_JSON = 'application/fhir+json';

/** What every REST intake input takes from the caller (the raw bytes are kept as sent). */
export function fromCaller(caller: FhirCaller) {
  return {
    transport: 'fhir-rest' as const,
    sender: caller.sender,
    remoteAddress: caller.remoteAddress,
    raw: caller.raw,
    contentType: caller.contentType,
    actor: caller.actor,
  };
}

/** What the FHIR use cases are built from (one instance, wired by InboundFhirModule). */
export interface FhirOperationDeps {
  intake: OrderIntakeService;
  resources: FhirResourceRepository;
  subscriptions: SubscriptionRepository;
  config: FhirFrontDoorConfig;
  ehr: EhrFhirClient | undefined;
  refusals: FhirRefusalRecorder;
  logger: Logger;
  clock: () => Date;
}

/**
 * Mapping issues as OperationOutcome issues. An expression on the ServiceRequest is put under
 * `prefix` (its Bundle entry); one on another resource already names where that resource is
 * (`Bundle.entry[0].resource.active`): prefixed, it read `Bundle.entry[1].resource.Patient.active`,
 * an element that does not exist, instead of the Patient entry the sender must fix.
 */
export function toIssues(issues: FhirMappingIssue[], prefix?: string): OperationOutcomeIssue[] {
  return issues.map((i) => ({
    severity: i.severity,
    code: i.code,
    diagnostics: i.diagnostics,
    expression: [
      prefix && /^ServiceRequest(\.|$)/.test(i.expression)
        ? `${prefix}${i.expression.slice('ServiceRequest'.length)}`
        : i.expression,
    ],
  }));
}

/**
 * A ServiceRequest → an order request: its context resolved (references, EHR reads), then
 * mapped. `issues` holds every error of both steps (those of the mapping under `path`).
 */
export async function mapToOrder(
  sr: ServiceRequest,
  resolver: ReferenceResolver,
  options: Parameters<typeof buildOrderContext>[2],
  interaction: FhirInteraction,
  config: FhirFrontDoorConfig,
): Promise<{ mapped: FhirMappingResult; issues: OperationOutcomeIssue[] }> {
  const built = await buildOrderContext(sr, resolver, options);
  const mapped = mapServiceRequest(sr, built.ctx, interaction, config.mapping);
  // A subject that could not be resolved is one problem: the mapping's "Patient.identifier is
  // required" on the same element repeated it as another (a patient without identifiers).
  const reported = new Set(built.issues.flatMap((i) => i.expression ?? []));
  const issues = [
    // R4 dom-3: a contained resource nothing in the request names (a cancel is not held up).
    ...(options.lenient ? [] : unreferencedContained(sr, options.path)),
    ...built.issues,
    ...toIssues(
      mapped.issues.filter((i) => i.severity === 'error'),
      options.path,
    ).filter((i) => !(i.code === 'required' && i.expression?.some((e) => reported.has(e)))),
  ];
  return { mapped, issues };
}

/**
 * A ServiceRequest that must become an order: validated (R4), its context resolved and mapped;
 * any problem is a FhirError 422 `refusal` listing every issue.
 */
export async function mapOrRefuse(
  sr: ServiceRequest,
  resolver: ReferenceResolver,
  options: Parameters<typeof buildOrderContext>[2],
  interaction: FhirInteraction,
  config: FhirFrontDoorConfig,
  refusal: string,
): Promise<{ mapped: FhirMappingResult; request: NonNullable<FhirMappingResult['request']> }> {
  assertValid(sr);
  const { mapped, issues } = await mapToOrder(sr, resolver, options, interaction, config);
  if (issues.length > 0 || !mapped.request) throw new FhirError('invalid', refusal, issues);
  return { mapped, request: mapped.request };
}

/** Keeps the ServiceRequest served for a new order (version 1), in the intake transaction. */
export async function storeCreated(
  resources: FhirResourceRepository,
  manager: EntityManager,
  caller: FhirCaller,
  orderId: string,
  served: ServiceRequest,
  now: string,
): Promise<void> {
  await resources.insertServiceRequest(manager, {
    id: orderId,
    orderId,
    sender: caller.sender,
    resource: served,
    lastUpdated: now,
  });
}

/** The body of a FHIR answer as the intake stores it. */
export function fhirResponse(code: number, body: unknown, accepted: boolean): IntakeResponse {
  return {
    code: String(code),
    body: Buffer.from(JSON.stringify(body)),
    contentType: FHIR_JSON,
    accepted,
  };
}

export function unexpectedResult(kind: string | undefined): IntakeResponse {
  const outcome = operationOutcome([
    {
      severity: 'error',
      code: 'exception',
      diagnostics: `unexpected intake result ${kind ?? 'none'}`,
    },
  ]);
  return fhirResponse(500, outcome, false);
}

/** The body parsed as a resource of `type` (400 when it is another resource type). */
export function parseTyped<T extends Resource>(
  raw: Buffer,
  type: string,
  maxJsonValues: number,
): T {
  const resource = parseResource(raw, maxJsonValues);
  if (resource.resourceType !== type) {
    throw new FhirError(
      'bad-request',
      `the body is a ${resource.resourceType}, this endpoint takes a ${type}`,
      [
        {
          severity: 'error',
          code: 'invalid',
          diagnostics: `expected resourceType ${type}, got ${resource.resourceType}`,
          expression: ['resourceType'],
        },
      ],
    );
  }
  return resource as T;
}

/**
 * 422 unless the resource is valid FHIR R4. `tolerated`: invariants (by id, e.g. `bdl-3`) the
 * caller handles itself as a recorded quirk.
 */
export function assertValid(resource: Resource, tolerated: readonly string[] = []): void {
  const issues = validationIssues(resource, tolerated);
  if (issues.length > 0) {
    throw new FhirError('invalid', `the ${resource.resourceType} is not valid FHIR R4`, issues);
  }
}

/** What makes the resource invalid FHIR R4, but for the invariants (by id) in `tolerated`. */
export function validationIssues(
  resource: Resource,
  tolerated: readonly string[] = [],
): OperationOutcomeIssue[] {
  return validateFhirResource(resource).filter(
    (i) => !tolerated.some((id) => (i.details?.text ?? '').startsWith(`Constraint ${id} `)),
  );
}

/**
 * The issue of a new ServiceRequest whose placer identifier already names another patient's
 * order (intake result change-refused / create / other-patient): no record number in it.
 */
export function placerOfAnotherPatient(expression: string): OperationOutcomeIssue {
  return {
    severity: 'error',
    code: 'duplicate',
    diagnostics:
      'this placer identifier already names an order of another patient; no order was created (a placer number names one order: give this one its own)',
    expression: [expression],
  };
}
