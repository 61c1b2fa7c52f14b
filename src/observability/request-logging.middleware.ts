import { randomUUID } from 'node:crypto';
import type { NextFunction, Request, Response } from 'express';
import type { Logger } from 'pino';
import { requestContext } from './logger';
import { metricsRegistry } from './metrics';
import { Histogram } from 'prom-client';

const httpDuration = new Histogram({
  name: 'adapter_http_request_seconds',
  help: 'HTTP requests served, by route and status',
  labelNames: ['method', 'route', 'status'],
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
  registers: [metricsRegistry],
});

/**
 * A correlation id per request (taken from X-Request-Id when the caller sends a sane one)
 * and one log line per request: method, route pattern, status, duration. Never the query
 * string or the body: they may carry PHI.
 */
export function requestLogging(logger: Logger) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const incoming = req.headers['x-request-id'];
    const correlationId =
      typeof incoming === 'string' && /^[\w.-]{1,64}$/.test(incoming) ? incoming : randomUUID();
    res.setHeader('X-Request-Id', correlationId);
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const route = (req.route?.path as string | undefined) ?? 'unmatched';
      httpDuration.observe({ method: req.method, route, status: String(res.statusCode) }, seconds);
      requestContext.run({ correlationId }, () =>
        logger.info(
          { method: req.method, route, status: res.statusCode, ms: Math.round(seconds * 1000) },
          'http request',
        ),
      );
    });
    requestContext.run({ correlationId }, next);
  };
}
