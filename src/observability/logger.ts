import { AsyncLocalStorage } from 'node:async_hooks';
import type { LoggerService } from '@nestjs/common';
import pino, { type Logger } from 'pino';

/**
 * Structured JSON logs (pino). Rules: no PHI (log ids, codes and counts, never names,
 * birth dates, identifiers or message bodies), no secrets, no presigned URLs. The
 * `redact` list is the safety net for fields that must never appear even by mistake.
 */

interface RequestContext {
  correlationId: string;
}

export const requestContext = new AsyncLocalStorage<RequestContext>();

export function currentCorrelationId(): string | undefined {
  return requestContext.getStore()?.correlationId;
}

export function createLogger(level: string = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({
    level,
    base: { service: 'imaging-ai-adapter' },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: {
      paths: [
        '*.password',
        '*.secret',
        '*.clientSecret',
        '*.token',
        '*.access_token',
        '*.authorization',
        '*.url',
        'headers.authorization',
        'req.headers.authorization',
      ],
      censor: '[redacted]',
    },
    mixin() {
      const id = currentCorrelationId();
      return id ? { correlationId: id } : {};
    },
  });
}

/** Nest's own log lines go through pino too. */
export class PinoNestLogger implements LoggerService {
  constructor(private readonly logger: Logger) {}

  log(message: unknown, context?: string): void {
    this.logger.info({ context }, String(message));
  }
  error(message: unknown, trace?: string, context?: string): void {
    this.logger.error({ context, trace }, String(message));
  }
  warn(message: unknown, context?: string): void {
    this.logger.warn({ context }, String(message));
  }
  debug(message: unknown, context?: string): void {
    this.logger.debug({ context }, String(message));
  }
  verbose(message: unknown, context?: string): void {
    this.logger.trace({ context }, String(message));
  }
}
