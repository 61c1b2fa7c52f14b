import type { Bundle, Resource } from '@medplum/fhirtypes';
import { PeerBase, PeerUrlError } from '../common/peer-url';
import { FHIR_ID } from '../fhir/fhir-primitives';
import { FhirRestClient, searchUrl, type FhirSearchParams } from '../fhir/fhir-rest.client';
import { SmartBackendAuthError, type SmartBackendTokenProvider } from '../fhir/smart-backend.auth';

/**
 * The EHR's own FHIR server (FHIR_SERVER_URL): the focus of an `id-only` notification, a
 * search when a notification is `empty` or events went missing, the Patient a ServiceRequest
 * refers to. Authenticated with FHIR_SERVER_TOKEN or SMART Backend Services. Each call has a
 * deadline for the whole exchange, a bounded answer and no redirects (FhirRestClient).
 */

export class EhrFhirError extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
  ) {
    super(message);
    this.name = 'EhrFhirError';
  }
}

export interface EhrFhirClientOptions {
  baseUrl: string;
  bearerToken?: string;
  smart?: SmartBackendTokenProvider;
  timeoutMs?: number;
  /** Largest answer read from the EHR (a search page, a resource). */
  maxAnswerBytes?: number;
}

export class EhrFhirClient {
  private readonly client: FhirRestClient;
  /** FHIR_SERVER_URL: the only base this client reads from, and the only one its token goes to. */
  private readonly peer: PeerBase;

  constructor(private readonly options: EhrFhirClientOptions) {
    // FHIR references are `Type/id` (R4 references.html): a `.` or `..` segment is refused.
    this.peer = new PeerBase('EHR', options.baseUrl, { refuseDotSegments: true });
    this.client = new FhirRestClient({
      bearerToken: () => (options.smart ? options.smart.token() : options.bearerToken),
      ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
      ...(options.maxAnswerBytes ? { maxAnswerBytes: options.maxAnswerBytes } : {}),
    });
  }

  get baseUrl(): string {
    return this.peer.href;
  }

  /**
   * Absolute URL of a reference (relative `Type/id` resolved against the EHR base). Throws
   * PeerUrlError for a URL outside the EHR's base: callers never hold a foreign URL as ours.
   */
  absolute(reference: string): string {
    return this.peer.resolve(reference).href;
  }

  /** True when the reference points within this EHR's base (relative, or absolute under it). */
  isOurs(reference: string): boolean {
    return this.peer.contains(reference);
  }

  /**
   * Why a reference is not read here (undefined when it is): `dot-segment` for a `.`/`..`
   * segment that would read another URL than it names, else outside FHIR_SERVER_URL; `text`
   * says so in words for an OperationOutcome.
   */
  whyNotOurs(reference: string): { dotSegment: boolean; text: string } | undefined {
    const refusal = this.peer.refusalOf(reference);
    if (!refusal) return undefined;
    return refusal.reason === 'dot-segment'
      ? {
          dotSegment: true,
          text: 'a URL with a `.` or `..` segment (it would read another resource of the EHR than it names; a reference is Type/id)',
        }
      : { dotSegment: false, text: "a URL outside the EHR's FHIR base (FHIR_SERVER_URL)" };
  }

  /**
   * Reads a resource by reference. Only within FHIR_SERVER_URL (PeerUrlError otherwise, before
   * anything is sent): the EHR's credential never goes to another host.
   */
  async read<T extends Resource>(reference: string): Promise<T> {
    const url = this.peer.resolve(reference);
    const answer = await this.call(() => this.client.get<unknown>(url.href));
    return this.asked<T>(url, answer);
  }

  /**
   * The answer to a read is the resource asked for, or the read failed: a gateway's 200
   * OperationOutcome, a searchset Bundle, a Patient for a ServiceRequest, or another
   * ServiceRequest than the one named were taken as the answer (an order lost as "not
   * active", or made from another request or for another patient). An EhrFhirError without
   * a status: the EHR could not be read (503 to a notifier, who resends).
   */
  private asked<T extends Resource>(url: URL, answer: unknown): T {
    const basePath = new URL(this.peer.href).pathname.replace(/\/$/, '');
    const m = /^\/([A-Z][A-Za-z]+)\/([^/]+)(?:\/_history\/[^/]+)?$/.exec(
      url.pathname.slice(basePath.length),
    );
    const got = answer as { resourceType?: unknown; id?: unknown } | null;
    const what =
      got !== null && typeof got === 'object' && !Array.isArray(got)
        ? `${typeof got.resourceType === 'string' ? got.resourceType.slice(0, 64) : 'no resource'}${typeof got.id === 'string' ? `/${got.id.slice(0, 64)}` : ''}`
        : 'no resource';
    const type = m?.[1];
    const id = m ? decodeURIComponent(m[2]!) : undefined;
    const ok =
      got !== null &&
      typeof got === 'object' &&
      !Array.isArray(got) &&
      typeof got.resourceType === 'string' &&
      (type === undefined
        ? got.resourceType !== 'OperationOutcome' && got.resourceType !== 'Bundle'
        : got.resourceType === type && got.id === id);
    if (!ok) {
      throw new EhrFhirError(
        `the EHR FHIR server answered ${what} to a read of ${type ? `${type}/${id}` : 'a resource'}`,
        undefined,
      );
    }
    return answer as T;
  }

  /** Every page of a search (bounded), as one list of resources with their fullUrl. */
  async searchAll<T extends Resource>(
    resourceType: string,
    searchParams: FhirSearchParams,
    maxPages = 20,
  ): Promise<Array<{ resource: T; fullUrl: string }>> {
    return (await this.searchPages<T>(resourceType, searchParams, maxPages)).entries;
  }

  /**
   * The matches of a search over at most `maxPages` pages; `truncated` when the last page read
   * still had a next link (more matched than was read: the caller decides how to go on).
   */
  async searchPages<T extends Resource>(
    resourceType: string,
    searchParams: FhirSearchParams,
    maxPages: number,
  ): Promise<{ entries: Array<{ resource: T; fullUrl: string }>; truncated: boolean }> {
    return this.call(async () => {
      const out: Array<{ resource: T; fullUrl: string }> = [];
      let page = searchset(
        await this.client.get<unknown>(searchUrl(this.baseUrl, resourceType, searchParams)),
        resourceType,
      );
      for (let i = 0; i < maxPages; i++) {
        for (const e of page.entry ?? []) {
          if (
            e.resource &&
            (!e.search?.mode || e.search.mode === 'match') &&
            e.resource.resourceType === resourceType
          ) {
            out.push({ resource: e.resource as T, fullUrl: this.identity(e) });
          }
        }
        const nextLink = page.link?.find((l) => l.relation === 'next')?.url;
        if (!nextLink) return { entries: out, truncated: false };
        if (i === maxPages - 1) return { entries: out, truncated: true };
        // A next link is followed only within the EHR's base (with the token), never elsewhere.
        if (!this.peer.contains(nextLink))
          throw new PeerUrlError('the EHR search answered a next link outside its base', 'origin');
        page = searchset(
          await this.client.get<unknown>(this.peer.resolve(nextLink).href),
          resourceType,
        );
      }
      return { entries: out, truncated: false };
    });
  }

  /**
   * The URL a search match is known by: `<FHIR_SERVER_URL>/<type>/<id>`, as an `id-only` focus
   * is (the request's identity on this EHR), whatever the entry's fullUrl spells. A server
   * behind a reverse proxy writes its own base there (`http://hapi:8080/fhir/…`, another host
   * or scheme than FHIR_SERVER_URL): the request found by a search and the same request
   * notified by id were two requests, and each ordered. The match came from this EHR, so its
   * id names a resource here. An entry without a valid id keeps its fullUrl.
   */
  private identity(entry: { fullUrl?: string; resource?: Resource }): string {
    const r = entry.resource!;
    // R4 datatypes.html#id; `.` and `..` would name the base itself
    if (typeof r.id === 'string' && FHIR_ID.test(r.id) && !/^\.+$/.test(r.id))
      return this.absolute(`${r.resourceType}/${r.id}`);
    return entry.fullUrl ?? `${this.baseUrl}/${r.resourceType}`;
  }

  async create<T extends Resource>(resource: T, headers: Record<string, string> = {}): Promise<T> {
    return this.call(() =>
      this.client.post<T>(searchUrl(this.baseUrl, resource.resourceType, {}), resource, headers),
    );
  }

  /** Update by id (R4 http.html#update): `PUT [base]/[type]/[id]`. */
  async update<T extends Resource>(resource: T & { id: string }): Promise<T> {
    return this.call(() =>
      this.client.put<T>(
        `${this.baseUrl.replace(/\/+$/, '')}/${resource.resourceType}/${encodeURIComponent(resource.id)}`,
        resource,
      ),
    );
  }

  async close(): Promise<void> {
    // Nothing pooled of our own: the client uses Node's fetch.
  }

  /** One call, with one retry after a 401 when the token comes from SMART (it may have been revoked). */
  private async call<T>(fn: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn();
      } catch (error) {
        // not the EHR's answer: a URL we refused to call, or no token to call with
        if (
          error instanceof PeerUrlError ||
          error instanceof SmartBackendAuthError ||
          error instanceof EhrFhirError // an answer that is not what was asked (already named)
        )
          throw error;
        const status = (error as { response?: { status?: number } }).response?.status;
        if (status === 401 && this.options.smart && attempt === 0) {
          this.options.smart.invalidate();
          continue;
        }
        throw new EhrFhirError(
          status
            ? `the EHR FHIR server answered ${status}`
            : `the EHR FHIR server could not be reached: ${(error as Error).message}`,
          status,
        );
      }
    }
  }
}

/**
 * A search answers a Bundle of type searchset (R4 http.html#search). A 200 with anything else
 * (an OperationOutcome "too-costly" or "processing", a gateway's JSON, a transaction-response)
 * is no search result: read as one, it was "nothing matched", so a catch-up after missed
 * events recorded the gap as handled with nothing ingested, and an `empty` notification was
 * answered 200 with nothing ordered (the notifier does not resend): those orders were lost.
 */
function searchset(answer: unknown, resourceType: string): Bundle {
  const got = answer as { resourceType?: unknown; type?: unknown } | null;
  if (
    got !== null &&
    typeof got === 'object' &&
    !Array.isArray(got) &&
    got.resourceType === 'Bundle' &&
    (got.type === 'searchset' || got.type === undefined)
  )
    return answer as Bundle;
  const what =
    got !== null && typeof got === 'object' && !Array.isArray(got)
      ? typeof got.resourceType === 'string' && /^[A-Z][A-Za-z]{0,63}$/.test(got.resourceType)
        ? `${got.resourceType}${got.resourceType === 'Bundle' && typeof got.type === 'string' ? ` of type ${got.type.slice(0, 32)}` : ''}`
        : 'JSON that is no resource'
      : 'no resource';
  throw new EhrFhirError(
    `the EHR FHIR server answered a search of ${resourceType} with ${what}, not a searchset Bundle`,
    undefined,
  );
}
