import { Counter, Gauge, Histogram } from 'prom-client';
import { metricsRegistry } from '../observability/metrics';
import type { CallObserver, CallRecord } from './ports';

interface UpstreamMetrics {
  calls: Histogram<'operation' | 'status'>;
  retries: Counter<'operation'>;
  deprecation: Gauge<'date' | 'warning'>;
  retired: Gauge;
  rateLimitWait: Counter<'endpoint'>;
}

let metrics: UpstreamMetrics | undefined;

/** Registered once per process on the shared registry (a second registration would throw). */
function upstreamMetrics(): UpstreamMetrics {
  metrics ??= {
    calls: new Histogram({
      name: 'adapter_upstream_call_seconds',
      help: 'Upstream calls (all attempts of one logical call), by operation and final HTTP status',
      labelNames: ['operation', 'status'],
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
      registers: [metricsRegistry],
    }),
    retries: new Counter({
      name: 'adapter_upstream_retries_total',
      help: 'Upstream attempts beyond the first, by operation',
      labelNames: ['operation'],
      registers: [metricsRegistry],
    }),
    deprecation: new Gauge({
      name: 'adapter_upstream_deprecation_warning',
      help: 'Set to 1 while the upstream announces the deprecation of our API version (X-API-Deprecation-Warning)',
      labelNames: ['date', 'warning'],
      registers: [metricsRegistry],
    }),
    retired: new Gauge({
      name: 'adapter_upstream_retired',
      help: '1 once the upstream answered 410: our API version is retired and calls have stopped',
      registers: [metricsRegistry],
    }),
    rateLimitWait: new Counter({
      name: 'adapter_upstream_rate_limit_wait_seconds_total',
      help: 'Time calls waited for our own per-endpoint or total upstream budget, by endpoint (summed over waiting calls)',
      labelNames: ['endpoint'],
      registers: [metricsRegistry],
    }),
  };
  return metrics;
}

/** A call is about to wait `waitMs` for the rate budget of `endpoint` (PgRateLimiter's onWait). */
export function recordRateLimitWait(endpoint: string, waitMs: number): void {
  upstreamMetrics().rateLimitWait.inc({ endpoint }, waitMs / 1000);
}

/** Date in `v1 will be deprecated on <yyyy-mm-dd>` (contract, Versioning 4), if present. */
export function deprecationDate(warning: string): string | undefined {
  return /\b(\d{4}-\d{2}-\d{2})\b/.exec(warning)?.[1];
}

/** Prometheus side of every upstream call. */
export class PrometheusCallObserver implements CallObserver {
  private readonly metrics = upstreamMetrics();
  private lastWarning?: string;

  onCall(record: CallRecord): void {
    const status = record.status === null ? 'none' : String(record.status);
    this.metrics.calls.observe({ operation: record.operation, status }, record.latencyMs / 1000);
    if (record.attempts > 1)
      this.metrics.retries.inc({ operation: record.operation }, record.attempts - 1);
    if (record.deprecationWarning && record.deprecationWarning !== this.lastWarning) {
      this.lastWarning = record.deprecationWarning;
      this.metrics.deprecation.reset();
      this.metrics.deprecation.set(
        {
          date: deprecationDate(record.deprecationWarning) ?? 'unknown',
          warning: record.deprecationWarning.slice(0, 200),
        },
        1,
      );
    }
    if (record.retirement) this.metrics.retired.set(1);
  }
}
