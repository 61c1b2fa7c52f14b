import type { Reference, ServiceRequest } from '@medplum/fhirtypes';
import { PeerBase } from '../common/peer-url';
import type { ReplacedRequest } from '../orders/order-intake.service';
import { MAX_REPLACES_READ } from '../orders/intake.model';
import { placerIdentifierOf } from '../mappings/fhir-order.extract-helpers';
import type {
  FhirResourceRepository,
  StoredResource,
} from '../persistence/fhir-resource.repository';
import type { EhrFhirClient } from './ehr-fhir.client';
import { sameIdentifierText } from '../domain/identifier-form';

/** An R4 `id` (R4 datatypes.html#id). */
const FHIR_ID = /^[A-Za-z0-9\-.]{1,64}$/;
/** `ServiceRequest/<id>`, optionally versioned (R4 references.html#literal). */
const SERVICE_REQUEST_PATH = /^ServiceRequest\/([^/]+)(?:\/_history\/[^/]+)?$/;
/** A relative `Type/id[/_history/v]` of another type. */
const OTHER_TYPE_PATH = /^[A-Z][A-Za-z]+\/[^/]+(?:\/_history\/[^/]+)?$/;

export interface ReplacesScope {
  /**
   * Whose base a relative reference is on: ours for a request POSTed or PUT to us (R4
   * references.html: relative to the server the resource is on), the EHR's for a request read
   * from it.
   */
  relativeTo: 'ours' | 'ehr';
  /** The sender: a logical reference (placer identifier) names only its own requests. */
  sender: string;
  ehr: EhrFhirClient | undefined;
  /** This server's public FHIR base (FHIR_PUBLIC_BASE_URL), when configured. */
  publicBaseUrl?: string;
  resources: FhirResourceRepository;
  /** Where the ServiceRequest is, as FHIRPath: `ServiceRequest`, `Bundle.entry[1].resource`. */
  at: string;
}

/**
 * The order each `ServiceRequest.replaces` names, matched against what we hold and never
 * fetched (docs/security.md: a URL in an input is followed only within its peer's base; here
 * not even that, only compared). A reference names a request we serve (relative on our base,
 * or absolute on FHIR_PUBLIC_BASE_URL), a request read from the EHR (absolute within
 * FHIR_SERVER_URL, or relative in a request read from it), or the sender's request under a
 * placer identifier. Anything else is unmatched, with why. Whose order it is, its patient and
 * state are the intake's to decide (replace-decision.ts), under the order's lock.
 */
export async function matchReplaces(
  sr: ServiceRequest,
  scope: ReplacesScope,
): Promise<ReplacedRequest[]> {
  const named = Array.isArray(sr.replaces) ? sr.replaces : [];
  const out: ReplacedRequest[] = [];
  for (const [i, ref] of named.slice(0, MAX_REPLACES_READ).entries()) {
    out.push(await matchOne(ref, `${scope.at}.replaces[${i}]`, scope));
  }
  // The rest are not looked at (each is a lookup, and a lock in the intake), but never
  // silently: one entry says which were not, for the analyst to check. The 21st was dropped
  // without a trace, and the order it named ran beside the new one.
  if (named.length > MAX_REPLACES_READ) {
    const last = named.length - 1;
    out.push({
      element: `${scope.at}.replaces[${MAX_REPLACES_READ}]`,
      named: `replaces[${MAX_REPLACES_READ}]${last > MAX_REPLACES_READ ? ` to replaces[${last}]` : ''} (${last - MAX_REPLACES_READ + 1} of ${named.length}; the first ${MAX_REPLACES_READ} are read)`,
      unmatched: 'not-read',
    });
  }
  return out;
}

async function matchOne(
  ref: Reference<ServiceRequest> | undefined,
  element: string,
  scope: ReplacesScope,
): Promise<ReplacedRequest> {
  const reference = typeof ref?.reference === 'string' ? ref.reference : undefined;
  if (typeof ref?.type === 'string' && ref.type !== 'ServiceRequest')
    return { element, named: `a ${ref.type.slice(0, 64)}`, unmatched: 'not-a-service-request' };
  if (reference !== undefined) {
    // a query may carry an identifier value (PHI): never recorded
    const named = reference.replace(/[?#][\s\S]*$/, '?…').slice(0, 200);
    const search = /^ServiceRequest\?identifier=([^&|]+)\|([^&]+)$/.exec(reference);
    if (search) {
      // a conditional reference (R4 http.html#trules) by placer identifier: as `identifier`
      return byIdentifier(
        { system: safeDecode(search[1]!), value: safeDecode(search[2]!) },
        element,
        scope,
      );
    }
    if (reference.startsWith('#') || /^urn:/i.test(reference))
      return { element, named, unmatched: 'not-held' };
    if (!PeerBase.isAbsolute(reference)) {
      const m = SERVICE_REQUEST_PATH.exec(reference);
      if (!m) {
        return {
          element,
          named,
          unmatched: OTHER_TYPE_PATH.test(reference) ? 'not-a-service-request' : 'not-held',
        };
      }
      const id = m[1]!;
      return scope.relativeTo === 'ours'
        ? byOurId(id, element, named, scope)
        : byEhrId(id, element, named, scope);
    }
    const ours = ourId(reference, scope.publicBaseUrl);
    if (ours !== undefined) {
      return ours === null
        ? { element, named, unmatched: 'not-a-service-request' }
        : byOurId(ours, element, named, scope);
    }
    if (scope.ehr?.isOurs(reference)) {
      const id = ehrId(reference, scope.ehr);
      return id === null
        ? { element, named, unmatched: 'not-a-service-request' }
        : byEhrId(id, element, named, scope);
    }
    return { element, named, unmatched: 'outside-base' };
  }
  const id = ref?.identifier;
  if (typeof id?.system === 'string' && id.system && typeof id.value === 'string' && id.value)
    return byIdentifier({ system: id.system, value: id.value }, element, scope);
  return {
    element,
    named: id ? 'identifier without system or value' : '(no reference)',
    unmatched: 'not-held',
  };
}

/**
 * The sender's own request under a placer identifier (system and value): its placer number
 * (PLAC, or the one untyped identifier), never an accession or another shared identifier. One
 * accession covers several requested procedures (CT chest and CT abdomen): a `replaces` naming
 * it cancelled whichever of them was newest, and the other ran.
 */
async function byIdentifier(
  id: { system: string | undefined; value: string | undefined },
  element: string,
  scope: ReplacesScope,
): Promise<ReplacedRequest> {
  // no identifier value in what is recorded: a placer number is the patient's order number
  const named = `identifier (system ${(id.system ?? '').slice(0, 200)})`;
  if (!id.system || !id.value) return { element, named, unmatched: 'not-held' };
  const wanted = { system: id.system, value: id.value };
  const mine = placedUnder(
    await scope.resources.findOrderedServiceRequestsCarrying(wanted, { sender: scope.sender }),
    wanted,
  );
  if (mine?.orderId) return { element, named, orderId: mine.orderId };
  // The EHR's request that another sender first POSTed and the EHR then notified (held under
  // its URL on the EHR): the EHR's to replace, as by its URL.
  if (scope.relativeTo === 'ehr' && scope.ehr) {
    const notified = placedUnder(
      await scope.resources.findOrderedServiceRequestsCarrying(wanted, {
        sourceUrlPrefix: `${scope.ehr.baseUrl.replace(/\/+$/, '')}/ServiceRequest/`,
      }),
      wanted,
    );
    if (notified?.orderId)
      return { element, named, orderId: notified.orderId, notifiedBySender: true };
  }
  return { element, named, unmatched: 'not-held' };
}

/** The newest of these requests whose placer identifier is `id`. */
function placedUnder(
  candidates: Array<StoredResource<ServiceRequest>>,
  id: { system: string; value: string },
): StoredResource<ServiceRequest> | undefined {
  return candidates.find((c) => {
    const placer = placerIdentifierOf(c.resource)?.id;
    return (
      placer !== undefined &&
      sameIdentifierText(placer.system, id.system) &&
      sameIdentifierText(placer.value, id.value)
    );
  });
}

function safeDecode(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

/** A request we serve, by its id here (our id is its order's). */
async function byOurId(
  id: string,
  element: string,
  named: string,
  scope: ReplacesScope,
): Promise<ReplacedRequest> {
  if (!FHIR_ID.test(id)) return { element, named, unmatched: 'not-held' };
  const found = await scope.resources.findServiceRequest(id);
  return found?.orderId
    ? { element, named, orderId: found.orderId }
    : { element, named, unmatched: 'not-held' };
}

/** A request read from the EHR, by its canonical URL there (as notifications are known). */
async function byEhrId(
  id: string,
  element: string,
  named: string,
  scope: ReplacesScope,
): Promise<ReplacedRequest> {
  if (!scope.ehr) return { element, named, unmatched: 'outside-base' };
  if (!FHIR_ID.test(id) || /^\.+$/.test(id)) return { element, named, unmatched: 'not-held' };
  const url = scope.ehr.absolute(`ServiceRequest/${id}`);
  const found = (await scope.resources.findBySourceUrls([url])).get(url);
  if (!found?.orderId) return { element, named, unmatched: 'not-held' };
  // A request read from the EHR naming another of the EHR's requests: that order is one the
  // EHR notified us of (held under its URL), whoever first POSTed it (matched by its placer
  // number): the EHR revokes it by notification, and replaces it so too.
  return {
    element,
    named,
    orderId: found.orderId,
    ...(scope.relativeTo === 'ehr' ? { notifiedBySender: true as const } : {}),
  };
}

/**
 * The ServiceRequest id of an absolute URL on our public base; null for another resource
 * there; undefined when the URL is not on our base (or none is configured).
 */
function ourId(reference: string, publicBaseUrl: string | undefined): string | null | undefined {
  if (!publicBaseUrl) return undefined;
  const base = new PeerBase('this server', publicBaseUrl);
  if (!base.contains(reference)) return undefined;
  return idUnder(base.resolve(reference), new URL(base.href));
}

/** The ServiceRequest id of an absolute URL within the EHR's base; null for another resource. */
function ehrId(reference: string, ehr: EhrFhirClient): string | null {
  return idUnder(new URL(ehr.absolute(reference)), new URL(ehr.baseUrl));
}

function idUnder(url: URL, base: URL): string | null {
  if (url.search || url.hash) return null;
  const basePath = base.pathname.replace(/\/$/, '');
  const m = SERVICE_REQUEST_PATH.exec(url.pathname.slice(basePath.length + 1));
  if (!m) return null;
  try {
    return decodeURIComponent(m[1]!);
  } catch {
    return null;
  }
}
