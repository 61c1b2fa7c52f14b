import type { Bundle, Resource } from '@medplum/fhirtypes';
import type { Client as FhirKitClient, SearchParams } from 'fhir-kit-client';
import { loadFhirKit } from '../common/fhir-kit';
import { PeerBase, PeerUrlError } from '../common/peer-url';
import type { SmartBackendTokenProvider } from '../fhir/smart-backend.auth';

/**
 * The EHR's own FHIR server (FHIR_SERVER_URL), read with fhir-kit-client: the focus of an
 * `id-only` notification, a search when a notification is `empty` or events went missing,
 * the Patient a ServiceRequest refers to. Authenticated with FHIR_SERVER_TOKEN or SMART
 * Backend Services. Each call has a deadline (an AbortSignal passed through fhir-kit-client's
 * per-request options; an npm-installed undici Agent as `dispatcher` is rejected by Node's
 * built-in fetch, and replacing globalThis.fetch would break fhir-kit-client).
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
}

export class EhrFhirClient {
  private readonly client: FhirKitClient;
  private readonly timeoutMs: number;
  /** FHIR_SERVER_URL: the only base this client reads from, and the only one its token goes to. */
  private readonly peer: PeerBase;

  constructor(private readonly options: EhrFhirClientOptions) {
    const { Client } = loadFhirKit();
    this.peer = new PeerBase('EHR', options.baseUrl);
    this.timeoutMs = options.timeoutMs ?? 15_000;
    this.client = new Client({
      baseUrl: options.baseUrl,
      customHeaders: { accept: 'application/fhir+json' },
      ...(options.bearerToken ? { bearerToken: options.bearerToken } : {}),
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
   * Reads a resource by reference. Only within FHIR_SERVER_URL (PeerUrlError otherwise, before
   * anything is sent): the EHR's credential never goes to another host.
   */
  async read<T extends Resource>(reference: string): Promise<T> {
    const url = this.peer.resolve(reference);
    return this.call(
      async () => (await this.client.request(url.href, { options: this.opts() })) as unknown as T,
    );
  }

  /** Every page of a search (bounded), as one list of resources with their fullUrl. */
  async searchAll<T extends Resource>(
    resourceType: string,
    searchParams: SearchParams,
    maxPages = 20,
  ): Promise<Array<{ resource: T; fullUrl: string }>> {
    return this.call(async () => {
      const out: Array<{ resource: T; fullUrl: string }> = [];
      let page = (await this.client.search({
        resourceType,
        searchParams,
        options: this.opts(),
      })) as unknown as Bundle;
      for (let i = 0; i < maxPages; i++) {
        for (const e of page.entry ?? []) {
          if (
            e.resource &&
            (!e.search?.mode || e.search.mode === 'match') &&
            e.resource.resourceType === resourceType
          ) {
            out.push({
              resource: e.resource as T,
              fullUrl: e.fullUrl ?? `${this.baseUrl}/${resourceType}/${e.resource.id}`,
            });
          }
        }
        const nextLink = page.link?.find((l) => l.relation === 'next')?.url;
        if (!nextLink) break;
        // A next link is followed only within the EHR's base (with the token), never elsewhere.
        if (!this.peer.contains(nextLink))
          throw new PeerUrlError('the EHR search answered a next link outside its base', 'origin');
        await this.authorize();
        const next = this.client.nextPage({ bundle: page as never, options: this.opts() });
        if (!next) break;
        page = (await next) as unknown as Bundle;
      }
      return out;
    });
  }

  async create<T extends Resource>(resource: T, headers: Record<string, string> = {}): Promise<T> {
    return this.call(
      async () =>
        (await this.client.create({
          resourceType: resource.resourceType,
          body: resource as never,
          options: this.opts(headers),
        })) as unknown as T,
    );
  }

  async close(): Promise<void> {
    // Nothing pooled of our own: fhir-kit-client uses the global fetch.
  }

  /**
   * Per-request fetch options: a deadline, and `redirect: 'manual'` so that a 3xx is an answer
   * (an error here), never a request with our token to wherever the Location points.
   */
  private opts(headers: Record<string, string> = {}) {
    return {
      headers,
      signal: AbortSignal.timeout(this.timeoutMs),
      redirect: 'manual' as const,
    };
  }

  private async authorize(): Promise<void> {
    if (this.options.smart) this.client.bearerToken = await this.options.smart.token();
  }

  /** One call, with one retry after a 401 when the token comes from SMART (it may have been revoked). */
  private async call<T>(fn: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      await this.authorize();
      try {
        return await fn();
      } catch (error) {
        if (error instanceof PeerUrlError) throw error;
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
