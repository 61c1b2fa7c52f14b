import { Counter, Histogram } from 'prom-client';
import { metricsRegistry } from '../observability/metrics';

/** Delivery attempts by destination, document kind and outcome (delivered, retry, dead). */
export const outboundAttemptsTotal = new Counter({
  name: 'adapter_outbound_attempts_total',
  help: 'Outbound delivery attempts by destination, document kind and outcome',
  labelNames: ['destination', 'kind', 'outcome'],
  registers: [metricsRegistry],
});

/** From the row being written (the status change) to its delivery. */
export const outboundDeliverySeconds = new Histogram({
  name: 'adapter_outbound_delivery_seconds',
  help: 'Time from an outbox row being written to its delivery, by destination',
  labelNames: ['destination'],
  buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60, 300, 1800],
  registers: [metricsRegistry],
});
