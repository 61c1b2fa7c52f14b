import { Gauge } from 'prom-client';
import { metricsRegistry } from '../observability/metrics';

/**
 * Each dependency's state as /health last saw it (1 up, 0 not): refreshed by every /health
 * call and before every scrape of /metrics, so a monitoring system that only scrapes sees a
 * database outage (the scrape itself still succeeds then) and an unreachable upstream.
 */
export const dependencyUp = new Gauge({
  name: 'adapter_dependency_up',
  help: 'Whether a dependency answered the last health check (1) or not (0): database, upstream, storage (DATA_DIR free space)',
  labelNames: ['dependency'],
  registers: [metricsRegistry],
});
