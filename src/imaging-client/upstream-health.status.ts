import { deprecationDate } from './prometheus-call.observer';
import type { CallObserver, CallRecord } from './ports';

const UPSTREAM_TROUBLE = new Set([
  'server_error_exhausted',
  'rate_limited_exhausted',
  'network',
  'deadline',
  'invalid_response',
  'redirected',
  // Refused credentials (401 after the one renewal, or from the token endpoint): every call
  // fails until an operator corrects them (docs/lifecycle.md). Before, /health said "up": the
  // token request before each refused call counted as the last success.
  'unauthorized',
]);

export interface UpstreamHealth {
  /** `retired` after a 410: calls stopped, an operator must migrate. */
  state: 'ok' | 'degraded' | 'retired' | 'unknown';
  retired?: { error: string; migrationGuide: string; since: string };
  deprecation?: { warning: string; date?: string; seenAt: string };
  lastSuccessAt?: string;
  lastError?: { operation: string; code: string; at: string };
}

/**
 * What /health shows about the upstream, fed by every call: retirement (with the
 * migration guide), the deprecation warning, and when a call last succeeded.
 */
export class UpstreamHealthStatus implements CallObserver {
  private retired?: UpstreamHealth['retired'];
  private deprecation?: UpstreamHealth['deprecation'];
  private lastSuccessAt?: number;
  private lastError?: { operation: string; code: string; at: number };

  constructor(private readonly now: () => number = Date.now) {}

  onCall(record: CallRecord): void {
    const at = this.now();
    if (record.deprecationWarning) {
      this.deprecation = {
        warning: record.deprecationWarning,
        date: deprecationDate(record.deprecationWarning),
        seenAt: new Date(at).toISOString(),
      };
    }
    if (record.retirement && !this.retired) {
      this.retired = {
        error: record.retirement.error,
        migrationGuide: record.retirement.migrationGuide,
        since: new Date(at).toISOString(),
      };
    }
    if (record.outcome === 'success') this.lastSuccessAt = at;
    // Only failures that say something about the upstream's health count: a 400 or 404 is
    // an answer about our request, not a sign the service is down.
    else if (record.error && UPSTREAM_TROUBLE.has(record.error.code)) {
      // A call that failed for want of a token names the token (it was never sent itself).
      const operation = record.error.operation ?? record.operation;
      this.lastError = { operation, code: record.error.code, at };
    }
  }

  snapshot(): UpstreamHealth {
    const lastError = this.lastError
      ? {
          operation: this.lastError.operation,
          code: this.lastError.code,
          at: new Date(this.lastError.at).toISOString(),
        }
      : undefined;
    let state: UpstreamHealth['state'];
    if (this.retired) state = 'retired';
    else if (
      this.lastError &&
      (this.lastSuccessAt === undefined || this.lastError.at > this.lastSuccessAt)
    ) {
      state = 'degraded';
    } else if (this.lastSuccessAt !== undefined) state = 'ok';
    else state = 'unknown';
    return {
      state,
      retired: this.retired,
      deprecation: this.deprecation,
      lastSuccessAt:
        this.lastSuccessAt === undefined ? undefined : new Date(this.lastSuccessAt).toISOString(),
      lastError,
    };
  }
}
