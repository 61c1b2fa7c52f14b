import { collectDefaultMetrics, Registry } from 'prom-client';

/**
 * The process's one Prometheus registry (served at /metrics). Modules create their own
 * metrics on it with `registers: [metricsRegistry]`; names are prefixed `adapter_`.
 */
export const metricsRegistry = new Registry();
collectDefaultMetrics({ register: metricsRegistry, prefix: 'adapter_' });
