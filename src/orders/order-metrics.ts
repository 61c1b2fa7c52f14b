import { Counter, Gauge, Histogram } from 'prom-client';
import { metricsRegistry } from '../observability/metrics';

/** Orders that ended with an alert (deadline, unusable study, refusal), by alert code. */
export const orderAlerts = new Counter({
  name: 'adapter_order_alerts_total',
  help: 'Orders ended with an alert an operator should look at, by alert code',
  labelNames: ['alert'],
  registers: [metricsRegistry],
});

/**
 * Lifecycle jobs put back until our upstream budget for their first call frees, instead of
 * holding a job worker while they wait for it.
 */
export const budgetDeferrals = new Counter({
  name: 'adapter_order_jobs_deferred_total',
  help: 'Lifecycle jobs rescheduled for when our upstream rate budget for their first call frees (instead of waiting in a worker), by job',
  labelNames: ['job'],
  registers: [metricsRegistry],
});

/** Upstream calls of the last poll cycle (target: at most 3 plus one per changed order). */
export const pollCycleCalls = new Gauge({
  name: 'adapter_poll_cycle_upstream_calls',
  help: 'Upstream API calls made by the last poll cycle',
  registers: [metricsRegistry],
});

export const pollCycleFollowed = new Gauge({
  name: 'adapter_poll_cycle_followed_orders',
  help: 'Orders followed upstream by the last poll cycle',
  registers: [metricsRegistry],
});

export const pollCycleSeconds = new Histogram({
  name: 'adapter_poll_cycle_seconds',
  help: 'Duration of upstream poll cycles',
  buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  registers: [metricsRegistry],
});

/** `/list-orders` entries whose status value the contract does not name (left as they were). */
export const upstreamUnknownStatus = new Counter({
  name: 'adapter_upstream_unknown_status_total',
  help: 'Followed orders listed by GET /list-orders with a status value the contract does not name, per poll cycle',
  registers: [metricsRegistry],
});
