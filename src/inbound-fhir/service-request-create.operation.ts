import type { ServiceRequest } from '@medplum/fhirtypes';
import { sha256Hex } from '../common/hash';
import {
  fhirResponse,
  fromCaller,
  mapOrRefuse,
  parseTyped,
  placerOfAnotherPatient,
  storeCreated,
  unexpectedResult,
  type FhirAnswer,
  type FhirCaller,
  type FhirOperationDeps,
} from './fhir-operation.shared';
import { isFhirResendOf, sameFhirContent } from './fhir-resend';
import { servedServiceRequest } from './fhir-served.resources';
import { FhirError, operationOutcome } from './fhir.error';
import { namesAnotherPatient } from '../domain/patient-identity';
import { ReferenceResolver } from './order-context.resolver';
import { matchReplaces } from './replaces.matcher';
import type { FhirFrontDoorConfig } from './fhir-front-door.config';
import type { FhirMappingResult } from '../mappings/fhir-order.mapping';
import type { OperationOutcomeIssue } from '@medplum/fhirtypes';
import { composedIdentifier, sameIdentifierText } from '../domain/identifier-form';

/** One `identifier=[system]|[value]` token of an If-None-Exist search. */
export interface IfNoneExistIdentifier {
  system?: string;
  value: string;
}

/**
 * `If-None-Exist: identifier=system|value[&identifier=…]` (R4 http.html#ccreate); only
 * identifier is supported. A repeated parameter is AND (R4 search.html#combining): the match is
 * a request carrying every identifier named. `system`/`value` are the first. A comma is OR
 * (`identifier=a|1,b|2`): refused 400, said as such; before, it was read as one value and
 * answered "names an identifier this ServiceRequest does not carry". An escaped comma, bar or
 * backslash (`\,` `\|` `\\`, R4 search.html#escaping) is part of the value.
 */
export function parseIfNoneExist(
  header: string | undefined,
): (IfNoneExistIdentifier & { identifiers: readonly IfNoneExistIdentifier[] }) | undefined {
  if (header === undefined || header.trim() === '') return undefined;
  const query = header.trim().replace(/^[A-Za-z]+\?/, '');
  const params = new URLSearchParams(query);
  const keys = [...new Set(params.keys())];
  const values = params.getAll('identifier');
  const refuse = (diagnostics: string, message: string): never => {
    throw new FhirError('bad-request', message, [
      { severity: 'error', code: 'not-supported', diagnostics, expression: ['If-None-Exist'] },
    ]);
  };
  if (keys.length !== 1 || values.length === 0 || values.some((v) => v === '')) {
    refuse(
      `If-None-Exist "${header}": only identifier=[system]|[value] is supported (repeated for AND)`,
      'If-None-Exist supports one parameter: identifier=[system]|[value], repeated for AND',
    );
  }
  const identifiers = values.map((v) => {
    const parts = splitUnescaped(v);
    if (parts.commas > 0) {
      refuse(
        `If-None-Exist "${header}": a comma in identifier is OR (R4 search.html), which a conditional create does not support here; name one identifier per parameter (repeated parameters are AND), or escape a comma of the value as \\,`,
        'If-None-Exist: a comma (OR) is not supported',
      );
    }
    const [system, value] =
      parts.bar === undefined
        ? [undefined, parts.text]
        : [parts.text.slice(0, parts.bar), parts.text.slice(parts.bar)];
    return value === ''
      ? undefined
      : { ...(system ? { system } : {}), value, hadBar: parts.bar !== undefined };
  });
  if (identifiers.some((i) => i === undefined)) {
    refuse(
      `If-None-Exist "${header}": an identifier without a value`,
      'If-None-Exist names no value',
    );
  }
  // composed (NFC), as the identifiers it is compared with are (domain/identifier-form.ts)
  const all = identifiers.map((i) => ({
    ...(i!.system === undefined ? {} : { system: composedIdentifier(i!.system) }),
    value: composedIdentifier(i!.value),
  }));
  const first = identifiers[0]!;
  return {
    ...(first.hadBar ? { system: all[0]!.system } : {}),
    value: all[0]!.value,
    identifiers: all,
  };
}

/**
 * A search token with its escapes read (R4 search.html#escaping: `\,` `\|` `\$` `\\`): the
 * text, where its first unescaped `|` fell (an index into the text), and how many unescaped
 * commas it held.
 */
function splitUnescaped(raw: string): { text: string; bar?: number; commas: number } {
  let text = '';
  let bar: number | undefined;
  let commas = 0;
  for (let i = 0; i < raw.length; i += 1) {
    const c = raw[i]!;
    if (c === '\\' && i + 1 < raw.length && ',|$\\'.includes(raw[i + 1]!)) {
      text += raw[i + 1];
      i += 1;
    } else if (c === '|' && bar === undefined) bar = text.length;
    else if (c === ',') commas += 1;
    else text += c;
  }
  return { text, bar, commas };
}

/** Whether a request carries every identifier a condition names (AND). */
export function carriesAll(
  sr: ServiceRequest,
  wanted: readonly IfNoneExistIdentifier[],
): IfNoneExistIdentifier | undefined {
  const ids = sr.identifier ?? [];
  return wanted.find(
    (w) =>
      !ids.some(
        (i) =>
          sameIdentifierText(i.value, w.value) &&
          (w.system === undefined || sameIdentifierText(i.system, w.system)),
      ),
  );
}

/**
 * A conditional create is answered by the order its identifiers name (R4 http.html#ccreate:
 * the existing resource that matches the search); one the ServiceRequest does not carry
 * matches nothing it is, so the header cannot be honoured (400 on it). It was the order's key
 * all the same: an If-None-Exist naming the requisition (shared by the orders of one visit)
 * answered the second order 200 with the first one's resource, and the second was never
 * ordered. A ServiceRequest with no identifier at all is known by the header alone.
 */
function assertCarries(
  sr: ServiceRequest,
  wanted: readonly IfNoneExistIdentifier[],
  header: string,
): void {
  const ids = (sr.identifier ?? []).filter((i) => i.value !== undefined);
  if (ids.length === 0) return;
  if (carriesAll(sr, wanted) === undefined) return;
  const diagnostics = `If-None-Exist "${header}" names an identifier this ServiceRequest does not carry (ServiceRequest.identifier): it would match another order, not this one; name this request's placer identifier`;
  throw new FhirError('bad-request', diagnostics, [
    { severity: 'error', code: 'not-supported', diagnostics, expression: ['If-None-Exist'] },
  ]);
}

/**
 * The checks and the mapping of a create, nothing stored: the body parsed and validated, its
 * context resolved, the order mapped; a FhirError (400/422) when it cannot be an order. Shared
 * by the create operation and the dry run.
 */
export async function prepareCreate(
  raw: Buffer,
  ifNoneExist: string | undefined,
  resolver: ReferenceResolver,
  config: FhirFrontDoorConfig,
): Promise<{
  sr: ServiceRequest;
  conditional: ReturnType<typeof parseIfNoneExist>;
  mapped: FhirMappingResult;
  request: NonNullable<FhirMappingResult['request']>;
}> {
  const sr = parseTyped<ServiceRequest>(raw, 'ServiceRequest', config.maxJsonValues);
  const conditional = parseIfNoneExist(ifNoneExist);
  if (conditional) assertCarries(sr, conditional.identifiers, ifNoneExist!);
  const { mapped, request } = await mapOrRefuse(
    sr,
    resolver,
    { lenient: false },
    'create',
    config,
    'the ServiceRequest cannot be accepted as an order',
  );
  return { sr, conditional, mapped, request };
}

/**
 * The orders whose request, submitted by this sender, carries every identifier an If-None-Exist
 * search names (AND), newest first; a revoked or entered-in-error request is no match (a
 * reorder after a cancel is a new order, as over HL7). Searched by the first identifier that
 * names its system; a search naming values alone is left to the placer number and the earlier
 * header, as before. The search of the REST header and of a Bundle entry's `ifNoneExist`.
 */
export async function findConditionalMatches(
  resources: FhirOperationDeps['resources'],
  wanted: readonly IfNoneExistIdentifier[],
  sender: string,
): Promise<string[]> {
  const key = wanted.find((w) => w.system);
  if (!key?.system) return [];
  const held = await resources.findOrderedServiceRequestsCarrying(
    { system: key.system, value: key.value },
    { sender },
  );
  const ids = held
    .filter((h) => !ENDED.has(h.resource.status ?? ''))
    .filter((h) => carriesAll(h.resource, wanted) === undefined)
    .map((h) => h.orderId)
    .filter((id): id is string => id !== null);
  return [...new Set(ids)];
}

/**
 * POST /fhir/ServiceRequest (conditional create on identifier): check, resolve, map, and hand
 * to the one intake use case; the answer (the served resource, or the known one) is built
 * inside the intake transaction and stored with the raw message. Refused input is kept too.
 */
export class CreateServiceRequestOperation {
  constructor(private readonly deps: FhirOperationDeps) {}

  async execute(
    caller: FhirCaller,
    ifNoneExist: string | undefined,
    options: { idempotencyKey?: string } = {},
  ): Promise<FhirAnswer> {
    let resolver: ReferenceResolver | undefined;
    // kept with a refusal: reprocessed without it, the body was a plain create (another order,
    // or 409 under the placer number), not the conditional create it was sent as
    const kept: FhirCaller = ifNoneExist === undefined ? caller : { ...caller, ifNoneExist };
    return this.deps.refusals.keeping(
      kept,
      'ServiceRequest create',
      async () => {
        resolver = new ReferenceResolver([], this.deps.ehr);
        const { sr, conditional, mapped, request } = await prepareCreate(
          caller.raw,
          ifNoneExist,
          resolver,
          this.deps.config,
        );
        // A plain POST without a placer number is known by its bytes; the same bytes sent
        // before as a conditional create were kept under its search, so that key is looked up
        // (DESIGN §5: a duplicate gets the original answer). It was a second order.
        const key =
          options.idempotencyKey ??
          (conditional
            ? `fhir-rest|${caller.sender}|ServiceRequest|${conditionKey(conditional.identifiers)}`
            : request.placerOrderNumber
              ? `fhir-rest|${caller.sender}|ServiceRequest|${request.placerOrderNumber.system ?? ''}|${request.placerOrderNumber.value}`
              : ((await this.deps.intake.keyOfSameCreate(caller.sender, caller.raw)) ??
                `fhir-rest|${caller.sender}|sha256:${sha256Hex(caller.raw)}`));
        const now = this.deps.clock().toISOString();
        // The request we serve under this placer number, if any: what a plain POST of an
        // order already made (by another message) must equal to be answered with it.
        // A conditional create's match must carry every identifier its search names (AND).
        // This sender's: the intake matches the sender's own order, and the newest request
        // under the number was another sender's when their numbering overlapped (then the AND
        // was not checked at all, and a search our order does not match was answered 200).
        const known = !request.placerOrderNumber
          ? undefined
          : await this.deps.resources.findServiceRequestByIdentifier(
              [request.placerOrderNumber],
              caller.sender,
            );
        // R4 http.html#ccreate: the search the header names, over the requests this sender
        // made (any identifier they carry, not only a placer number): one match is the answer,
        // several are 412. Before, a match was found only under an earlier If-None-Exist with
        // the same identifiers or under the placer number, and a request known by its
        // accession alone, created and then sent again conditionally on it, was a second order.
        const matched = conditional
          ? await findConditionalMatches(
              this.deps.resources,
              conditional.identifiers,
              caller.sender,
            )
          : [];
        if (matched.length > 1) throw multipleMatches(ifNoneExist!, matched.length);
        // what each `replaces` names here (our id, an EHR URL, the sender's placer identifier)
        const replaces = await matchReplaces(sr, {
          relativeTo: 'ours',
          sender: caller.sender,
          ehr: this.deps.ehr,
          publicBaseUrl: this.deps.config.publicBaseUrl,
          resources: this.deps.resources,
          at: 'ServiceRequest',
        });
        let served: ServiceRequest | undefined;
        const reply = await this.deps.intake.ingest(
          {
            ...fromCaller(caller),
            messageType: 'ServiceRequest create',
            messageControlId: conditional ? conditionKey(conditional.identifiers) : (sr.id ?? null),
            idempotencyKey: key,
            quirks: [...resolver.quirks, ...mapped.quirks],
            mappingVersion: mapped.mappingVersion,
            orders: [
              {
                request: request,
                lineage: mapped.lineage,
                sourceRef: 'ServiceRequest',
                conditional: Boolean(conditional),
                ...(matched[0] ? { targetOrderId: matched[0] } : {}),
                ...(replaces.length ? { replaces } : {}),
              },
            ],
          },
          {
            respond: (outcome) => {
              const r = outcome.results[0];
              if (r?.kind === 'created') {
                served = servedServiceRequest(sr, r.orderId, 1, now);
                return fhirResponse(201, served, true);
              }
              if (r?.kind === 'change-refused' && r.action === 'create') {
                // its placer number names another patient's order (known under another key)
                return fhirResponse(
                  409,
                  operationOutcome([placerOfAnotherPatient('ServiceRequest.identifier')]),
                  false,
                );
              }
              if (r?.kind === 'already-known') {
                // R4 search.html: repeated parameters are AND. The order under this placer
                // number is the match only when its request carries every identifier the
                // search names; otherwise the search matches nothing, and a create cannot make
                // a second order under one placer number: 409. Before, only the first parameter
                // was read, and such a create was answered 200 with the other order.
                const lacking =
                  conditional && known?.resource.id === r.orderId
                    ? carriesAll(known.resource, conditional.identifiers)
                    : undefined;
                if (lacking) {
                  return fhirResponse(
                    409,
                    operationOutcome([conditionMatchesNothing(r.orderId, lacking)]),
                    false,
                  );
                }
                // The order exists (same placer number): conditional create matched one (R4
                // http.html#ccreate → 200). A plain POST is that order only when it is the
                // request we serve for it (made by a Bundle, say); other content is a change
                // sent as a create, answered 200 and lost before: 409, use PUT.
                if (
                  !conditional &&
                  !(
                    known?.resource.id === r.orderId &&
                    sameFhirContent(sr, known.resource, { ignoreId: true })
                  )
                ) {
                  return fhirResponse(
                    409,
                    operationOutcome([placerReusedForOtherContent(r.orderId)]),
                    false,
                  );
                }
                return fhirResponse(200, { resourceType: 'ServiceRequest', id: r.orderId }, true);
              }
              return unexpectedResult(r?.kind);
            },
            // The key of a plain POST is its placer number: a second order under it is a resend
            // only for the same patient, and only with the same content (DESIGN §5: a duplicate
            // is answered with the original answer). Another patient's order under the number
            // was answered 200 with the first, and the new patient's order was never made; a
            // change sent as a create (priority stat) was answered 200 as a resend and lost. A
            // create does not change (R4 http.html#create): 409, use PUT. A conditional create
            // keeps R4's answer (http.html#ccreate: the match, 200), as the sender asked.
            reusedKey: conditional
              ? undefined
              : async (originalRaw, existing) => {
                  if (
                    (await existing.patients()).some((p) => namesAnotherPatient(request.patient, p))
                  ) {
                    return fhirResponse(
                      409,
                      operationOutcome([placerOfAnotherPatient('ServiceRequest.identifier')]),
                      false,
                    );
                  }
                  if (isFhirResendOf(caller.raw, originalRaw)) return undefined;
                  return fhirResponse(
                    409,
                    operationOutcome([placerReusedForOtherContent(idOfAnswer(existing.answer))]),
                    false,
                  );
                },
            afterStore: async (manager, stored) => {
              const r = stored.outcome.results[0];
              if (r?.kind === 'created' && served) {
                await storeCreated(this.deps.resources, manager, caller, r.orderId, served, now);
              }
            },
          },
        );
        if (!reply.response.accepted) {
          // Refused inside the intake: its stored answer, never a 200 that names no resource.
          return {
            status: Number(reply.response.code),
            resource: JSON.parse(reply.response.body.toString('utf8')) as ServiceRequest,
          };
        }
        if (!reply.duplicate && reply.response.code === '201' && served) {
          return {
            status: 201,
            resource: served,
            location: `ServiceRequest/${served.id}/_history/1`,
          };
        }
        const id = (JSON.parse(reply.response.body.toString('utf8')) as { id?: string }).id;
        const current = id ? await this.deps.resources.findServiceRequest(id) : undefined;
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
}

/**
 * The refusal of a create whose placer identifier names an order made from other content: a
 * POST creates, it does not change, so the sender is told where the order is and to PUT it
 * (or revoke it and order anew under a new number).
 */
export function placerReusedForOtherContent(
  id: string | undefined,
  expression = 'ServiceRequest.identifier',
): OperationOutcomeIssue {
  const where = id ? `ServiceRequest/${id}` : 'a ServiceRequest here';
  const put = id ? `PUT /fhir/ServiceRequest/${id}` : 'PUT it';
  return {
    severity: 'error',
    code: 'conflict',
    diagnostics: `this placer identifier already names ${where}, made from other content; a POST creates and does not change an order: to change it, ${put} (or revoke it and POST the new order under its own placer number). Nothing was changed`,
    expression: [expression],
  };
}

/** The id of the ServiceRequest a stored answer names, if it is one. */
function idOfAnswer(answer: Buffer): string | undefined {
  try {
    const first = JSON.parse(answer.toString('utf8')) as { resourceType?: string; id?: unknown };
    return first.resourceType === 'ServiceRequest' && typeof first.id === 'string'
      ? first.id
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The idempotency key of a conditional create: the identifier it names as before; with more
 * than one (AND), all of them in a fixed order, so the same search again is the same key and
 * another combination is not taken for it.
 */
function conditionKey(identifiers: readonly IfNoneExistIdentifier[]): string {
  const one = (i: IfNoneExistIdentifier) => `${i.system ?? ''}|${i.value}`;
  if (identifiers.length === 1) return one(identifiers[0]!);
  return [...new Set(identifiers.map(one))].sort().join('&');
}

/** Requests that are no longer an order to match: cancelled by the sender or made in error. */
const ENDED = new Set(['revoked', 'entered-in-error']);

/**
 * 412: the If-None-Exist search matches several orders (R4 http.html#ccreate); `at` is where
 * the search was named (the header, or a Bundle entry's `request.ifNoneExist`).
 */
export function multipleMatches(header: string, count: number, at = 'If-None-Exist'): FhirError {
  const diagnostics = `${at === 'If-None-Exist' ? 'If-None-Exist' : at} "${header.slice(0, 200)}" matches ${count} ServiceRequests of this sender: a conditional create needs a search that finds at most one (R4 http.html#ccreate); name this request's placer identifier`;
  return new FhirError('precondition-failed', diagnostics, [
    { severity: 'error', code: 'multiple-matches', diagnostics, expression: [at] },
  ]);
}

/** 409: the If-None-Exist search (AND) matches no order, and its placer number names one. */
function conditionMatchesNothing(
  orderId: string,
  lacking: IfNoneExistIdentifier,
): OperationOutcomeIssue {
  return {
    severity: 'error',
    code: 'conflict',
    diagnostics: `If-None-Exist matches no order: the order under this placer identifier (ServiceRequest/${orderId}) does not carry ${lacking.system ?? ''}|${lacking.value.slice(0, 64)} (repeated identifier parameters are AND), and one placer number names one order; change that order with PUT /fhir/ServiceRequest/${orderId}, or give this one its own placer number`,
    expression: ['ServiceRequest.identifier'],
  };
}
