import { sameIdentifierText } from '../domain/identifier-form';
import { sameBundleName } from '../fhir/fhir-urn';
import { sameFhirContent } from './fhir-resend';
import { newestVersion } from './fhir-versions';
import type {
  ImagingStudy,
  OperationOutcomeIssue,
  Patient,
  Practitioner,
  PractitionerRole,
  Reference,
  Resource,
  ServiceRequest,
} from '@medplum/fhirtypes';
import type { FhirOrderContext, Located } from '../mappings/fhir-order.mapping';
import type { ToleratedQuirk } from '../domain/order-request';
import { PeerBase } from '../common/peer-url';
import { EhrFhirError, type EhrFhirClient } from './ehr-fhir.client';
import { FhirError } from './fhir.error';
import { validateFhirResource } from '../fhir/fhir-validator';

/** A resource of the Bundle (or notification) the ServiceRequest travelled in. */
export interface SiblingEntry {
  fullUrl?: string;
  resource: Resource;
  /** For lineage: `Bundle.entry[2]`. */
  location: string;
}

/**
 * Resolves what a ServiceRequest refers to (R4 references.html#contained, bundle.html
 * #references): a contained resource (`#id`), a Bundle sibling (by fullUrl, or `Type/id`),
 * else a read from the EHR's FHIR server when one is configured. Pure lookups first; the EHR
 * is asked only for what the message did not carry.
 */
export class ReferenceResolver {
  readonly quirks: ToleratedQuirk[] = [];

  constructor(
    private readonly siblings: readonly SiblingEntry[],
    private readonly ehr: EhrFhirClient | undefined,
  ) {}

  get hasEhr(): boolean {
    return this.ehr !== undefined;
  }

  /**
   * One read per reference for the whole notification (or Bundle): its requests name the same
   * Patient and requester, which were read once per request (300 id-only events of one
   * patient's orders: 900 reads of the EHR for 300 requests).
   */
  private read(ref: string): Promise<Resource> {
    let pending = this.reads.get(ref);
    if (!pending) {
      pending = this.ehr!.read<Resource>(ref);
      this.reads.set(ref, pending);
    }
    return pending;
  }

  private readonly reads = new Map<string, Promise<Resource>>();

  /**
   * The entry a reference names, or undefined. Throws FhirError 422 at `expression` when it
   * names two entries that differ (two Patients PUT as `Patient/x`, from two feeds or two
   * servers): whose order it is would be a guess, and the first entry was taken.
   */
  private sibling(ref: string, expression: string): SiblingEntry | undefined {
    const named = this.siblingsNamed(ref);
    // Versions of one resource under its one fullUrl (a history Bundle: a notification
    // carrying versions 1 and 2 of the Patient): the newest.
    if (named.length > 1 && named.every((s) => s.fullUrl && s.fullUrl === named[0]!.fullUrl))
      return newestVersion(named);
    const [first] = named;
    const other = named.find((s) => !sameFhirContent(s.resource, first!.resource));
    if (first && other) {
      const diagnostics = `${expression} (${ref.slice(0, 200)}) names more than one entry of the Bundle, ${siblingPath(first)} and ${siblingPath(other)}, and they differ: which resource is meant is not certain; give each its own id or fullUrl`;
      throw new FhirError('invalid', diagnostics, [
        { severity: 'error', code: 'duplicate', diagnostics, expression: [expression] },
      ]);
    }
    return first;
  }

  private siblingsNamed(ref: string): SiblingEntry[] {
    const exact = this.siblings.filter((s) => sameBundleName(s.fullUrl, ref));
    if (exact.length > 0) return exact;
    const unversioned = ref.replace(/\/_history\/[^/]+$/, '');
    // An absolute URL names a resource on that server (R4 bundle.html#references): it is an
    // entry only when it is that entry's fullUrl, never an entry of the same type and id (a
    // Patient/example of another server was taken for the Bundle's Patient/example).
    if (PeerBase.isAbsolute(ref)) return this.siblings.filter((s) => s.fullUrl === unversioned);
    const m = /^([A-Z][A-Za-z]+)\/([A-Za-z0-9\-.]{1,64})(?:\/_history\/[^/]+)?$/.exec(ref);
    if (!m) return [];
    return this.siblings.filter(
      (s) =>
        (s.resource.resourceType === m[1] && s.resource.id === m[2]) ||
        (s.fullUrl !== undefined && s.fullUrl.endsWith(`/${m[1]}/${m[2]}`)),
    );
  }

  /**
   * The referenced resource, or undefined when it cannot be found. Throws FhirError 503 when
   * the EHR could not be reached (the sender should retry), never for a 404 from the EHR.
   */
  async resolve<T extends Resource>(
    container: Resource,
    reference: Reference | undefined,
    expectedType: string | undefined,
    /** The element holding the reference, for the OperationOutcome of a refusal. */
    expression: string,
    /**
     * The order can do without it (the requester, a reason): a reference outside the EHR's
     * base is then not read and not a refusal either, only a quirk; the element's own
     * identifier and display still count. The patient and the study are never informational.
     */
    informational = false,
  ): Promise<Located<T> | undefined> {
    const ref = reference?.reference;
    if (!ref) return undefined;
    if (ref.startsWith('#')) {
      const id = ref.slice(1);
      const contained = (container as { contained?: Resource[] }).contained ?? [];
      const index = contained.findIndex((c) => c.id === id);
      const hit = contained[index];
      return hit && (!expectedType || hit.resourceType === expectedType)
        ? {
            resource: hit as T,
            source: `contained ${ref}`,
            path: `${container.resourceType}.contained[${index}]`,
          }
        : undefined;
    }
    const conditional = CONDITIONAL_REFERENCE.exec(ref);
    if (conditional) {
      const hit = await this.resolveConditional(conditional[1]!, conditional[2]!, expression);
      return !expectedType || hit.resource.resourceType === expectedType
        ? (hit as Located<T>)
        : undefined;
    }
    const sib = this.sibling(ref, expression);
    if (sib) {
      return !expectedType || sib.resource.resourceType === expectedType
        ? { resource: sib.resource as T, source: sib.location, path: siblingPath(sib) }
        : undefined;
    }
    if (/^urn:/i.test(ref)) return undefined;
    // A reference is read only within FHIR_SERVER_URL (docs/security.md): an absolute URL
    // elsewhere, or a relative one that climbs out of the base (`../admin/Patient/1`), is
    // refused, never fetched, so the EHR's credential cannot be sent anywhere else. A refusal
    // (422), not a 503: a resend would be refused the same way.
    // So is one with a `.` or `..` segment (`Patient/.` is the EHR's Patient search): it was
    // read where it resolved, and a gateway's answer there became the order's patient.
    const why = this.ehr
      ? this.ehr.whyNotOurs(ref)
      : PeerBase.isAbsolute(ref)
        ? { dotSegment: false, text: "a URL outside the EHR's FHIR base (FHIR_SERVER_URL)" }
        : undefined;
    if (why && informational) {
      this.quirks.push({
        code: 'fhir-reference-outside-base',
        detail: why.dotSegment
          ? `${expression}: a reference with a \`.\` or \`..\` segment; not read, its identifier and display are used`
          : `${expression}: ${whereOutside(ref)} is outside the EHR's FHIR base (FHIR_SERVER_URL); not read, its identifier and display are used`,
      });
      return undefined;
    }
    if (why) {
      const diagnostics = `${expression} refers to ${why.text}; include the resource in the request (contained or a Bundle entry) instead`;
      throw new FhirError('invalid', diagnostics, [
        { severity: 'error', code: 'security', diagnostics, expression: [expression] },
      ]);
    }
    if (!this.ehr) return undefined;
    try {
      const resource = (await this.read(ref)) as T;
      if (expectedType && resource.resourceType !== expectedType) return undefined;
      return { resource, source: `EHR ${ref}`, path: `${expression}.resolve()` };
    } catch (error) {
      if (error instanceof EhrFhirError && (error.status === 404 || error.status === 410))
        return undefined;
      if (
        error instanceof EhrFhirError &&
        (error.status === 401 || error.status === 403) &&
        !informational
      ) {
        // Our access, not the resource: a lapsed FHIR_SERVER_TOKEN or scopes not granted. It
        // was "not found" (422), so the sender took the order as refused for good; a resend
        // once access is back orders it.
        throw new FhirError(
          'upstream-unavailable',
          `${expression}: the EHR FHIR server refused the adapter's read of ${ref} (${error.status}): its credential (FHIR_SERVER_TOKEN or SMART Backend Services) or scopes do not allow it; nothing was ordered, resend once that is fixed`,
        );
      }
      if (
        error instanceof EhrFhirError &&
        error.status !== undefined &&
        error.status < 500 &&
        error.status !== 429
      ) {
        this.quirks.push({ code: 'fhir-ehr-read-refused', detail: `${ref}: ${error.message}` });
        return undefined;
      }
      throw new FhirError(
        'upstream-unavailable',
        `could not read ${ref} from the EHR FHIR server: ${(error as Error).message}`,
      );
    }
  }

  /**
   * A conditional reference (`Patient?identifier=http://hospital.org/mrn|1032702`, R4
   * http.html#trules): the one resource matching the search, first among the Bundle's own
   * entries (an `identifier` search), else on the EHR (the search as given). No match, or more
   * than one, is a refusal naming the element (422): "the transaction fails" (R4), never an
   * order without the patient, study or requester the sender named.
   */
  private async resolveConditional(
    type: string,
    query: string,
    expression: string,
  ): Promise<Located<Resource>> {
    const params = new URLSearchParams(query);
    const names = [...new Set(params.keys())];
    const refuse = (code: 'not-found' | 'multiple-matches' | 'not-supported', why: string) => {
      const diagnostics = `${expression}: the conditional reference ${type}?${query} ${why}`;
      throw new FhirError('invalid', diagnostics, [
        { severity: 'error', code, diagnostics, expression: [expression] },
      ]);
    };
    const shaping = names.filter((n) => RESULT_PARAMETERS.has(n.split(':')[0]!));
    if (shaping.length > 0) {
      return refuse(
        'not-supported',
        `asks for a part of the result (${shaping.join(', ')}), not which resource is meant: a conditional reference names its resource by search parameters only`,
      );
    }
    const identifiers = params.getAll('identifier');
    if (names.length === 1 && identifiers.length === 1) {
      const matches = this.siblings.filter(
        (s) => s.resource.resourceType === type && hasIdentifier(s.resource, identifiers[0]!),
      );
      if (matches.length > 1) {
        return refuse(
          'multiple-matches',
          `matches ${matches.length} entries of the Bundle (${matches.map((m) => m.location).join(', ')})`,
        );
      }
      if (matches[0]) {
        return {
          resource: matches[0].resource,
          source: matches[0].location,
          path: siblingPath(matches[0]),
        };
      }
    }
    if (!this.ehr) {
      return refuse(
        names.length === 1 && identifiers.length === 1 ? 'not-found' : 'not-supported',
        names.length === 1 && identifiers.length === 1
          ? 'matches no entry of the Bundle, and FHIR_SERVER_URL is not configured to search'
          : 'can only be resolved within the Bundle by identifier=[system]|[value] (FHIR_SERVER_URL is not configured to search)',
      );
    }
    const search: Record<string, string[]> = {};
    for (const name of names) search[name] = params.getAll(name);
    let found: Array<{ resource: Resource; fullUrl: string }>;
    try {
      found = await this.ehr.searchAll<Resource>(type, { ...search, _count: '2' }, 1);
    } catch (error) {
      if (error instanceof EhrFhirError && (error.status === 401 || error.status === 403)) {
        // Our access (as for a read, above): a resend once it is back resolves it.
        throw new FhirError(
          'upstream-unavailable',
          `${expression}: the EHR FHIR server refused the adapter's search ${type}?${query} (${error.status}): its credential (FHIR_SERVER_TOKEN or SMART Backend Services) or scopes do not allow it; nothing was ordered, resend once that is fixed`,
        );
      }
      if (error instanceof EhrFhirError && error.status !== undefined && error.status < 500) {
        return refuse('not-supported', `was refused by the EHR's search (${error.message})`);
      }
      throw new FhirError(
        'upstream-unavailable',
        `could not search ${type} on the EHR FHIR server: ${(error as Error).message}`,
      );
    }
    if (found.length === 0) return refuse('not-found', "matches nothing on the EHR's FHIR server");
    if (found.length > 1) {
      return refuse('multiple-matches', "matches more than one resource on the EHR's FHIR server");
    }
    return {
      resource: found[0]!.resource,
      source: `EHR ${type}?${query}`,
      path: `${expression}.resolve()`,
    };
  }
}

/** A Bundle entry's resource as FHIRPath (`Bundle.entry[2].resource`), for issue expressions. */
function siblingPath(sibling: SiblingEntry): string {
  const entry = /Bundle\.entry\[\d+\]$/.exec(sibling.location)?.[0];
  return entry ? `${entry}.resource` : sibling.resource.resourceType;
}

/**
 * Search result parameters (R4 search.html#return, http.html#parameters): they shape what a
 * search answers, not which resource it finds. In a conditional reference they reached the
 * EHR: `_elements=identifier` answered a Patient without name, birth date or sex (SUBSETTED),
 * taken as the whole patient; `_format=xml` a page read as no answer (503 at every resend).
 */
const RESULT_PARAMETERS = new Set([
  '_elements',
  '_summary',
  '_format',
  '_pretty',
  '_count',
  '_sort',
  '_total',
  '_include',
  '_revinclude',
  '_contained',
  '_containedType',
]);

/** `Type?search`: a conditional reference (R4 http.html#trules). */
const CONDITIONAL_REFERENCE = /^([A-Z][A-Za-z]+)\?(.+)$/;

/** A token search on identifier (R4 search.html#token): `system|value`, `|value`, `value`. */
function hasIdentifier(resource: Resource, token: string): boolean {
  const bar = token.indexOf('|');
  const system = bar < 0 ? undefined : token.slice(0, bar);
  const value = bar < 0 ? token : token.slice(bar + 1);
  const ids = (resource as { identifier?: Array<{ system?: string; value?: string }> }).identifier;
  // compared composed (NFC), as every identifier is (domain/identifier-form.ts)
  return (Array.isArray(ids) ? ids : []).some(
    (i) =>
      sameIdentifierText(i.value, value) &&
      (system === undefined ||
        (system === '' ? i.system === undefined : sameIdentifierText(i.system, system))),
  );
}

export interface BuiltContext {
  ctx: FhirOrderContext;
  issues: OperationOutcomeIssue[];
}

function refType(ref: Reference | undefined): string | undefined {
  const r = ref?.reference;
  if (!r) return ref?.type;
  const conditional = CONDITIONAL_REFERENCE.exec(r);
  if (conditional) return conditional[1];
  return /(?:^|\/)([A-Z][A-Za-z]+)\/[^/]+(?:\/_history\/[^/]+)?$/.exec(r)?.[1] ?? ref?.type;
}

/**
 * Everything one ServiceRequest refers to. `lenient` (a cancel) skips what a cancel does not
 * need. `path` prefixes issue expressions (a Bundle entry).
 */
/**
 * Whether the Patient a reference resolved to carries the identifier the same Reference gives
 * beside it (R4 references.html: "If both Reference.reference and Reference.identifier are
 * populated, … they SHALL" identify the same resource). An interface engine that fills
 * `subject.identifier` from another field (the visit's patient, a merged record) named two
 * patients; the order was made for the referenced one, the identifier never looked at.
 */
function carriesNamedIdentifier(
  patient: Patient,
  named: { system?: string; value?: string } | undefined,
): boolean {
  if (!named?.value) return true;
  return (patient.identifier ?? []).some(
    (i) =>
      sameIdentifierText(i.value, named.value) &&
      (named.system === undefined ||
        i.system === undefined ||
        sameIdentifierText(i.system, named.system)),
  );
}

export async function buildOrderContext(
  sr: ServiceRequest,
  resolver: ReferenceResolver,
  options: {
    lenient: boolean;
    path?: string;
    srFullUrl?: string;
    siblings?: readonly SiblingEntry[];
  },
): Promise<BuiltContext> {
  const at = (p: string) =>
    options.path ? `${options.path}.${p.replace(/^ServiceRequest\./, '')}` : p;
  const issues: OperationOutcomeIssue[] = [];
  const ctx: FhirOrderContext = { imagingStudies: [], reasons: new Map() };

  const subjectType = refType(sr.subject);
  if (subjectType && subjectType !== 'Patient') {
    issues.push({
      severity: 'error',
      code: 'not-supported',
      diagnostics: `the subject must be a Patient (got ${subjectType}): AI analyses are ordered per patient`,
      expression: [at('ServiceRequest.subject')],
    });
  } else {
    const patient = await resolver.resolve<Patient>(
      sr,
      sr.subject,
      'Patient',
      at('ServiceRequest.subject'),
    );
    if (patient) {
      ctx.patient = patient;
      if (!options.lenient) issues.push(...ehrResourceIssues(patient));
      if (!options.lenient && !carriesNamedIdentifier(patient.resource, sr.subject?.identifier)) {
        issues.push({
          severity: 'error',
          code: 'business-rule',
          diagnostics:
            'ServiceRequest.subject names a Patient by reference and by an identifier that Patient does not carry: both must identify the same patient (R4 references.html), so whose order this is is not certain',
          expression: [at('ServiceRequest.subject.identifier')],
        });
      }
    } else if (sr.subject?.identifier?.value) {
      // A logical reference (R4 references.html#logical): the identifier is all we get.
      ctx.patient = {
        resource: { resourceType: 'Patient', identifier: [sr.subject.identifier] },
        source: 'ServiceRequest.subject.identifier',
      };
    } else if (!options.lenient) {
      issues.push({
        severity: 'error',
        code: 'not-found',
        diagnostics: `cannot resolve the subject ${sr.subject?.reference ?? '(none)'}: it is not contained, not in the Bundle, and ${
          resolver['ehr']
            ? 'the EHR FHIR server does not have it'
            : 'FHIR_SERVER_URL is not configured'
        }`,
        expression: [at('ServiceRequest.subject')],
      });
    }
  }
  if (options.lenient) return { ctx, issues };

  // ImagingStudy: referenced from supportingInfo, or a sibling whose basedOn names this request.
  for (const [i, ref] of (sr.supportingInfo ?? []).entries()) {
    // A urn:uuid: reference in a Bundle has no type in it: resolve, then look at what it is.
    const type = refType(ref);
    if (type && type !== 'ImagingStudy') continue;
    const target = await resolver.resolve<Resource>(
      sr,
      ref,
      undefined,
      at(`ServiceRequest.supportingInfo[${i}]`),
    );
    if (target?.resource.resourceType === 'ImagingStudy') {
      issues.push(...ehrResourceIssues(target));
      ctx.imagingStudies.push(target as Located<ImagingStudy>);
    } else if (type === 'ImagingStudy') {
      issues.push({
        severity: 'error',
        code: 'not-found',
        diagnostics: `cannot resolve ${ref.reference}`,
        expression: [at(`ServiceRequest.supportingInfo[${i}]`)],
      });
    }
  }
  for (const sib of options.siblings ?? []) {
    if (sib.resource.resourceType !== 'ImagingStudy') continue;
    const study = sib.resource as ImagingStudy;
    const names = (study.basedOn ?? []).map((b) => b.reference);
    const mine =
      names.some((n) => sameBundleName(n, options.srFullUrl)) ||
      (sr.id !== undefined && names.some((n) => n?.endsWith(`ServiceRequest/${sr.id}`)));
    if (mine && !ctx.imagingStudies.some((s) => s.resource === study)) {
      ctx.imagingStudies.push({ resource: study, source: sib.location, path: siblingPath(sib) });
    }
  }
  let requester = await resolver.resolve<Practitioner | PractitionerRole>(
    sr,
    sr.requester,
    undefined,
    at('ServiceRequest.requester'),
    true,
  );
  if (requester) ctx.requesterType = requester.resource.resourceType;
  // US Core orders name a PractitionerRole as requester: the person is its practitioner
  // (resolved the same way; a contained role's `#id` is in the ServiceRequest's contained).
  // The ordering provider was left empty.
  if (requester && requester.resource.resourceType === 'PractitionerRole') {
    requester = await resolver.resolve<Practitioner>(
      sr,
      (requester.resource as PractitionerRole).practitioner,
      'Practitioner',
      at('ServiceRequest.requester.resolve().practitioner'),
      true,
    );
  }
  if (requester && requester.resource.resourceType === 'Practitioner') ctx.requester = requester;
  for (const [i, ref] of (sr.reasonReference ?? []).entries()) {
    if (!ref.reference) continue;
    const target = await resolver.resolve<Resource>(
      sr,
      ref,
      undefined,
      at(`ServiceRequest.reasonReference[${i}]`),
      true,
    );
    if (target) ctx.reasons.set(ref.reference, target);
  }
  return { ctx, issues };
}

/**
 * The R4 issues of a resource read from the EHR (a read, or the search of a conditional
 * reference), named where it sits: `ServiceRequest.subject.resolve().birthDate`. The same
 * Patient contained or in a Bundle is validated with the request; read from the EHR it was
 * not, and an order was made with birthDate 1970-02-30 and sex F, sent on upstream and into
 * the ORU. Resources of the request itself (contained, Bundle entries) are checked with it.
 */
function ehrResourceIssues(located: Located<Resource>): OperationOutcomeIssue[] {
  if (!located.source.startsWith('EHR ')) return [];
  const type = located.resource.resourceType;
  return validateFhirResource(located.resource).map((issue) => ({
    ...issue,
    expression: (issue.expression ?? [type]).map((e) =>
      e === type || e.startsWith(`${type}.`) ? `${located.path ?? type}${e.slice(type.length)}` : e,
    ),
  }));
}

/**
 * Where a reference outside the base points, for a quirk: the origin of an absolute URL (its
 * path and query may carry anything, a signature included), else that it climbs out of the base.
 */
function whereOutside(ref: string): string {
  try {
    return new URL(ref).origin === 'null' ? 'a URL' : `a URL on ${new URL(ref).origin}`;
  } catch {
    return 'a relative reference that leaves the base';
  }
}
