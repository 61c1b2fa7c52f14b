import { Agent, request } from 'undici';
import type { UpstreamHealthSnapshot, UpstreamProbe } from '../domain/upstream-probe.port';

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
        // Retired only with the contract's body (`error` and `migration_guide`): a proxy's 410
        // is not the service retiring.
        const text = res.statusCode === 410 ? (await res.body.text()).slice(0, 4096) : '';
        if (res.statusCode !== 410) await res.body.dump();
        value =
          res.statusCode === 410 && isRetirementText(text)
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

function isRetirementText(text: string): boolean {
  try {
    const body = JSON.parse(text) as { error?: unknown; migration_guide?: unknown };
    return typeof body.error === 'string' && typeof body.migration_guide === 'string';
  } catch {
    return false;
  }
}
