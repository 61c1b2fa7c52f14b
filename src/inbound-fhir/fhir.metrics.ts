import type { Response } from 'express';
import { Counter } from 'prom-client';
import { metricsRegistry } from '../observability/metrics';

const fhirRequestsTotal = new Counter({
  name: 'adapter_fhir_requests_total',
  help: 'FHIR front door answers by method, route and HTTP status',
  labelNames: ['method', 'route', 'status'],
  registers: [metricsRegistry],
});

/** Counts one answer (route pattern, never the concrete path: no ids in labels). */
export function countFhirAnswer(res: Response, status: number): void {
  const req = res.req;
  fhirRequestsTotal.inc({
    method: req.method,
    route: (req.route as { path?: string } | undefined)?.path ?? 'unmatched',
    status: String(status),
  });
}
