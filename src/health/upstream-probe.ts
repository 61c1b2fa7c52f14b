import { Agent, request } from 'undici';

export interface UpstreamHealthSnapshot {
  status: 'up' | 'down' | 'retired' | 'unknown';
  baseUrl: string;
  /** `X-API-Deprecation-Warning` last seen, e.g. "v1 will be deprecated on 2027-03-01". */
  deprecation?: string;
  migrationGuide?: string;
  detail?: string;
  checkedAt?: string;
}

/** Reachability of the upstream for readiness; the imaging client may feed richer state. */
export interface UpstreamProbe {
  check(): Promise<UpstreamHealthSnapshot>;
}

/**
 * Reachability only: any HTTP answer from `{base_url}/test-token` (401 without a token is
 * an answer) means the service is there. Cached briefly so health checks cost no budget.
 */
export class HttpUpstreamProbe implements UpstreamProbe {
  private cached?: { at: number; value: UpstreamHealthSnapshot };
  /**
   * Our own pool, not the process-wide dispatcher (which Node's built-in fetch may have set to
   * its bundled, older undici; see DicomWebClient).
   */
  private readonly agent = new Agent({ keepAliveTimeout: 1_000 });

  constructor(
    private readonly baseUrl: string,
    private readonly cacheMs = 15_000,
    private readonly extra: () => Partial<UpstreamHealthSnapshot> = () => ({}),
  ) {}

  async check(): Promise<UpstreamHealthSnapshot> {
    const now = Date.now();
    if (!this.cached || now - this.cached.at > this.cacheMs) {
      let value: UpstreamHealthSnapshot;
      try {
        const res = await request(`${this.baseUrl.replace(/\/$/, '')}/test-token`, {
          dispatcher: this.agent,
          method: 'GET',
          headersTimeout: 3000,
          bodyTimeout: 3000,
        });
        await res.body.dump();
        value =
          res.statusCode === 410
            ? {
                status: 'retired',
                baseUrl: this.baseUrl,
                detail: 'the upstream answers 410: version retired',
              }
            : { status: 'up', baseUrl: this.baseUrl };
        const dep = res.headers['x-api-deprecation-warning'];
        if (typeof dep === 'string') value.deprecation = dep;
      } catch (error) {
        value = { status: 'down', baseUrl: this.baseUrl, detail: (error as Error).message };
      }
      value.checkedAt = new Date(now).toISOString();
      this.cached = { at: now, value };
    }
    return { ...this.cached.value, ...this.extra() };
  }
}
