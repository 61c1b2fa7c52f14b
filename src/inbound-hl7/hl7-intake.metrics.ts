import { Counter } from 'prom-client';
import { metricsRegistry } from '../observability/metrics';

export const messagesTotal = new Counter({
  name: 'adapter_hl7_messages_total',
  help: 'Inbound HL7 messages by type and acknowledgment code',
  labelNames: ['type', 'ack'],
  registers: [metricsRegistry],
});

/** Metric label values come from a closed list: a fuzzed MSH-9 must not create new series. */
const KNOWN_TYPES = new Set(['ORM^O01', 'OMI^O23', 'ADT^A08', 'ADT^A31', 'ADT^A40', 'ADT^A47']);
const KNOWN_ACKS = new Set(['AA', 'AE', 'AR', 'CA', 'CE', 'CR']);
export function typeLabel(type: string): string {
  return KNOWN_TYPES.has(type) ? type : 'other';
}
export function ackLabel(code: string): string {
  return KNOWN_ACKS.has(code) ? code : 'other';
}
