import { Counter } from 'prom-client';
import type { GuardCloseReason } from '../common/http-connections';
import { metricsRegistry } from './metrics';

/**
 * Connections closed and requests refused by the HTTP connection guard, by why: an operator
 * under a flood sees which bound holds (per-client, limit, evicted, idle, stalled, slow,
 * pipelined). Before, none of it was counted or logged anywhere.
 */
export const httpConnectionsClosed = new Counter({
  name: 'adapter_http_connections_closed_total',
  help: 'HTTP connections closed or requests refused by the connection guard, by reason',
  labelNames: ['reason'],
  registers: [metricsRegistry],
});

export function countGuardClose(reason: GuardCloseReason): void {
  httpConnectionsClosed.inc({ reason });
}
