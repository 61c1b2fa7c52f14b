import { Agent, request } from 'undici';
import type { UpstreamHealthSnapshot, UpstreamProbe } from '../domain/upstream-probe.port';
import { readBodyText } from '../common/bounded-body';

const PROBE_TIMEOUT_MS = 3_000;
/** A retirement body is two short strings. */
const PROBE_MAX_BYTES = 64 * 1024;

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

  /** The check under way: however many /health requests arrive meanwhile, one request. */
  private inFlight?: Promise<void>;

  async check(): Promise<UpstreamHealthSnapshot> {
    if (!this.cached || Date.now() - this.cached.at > this.cacheMs) {
      this.inFlight ??= this.probe().finally(() => (this.inFlight = undefined));
      await this.inFlight;
    }
    return { ...this.cached!.value, ...this.extra() };
  }

  private async probe(): Promise<void> {
    const now = Date.now();
    let value: UpstreamHealthSnapshot;
    // Headers and body within PROBE_TIMEOUT_MS in total, the body read to PROBE_MAX_BYTES at
    // most: /health waits on this, and undici's timeouts are idle times (a /test-token that
    // trickled its answer held /health for ever; an endless 410 body took 4 GB in 12 s).
    const signal = AbortSignal.timeout(PROBE_TIMEOUT_MS);
    try {
      const res = await request(`${this.baseUrl.replace(/\/$/, '')}/test-token`, {
        dispatcher: this.agent,
        method: 'GET',
        headersTimeout: PROBE_TIMEOUT_MS,
        bodyTimeout: PROBE_TIMEOUT_MS,
        signal,
      });
      // Retired only with the contract's body (`error` and `migration_guide`): a proxy's 410
      // is not the service retiring. Any other answer's body is not read at all.
      let text = '';
      if (res.statusCode === 410) text = await readBodyText(res.body, PROBE_MAX_BYTES);
      else res.body.on('error', () => undefined).destroy();
      value =
        res.statusCode === 410 && isRetirementText(text)
          ? {
              status: 'retired',
              baseUrl: this.baseUrl,
              detail: 'the upstream answers 410: version retired',
            }
          : { status: 'up', baseUrl: this.baseUrl };
      const dep = res.headers['x-api-deprecation-warning'];
      if (typeof dep === 'string') value.deprecation = dep.slice(0, 200);
    } catch (error) {
      value = {
        status: 'down',
        baseUrl: this.baseUrl,
        detail: signal.aborted
          ? `no complete answer from /test-token within ${PROBE_TIMEOUT_MS} ms`
          : (error as Error).message,
      };
    }
    value.checkedAt = new Date(now).toISOString();
    this.cached = { at: now, value };
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
