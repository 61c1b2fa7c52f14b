import { mayRead, type SenderRestriction } from './fhir-request.context';
import type {
  Bundle,
  BundleEntry,
  OperationOutcomeIssue,
  Resource,
  ServiceRequest,
} from '@medplum/fhirtypes';
import type { Logger } from 'pino';
import { sha256Hex } from '../common/hash';
import { dedupeQuirks } from '../common/quirks';
import { mapServiceRequest, type FhirMappingIssue } from '../mappings/fhir-order.mapping';
import type { ToleratedQuirk } from '../orders/domain/order-request';
import type {
  IntakeOrder,
  IntakeOutcome,
  IntakeResponse,
  OrderIntakeService,
} from '../orders/order-intake.service';
import type { EhrFhirClient } from './ehr-fhir.client';
import type { FhirFrontDoorConfig } from './fhir-front-door.config';
import { assertJsonMediaType, parseIfMatch, parseResource } from './fhir-http';
import type { FhirResourceRepository } from './fhir-resource.repository';
import { FhirError, operationOutcome } from './fhir.error';
import { validateFhirResource } from './fhir-validator';
import { buildOrderContext, ReferenceResolver, type SiblingEntry } from './order-context.resolver';

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
}

/** The answer the controller sends: a status and a resource (or none). */
export interface FhirAnswer {
  status: number;
  resource?: Resource;
  location?: string;
  duplicate?: boolean;
}

const FHIR_JSON = 'application/fhir+json';

/** Resource types a transaction/batch may carry beside its ServiceRequests (used as context, not stored). */
const CONTEXT_TYPES = new Set([
  'Patient',
  'ImagingStudy',
  'Practitioner',
  'PractitionerRole',
  'Condition',
  'Observation',
  'Encounter',
  'Organization',
]);

export function toIssues(issues: FhirMappingIssue[], prefix?: string): OperationOutcomeIssue[] {
  return issues.map((i) => ({
    severity: i.severity,
    code: i.code,
    diagnostics: i.diagnostics,
    expression: [
      prefix ? `${prefix}.${i.expression.replace(/^ServiceRequest\./, '')}` : i.expression,
    ],
  }));
}

/** `If-None-Exist: identifier=system|value` (R4 http.html#ccreate); only identifier is supported. */
export function parseIfNoneExist(
  header: string | undefined,
): { system?: string; value: string } | undefined {
  if (header === undefined || header.trim() === '') return undefined;
  const query = header.trim().replace(/^[A-Za-z]+\?/, '');
  const params = new URLSearchParams(query);
  const keys = [...new Set(params.keys())];
  const identifier = params.get('identifier');
  if (keys.length !== 1 || !identifier) {
    throw new FhirError(
      'bad-request',
      'If-None-Exist supports exactly one parameter: identifier=[system]|[value]',
      [
        {
          severity: 'error',
          code: 'not-supported',
          diagnostics: `If-None-Exist "${header}": only identifier=[system]|[value] is supported`,
          expression: ['If-None-Exist'],
        },
      ],
    );
  }
  const bar = identifier.indexOf('|');
  return bar < 0
    ? { value: identifier }
    : { system: identifier.slice(0, bar) || undefined, value: identifier.slice(bar + 1) };
}

/**
 * The FHIR REST use cases: check, resolve, map, and hand to the one intake use case; the
 * answer (the served resource, its version, or an OperationOutcome) is built inside the intake
 * transaction and stored with the raw message. Refused input is kept too (recordRejected).
 */
export class FhirOrderService {
  constructor(
    private readonly intake: OrderIntakeService,
    private readonly store: FhirResourceRepository,
    private readonly config: FhirFrontDoorConfig,
    private readonly ehr: EhrFhirClient | undefined,
    private readonly logger: Logger,
    private readonly clock: () => Date = () => new Date(),
  ) {}

  /** Runs `fn`; a FhirError it throws (except 5xx) is stored as a rejected message, then rethrown. */
  private async keepingRefusals<T>(
    caller: FhirCaller,
    messageType: string,
    fn: () => Promise<T>,
    quirks: () => ToleratedQuirk[] = () => [],
  ): Promise<T> {
    try {
      assertJsonMediaType(caller.contentType);
      return await fn();
    } catch (caught) {
      let error = caught;
      // A TypeError while reading the body means a shape the structure validator let through
      // (e.g. an object where a string belongs): the input is refused (422), not the service.
      if (caught instanceof TypeError) {
        this.logger.warn({ messageType, err: caught.message }, 'fhir body could not be read');
        error = new FhirError('invalid', `the resource could not be read: ${caught.message}`);
      }
      if (error instanceof FhirError && error.httpStatus < 500) {
        await this.recordRefusal(caller, messageType, error, quirks());
      }
      throw error;
    }
  }

  async recordRefusal(
    caller: FhirCaller,
    messageType: string | null,
    error: FhirError,
    quirks: ToleratedQuirk[] = [],
  ): Promise<void> {
    try {
      await this.intake.recordRejected({
        transport: 'fhir-rest',
        sender: caller.sender,
        remoteAddress: caller.remoteAddress,
        messageType,
        messageControlId: null,
        raw: caller.raw,
        contentType: caller.contentType,
        quirks,
        response: {
          code: String(error.httpStatus),
          body: Buffer.from(JSON.stringify(error.toOperationOutcome())),
          contentType: FHIR_JSON,
          accepted: false,
        },
        problems: error.issues.map((i) => ({
          location: i.expression?.[0],
          code: String(i.code),
          message: i.diagnostics ?? i.details?.text ?? error.message,
        })),
      });
    } catch (storeError) {
      this.logger.error(
        { err: (storeError as Error).message },
        'refused FHIR request could not be stored',
      );
    }
  }

  private parseTyped<T extends Resource>(raw: Buffer, type: string): T {
    const resource = parseResource(raw);
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

  private validate(resource: Resource): void {
    const issues = validateFhirResource(resource);
    if (issues.length > 0) {
      throw new FhirError('invalid', `the ${resource.resourceType} is not valid FHIR R4`, issues);
    }
  }

  /** POST /fhir/ServiceRequest (conditional create on identifier). */
  async create(caller: FhirCaller, ifNoneExist: string | undefined): Promise<FhirAnswer> {
    let resolver: ReferenceResolver | undefined;
    return this.keepingRefusals(
      caller,
      'ServiceRequest create',
      async () => {
        const sr = this.parseTyped<ServiceRequest>(caller.raw, 'ServiceRequest');
        this.validate(sr);
        const conditional = parseIfNoneExist(ifNoneExist);
        resolver = new ReferenceResolver([], this.ehr);
        const built = await buildOrderContext(sr, resolver, { lenient: false });
        const mapped = mapServiceRequest(sr, built.ctx, 'create', this.config.mapping);
        const issues = [
          ...built.issues,
          ...toIssues(mapped.issues.filter((i) => i.severity === 'error')),
        ];
        if (issues.length > 0 || !mapped.request) {
          throw new FhirError(
            'invalid',
            'the ServiceRequest cannot be accepted as an order',
            issues,
          );
        }
        const placer = mapped.request.placerOrderNumber;
        const key = conditional
          ? `fhir-rest|${caller.sender}|ServiceRequest|${conditional.system ?? ''}|${conditional.value}`
          : placer
            ? `fhir-rest|${caller.sender}|ServiceRequest|${placer.system ?? ''}|${placer.value}`
            : `fhir-rest|${caller.sender}|sha256:${sha256Hex(caller.raw)}`;
        const now = this.clock().toISOString();
        let served: ServiceRequest | undefined;
        const reply = await this.intake.ingest(
          {
            transport: 'fhir-rest',
            sender: caller.sender,
            remoteAddress: caller.remoteAddress,
            messageType: 'ServiceRequest create',
            messageControlId: conditional
              ? `${conditional.system ?? ''}|${conditional.value}`
              : (sr.id ?? null),
            idempotencyKey: key,
            raw: caller.raw,
            contentType: caller.contentType,
            quirks: [...resolver.quirks, ...mapped.quirks],
            mappingVersion: mapped.mappingVersion,
            actor: caller.actor,
            orders: [
              { request: mapped.request, lineage: mapped.lineage, sourceRef: 'ServiceRequest' },
            ],
            afterStore: async (manager, stored) => {
              const r = stored.outcome.results[0];
              if (r?.kind === 'created' && served) {
                await this.store.insertServiceRequest(manager, {
                  id: r.orderId,
                  orderId: r.orderId,
                  sender: caller.sender,
                  resource: served,
                  lastUpdated: now,
                });
              }
            },
          },
          (outcome) => {
            const r = outcome.results[0];
            if (r?.kind === 'created') {
              served = {
                ...sr,
                id: r.orderId,
                meta: { ...sr.meta, versionId: '1', lastUpdated: now },
              };
              return {
                code: '201',
                body: Buffer.from(JSON.stringify(served)),
                contentType: FHIR_JSON,
                accepted: true,
              };
            }
            if (r?.kind === 'already-known') {
              // The order exists (same placer number): conditional create matched one (R4 http.html#ccreate → 200).
              return {
                code: '200',
                body: Buffer.from(
                  JSON.stringify({ resourceType: 'ServiceRequest', id: r.orderId }),
                ),
                contentType: FHIR_JSON,
                accepted: true,
              };
            }
            return this.unexpected(r?.kind);
          },
        );
        if (!reply.duplicate && reply.response.code === '201' && served) {
          return {
            status: 201,
            resource: served,
            location: `ServiceRequest/${served.id}/_history/1`,
          };
        }
        const id = (JSON.parse(reply.response.body.toString('utf8')) as { id?: string }).id;
        const current = id ? await this.store.findServiceRequest(id) : undefined;
        const resource: ServiceRequest = current?.resource ?? { ...sr, id };
        return {
          status: 200,
          resource,
          location: `ServiceRequest/${id}/_history/${current?.versionId ?? 1}`,
          duplicate: true,
        };
      },
      () => resolver?.quirks ?? [],
    );
  }

  private unexpected(kind: string | undefined): IntakeResponse {
    const outcome = operationOutcome([
      {
        severity: 'error',
        code: 'exception',
        diagnostics: `unexpected intake result ${kind ?? 'none'}`,
      },
    ]);
    return {
      code: '500',
      body: Buffer.from(JSON.stringify(outcome)),
      contentType: FHIR_JSON,
      accepted: false,
    };
  }

  /** PUT /fhir/ServiceRequest/{id}: revoked / entered-in-error cancel; anything else updates metadata. */
  async update(caller: FhirCaller, id: string, ifMatch: string | undefined): Promise<FhirAnswer> {
    let resolver: ReferenceResolver | undefined;
    return this.keepingRefusals(
      caller,
      'ServiceRequest update',
      async () => {
        const stored = await this.store.findServiceRequest(id);
        // Another sender's ServiceRequest is treated as unknown: its existence is not confirmed.
        const foreign = caller.restrictedTo !== undefined && stored?.sender !== caller.restrictedTo;
        if (!stored || !stored.orderId || foreign) {
          // R4 http.html#update: no update-as-create (CapabilityStatement updateCreate=false) → 405.
          throw new FhirError(
            'method-not-allowed',
            `ServiceRequest/${id} does not exist and this server does not create resources by update: POST the ServiceRequest`,
          );
        }
        const sr = this.parseTyped<ServiceRequest>(caller.raw, 'ServiceRequest');
        if (sr.id !== id) {
          throw new FhirError(
            'bad-request',
            'the resource id must match the URL (R4 http.html#update)',
            [
              {
                severity: 'error',
                code: 'invalid',
                diagnostics: `ServiceRequest.id is ${sr.id === undefined ? 'missing' : `"${sr.id}"`}, the URL names ${id}`,
                expression: ['ServiceRequest.id'],
              },
            ],
          );
        }
        const wanted = parseIfMatch(ifMatch);
        if (wanted !== undefined && wanted !== String(stored.versionId)) {
          throw new FhirError(
            'precondition-failed',
            `If-Match names version ${wanted}; the current version is ${stored.versionId}`,
          );
        }
        this.validate(sr);
        resolver = new ReferenceResolver([], this.ehr);
        const cancelling = sr.status === 'revoked' || sr.status === 'entered-in-error';
        const built = await buildOrderContext(sr, resolver, { lenient: cancelling });
        const mapped = mapServiceRequest(sr, built.ctx, 'update', this.config.mapping);
        const issues = [
          ...built.issues,
          ...toIssues(mapped.issues.filter((i) => i.severity === 'error')),
        ];
        if (issues.length > 0 || !mapped.request) {
          throw new FhirError('invalid', 'the ServiceRequest change cannot be applied', issues);
        }
        const version = stored.versionId + 1;
        const now = this.clock().toISOString();
        const served: ServiceRequest = {
          ...sr,
          id,
          meta: { ...sr.meta, versionId: String(version), lastUpdated: now },
        };
        const reply = await this.intake.ingest(
          {
            transport: 'fhir-rest',
            sender: caller.sender,
            remoteAddress: caller.remoteAddress,
            messageType: `ServiceRequest update (${sr.status})`,
            messageControlId: `ServiceRequest/${id}`,
            idempotencyKey: `fhir-rest|${caller.sender}|PUT|ServiceRequest/${id}|sha256:${sha256Hex(caller.raw)}`,
            raw: caller.raw,
            contentType: caller.contentType,
            quirks: [...resolver.quirks, ...mapped.quirks],
            mappingVersion: mapped.mappingVersion,
            actor: caller.actor,
            orders: [
              {
                request: mapped.request,
                lineage: mapped.lineage,
                sourceRef: `ServiceRequest/${id}`,
                targetOrderId: stored.orderId,
              },
            ],
            afterStore: async (manager) => {
              await this.store.updateServiceRequest(manager, {
                id,
                resource: served,
                versionId: version,
                lastUpdated: now,
              });
            },
          },
          (outcome) => this.respondToUpdate(outcome, served),
        );
        if (!reply.response.accepted) {
          return {
            status: Number(reply.response.code),
            resource: JSON.parse(reply.response.body.toString('utf8')) as Resource,
          };
        }
        if (reply.duplicate) {
          const current = await this.store.findServiceRequest(id);
          return { status: 200, resource: current?.resource ?? served, duplicate: true };
        }
        return {
          status: 200,
          resource: served,
          location: `ServiceRequest/${id}/_history/${version}`,
        };
      },
      () => resolver?.quirks ?? [],
    );
  }

  private respondToUpdate(outcome: IntakeOutcome, served: ServiceRequest): IntakeResponse {
    const r = outcome.results[0];
    const refuse = (status: number, issue: OperationOutcomeIssue): IntakeResponse => ({
      code: String(status),
      body: Buffer.from(JSON.stringify(operationOutcome([issue]))),
      contentType: FHIR_JSON,
      accepted: false,
    });
    switch (r?.kind) {
      case 'cancel-accepted':
      case 'updated':
        return {
          code: '200',
          body: Buffer.from(JSON.stringify(served)),
          contentType: FHIR_JSON,
          accepted: true,
        };
      case 'cancel-too-late':
        return refuse(409, {
          severity: 'error',
          code: 'business-rule',
          diagnostics: `the order is already ${r.state}; it can no longer be cancelled (see Task/${r.orderId})`,
          expression: ['ServiceRequest.status'],
        });
      case 'unknown-order':
        return refuse(404, {
          severity: 'error',
          code: 'not-found',
          diagnostics: 'no order for this ServiceRequest',
        });
      default:
        return this.unexpected(r?.kind);
    }
  }

  /** POST /fhir with a transaction or batch Bundle (R4 http.html#transaction). */
  async bundle(caller: FhirCaller): Promise<FhirAnswer> {
    const quirks: ToleratedQuirk[] = [];
    return this.keepingRefusals(
      caller,
      'Bundle',
      async () => {
        const bundle = parseResource(caller.raw);
        if (bundle.resourceType !== 'Bundle') {
          throw new FhirError(
            'bad-request',
            `POST to the base takes a transaction or batch Bundle, not a ${bundle.resourceType}`,
            [
              {
                severity: 'error',
                code: 'invalid',
                diagnostics: 'expected a Bundle',
                expression: ['resourceType'],
              },
            ],
          );
        }
        const b = bundle as Bundle;
        this.validate(b);
        if (b.type !== 'transaction' && b.type !== 'batch') {
          throw new FhirError('invalid', `Bundle.type ${b.type} is not processed here`, [
            {
              severity: 'error',
              code: 'not-supported',
              diagnostics: `only transaction and batch Bundles are accepted (got ${b.type})`,
              expression: ['Bundle.type'],
            },
          ]);
        }
        const entries = b.entry ?? [];
        const siblings: SiblingEntry[] = [];
        const structural: OperationOutcomeIssue[] = [];
        entries.forEach((e, i) => {
          if (!e.resource) {
            structural.push({
              severity: 'error',
              code: 'required',
              diagnostics: 'each entry needs a resource (only POST/PUT of resources is supported)',
              expression: [`Bundle.entry[${i}].resource`],
            });
            return;
          }
          if (!e.request) {
            quirks.push({
              code: 'fhir-bundle-entry-without-request',
              detail: `Bundle.entry[${i}] has no request: treated as POST`,
            });
          }
          const type = e.resource.resourceType;
          if (type === 'ServiceRequest') {
            const method = e.request?.method ?? 'POST';
            if (method !== 'POST') {
              structural.push({
                severity: 'error',
                code: 'not-supported',
                diagnostics: `ServiceRequest entries must be POST (create); got ${method}. Use PUT /fhir/ServiceRequest/{id} to change an order`,
                expression: [`Bundle.entry[${i}].request.method`],
              });
            }
          } else if (!CONTEXT_TYPES.has(type)) {
            structural.push({
              severity: 'error',
              code: 'not-supported',
              diagnostics: `${type} is not supported in an order Bundle (ServiceRequest with ${[...CONTEXT_TYPES].join(', ')})`,
              expression: [`Bundle.entry[${i}].resource.resourceType`],
            });
          }
          siblings.push({
            fullUrl: e.fullUrl,
            resource: e.resource,
            location: `Bundle.entry[${i}]`,
          });
        });
        if (structural.length > 0)
          throw new FhirError('invalid', 'the Bundle cannot be processed', structural);

        const resolver = new ReferenceResolver(siblings, this.ehr);
        const orders: Array<IntakeOrder & { entryIndex: number; sr: ServiceRequest }> = [];
        const entryErrors = new Map<number, OperationOutcomeIssue[]>();
        let mappingVersion = '';
        for (const [i, e] of entries.entries()) {
          if (e.resource?.resourceType !== 'ServiceRequest') continue;
          const sr = e.resource as ServiceRequest;
          const path = `Bundle.entry[${i}].resource`;
          const built = await buildOrderContext(sr, resolver, {
            lenient: false,
            path,
            srFullUrl: e.fullUrl,
            siblings,
          });
          const mapped = mapServiceRequest(sr, built.ctx, 'create', this.config.mapping);
          mappingVersion = mapped.mappingVersion;
          quirks.push(...mapped.quirks);
          const issues = [
            ...built.issues,
            ...toIssues(
              mapped.issues.filter((x) => x.severity === 'error'),
              path,
            ),
          ];
          if (issues.length > 0 || !mapped.request) {
            entryErrors.set(i, issues);
            continue;
          }
          orders.push({
            request: mapped.request,
            lineage: mapped.lineage,
            sourceRef: `Bundle.entry[${i}]`,
            entryIndex: i,
            sr,
          });
        }
        quirks.push(...resolver.quirks);
        if (orders.length === 0 && entryErrors.size === 0) {
          throw new FhirError('invalid', 'the Bundle carries no ServiceRequest', [
            {
              severity: 'error',
              code: 'required',
              diagnostics: 'at least one ServiceRequest entry is required',
              expression: ['Bundle.entry'],
            },
          ]);
        }
        if (b.type === 'transaction' && entryErrors.size > 0) {
          // A transaction succeeds or fails as a whole (R4 http.html#trules).
          throw new FhirError(
            'invalid',
            'the transaction cannot be processed',
            [...entryErrors.values()].flat(),
          );
        }

        const key = b.identifier?.value
          ? `fhir-rest|${caller.sender}|Bundle|${b.identifier.system ?? ''}|${b.identifier.value}`
          : `fhir-rest|${caller.sender}|sha256:${sha256Hex(caller.raw)}`;
        const now = this.clock().toISOString();
        const servedByIndex = new Map<number, ServiceRequest>();
        const reply = await this.intake.ingest(
          {
            transport: 'fhir-rest',
            sender: caller.sender,
            remoteAddress: caller.remoteAddress,
            messageType: `Bundle ${b.type}`,
            messageControlId: b.identifier?.value ?? b.id ?? null,
            idempotencyKey: key,
            raw: caller.raw,
            contentType: caller.contentType,
            quirks: dedupeQuirks(quirks),
            mappingVersion: mappingVersion || 'fhir-order-mapping',
            actor: caller.actor,
            orders: orders.map(({ request, lineage, sourceRef }) => ({
              request,
              lineage,
              sourceRef,
            })),
            afterStore: async (manager, stored) => {
              for (const [k, r] of stored.outcome.results.entries()) {
                const served = servedByIndex.get(orders[k]!.entryIndex);
                if (r.kind === 'created' && served) {
                  await this.store.insertServiceRequest(manager, {
                    id: r.orderId,
                    orderId: r.orderId,
                    sender: caller.sender,
                    resource: served,
                    lastUpdated: now,
                  });
                }
              }
            },
          },
          (outcome) => {
            const responseEntries: BundleEntry[] = entries.map((e, i) => {
              const errors = entryErrors.get(i);
              if (errors) {
                return {
                  response: {
                    status: '422 Unprocessable Entity',
                    outcome: operationOutcome(errors),
                  },
                };
              }
              if (e.resource?.resourceType !== 'ServiceRequest') {
                return {
                  response: {
                    status: '200 OK',
                    outcome: operationOutcome([
                      {
                        severity: 'information',
                        code: 'informational',
                        diagnostics: `${e.resource?.resourceType} used as order context; it is not stored as a resource here`,
                      },
                    ]),
                  },
                };
              }
              const k = orders.findIndex((o) => o.entryIndex === i);
              const r = outcome.results[k];
              if (r?.kind === 'created') {
                const sr = orders[k]!.sr;
                const served: ServiceRequest = {
                  ...sr,
                  id: r.orderId,
                  meta: { ...sr.meta, versionId: '1', lastUpdated: now },
                };
                servedByIndex.set(i, served);
                return {
                  resource: served,
                  response: {
                    status: '201 Created',
                    location: `ServiceRequest/${r.orderId}/_history/1`,
                    etag: 'W/"1"',
                    lastModified: now,
                  },
                };
              }
              if (r?.kind === 'already-known') {
                return {
                  response: { status: '200 OK', location: `ServiceRequest/${r.orderId}` },
                };
              }
              return { response: { status: '500 Internal Server Error' } };
            });
            const response: Bundle = {
              resourceType: 'Bundle',
              type: b.type === 'transaction' ? 'transaction-response' : 'batch-response',
              entry: responseEntries,
            };
            return {
              code: '200',
              body: Buffer.from(JSON.stringify(response)),
              contentType: FHIR_JSON,
              accepted: true,
            };
          },
        );
        return {
          status: 200,
          resource: JSON.parse(reply.response.body.toString('utf8')) as Bundle,
          duplicate: reply.duplicate,
        };
      },
      () => dedupeQuirks(quirks),
    );
  }

  async readServiceRequest(id: string, restriction?: SenderRestriction): Promise<ServiceRequest> {
    const stored = await this.store.findServiceRequest(id);
    if (!stored || !mayRead(restriction, stored.sender))
      throw new FhirError('not-found', `ServiceRequest/${id} is not known here`);
    return stored.resource;
  }
}
