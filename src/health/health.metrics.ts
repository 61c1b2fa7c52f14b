import { Gauge } from 'prom-client';
import { metricsRegistry } from '../observability/metrics';

/**
 * Each dependency's state as /health last saw it (1 up, 0 not): refreshed by every /health
 * call and before every scrape of /metrics, so a monitoring system that only scrapes sees a
 * database outage (the scrape itself still succeeds then) and an unreachable upstream.
 */
export const dependencyUp = new Gauge({
  name: 'adapter_dependency_up',
  help: 'Whether a dependency answered the last health check (1) or not (0): database, upstream, storage (DATA_DIR free space), and each destination we deliver to (ehr-fhir, ris-hl7, pacs-dicomweb, alert-webhook: 0 when degraded)',
  labelNames: ['dependency'],
  registers: [metricsRegistry],
});

/** Per destination we deliver to (ehr-fhir, ris-hl7, pacs-dicomweb, alert-webhook), from the outbox. */
export const outboxPending = new Gauge({
  name: 'adapter_outbox_pending',
  help: 'Outbox rows waiting to be delivered, by destination (as of the last /health or scrape)',
  labelNames: ['destination'],
  registers: [metricsRegistry],
});

export const outboxOldestPendingSeconds = new Gauge({
  name: 'adapter_outbox_oldest_pending_seconds',
  help: 'Age of the oldest outbox row waiting to be delivered, by destination (0 when none)',
  labelNames: ['destination'],
  registers: [metricsRegistry],
});

export const outboxDeadLetters = new Gauge({
  name: 'adapter_outbox_dead_letters',
  help: 'Dead letters not replayed, by destination',
  labelNames: ['destination'],
  registers: [metricsRegistry],
});

export const outboxConsecutiveFailures = new Gauge({
  name: 'adapter_outbox_consecutive_failures',
  help: 'Delivery attempts that failed in a row since the last success, by destination',
  labelNames: ['destination'],
  registers: [metricsRegistry],
});

export const outboxLastSuccess = new Gauge({
  name: 'adapter_outbox_last_success_timestamp_seconds',
  help: 'When a delivery to the destination last succeeded (Unix time; 0 never)',
  labelNames: ['destination'],
  registers: [metricsRegistry],
});

export const outboxLastFailure = new Gauge({
  name: 'adapter_outbox_last_failure_timestamp_seconds',
  help: 'When a delivery attempt to the destination last failed (Unix time; 0 never)',
  labelNames: ['destination'],
  registers: [metricsRegistry],
});
