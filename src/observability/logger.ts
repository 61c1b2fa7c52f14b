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

/**
 * Fields of an error that can carry stored values: TypeORM's QueryFailedError keeps the
 * query's `parameters` (an order's raw message, a patient's name), pg's error its `detail`
 * ("Key (…)=(…)"), `where` and the wrapped `driverError`. A failed insert — say, while the
 * database restarts — must not write them to the log.
 */
const ERROR_FIELDS_WITH_VALUES = ['parameters', 'query', 'driverError', 'detail', 'where'];

/** pino's error serializer without the fields above (also in `cause`). */
export function serializeError(err: unknown): unknown {
  if (!(err instanceof Error)) return err;
  // Copies at each level: the error itself (and its cause) is left as it was.
  const strip = (o: Record<string, unknown>, depth: number): Record<string, unknown> => {
    const copy = { ...o };
    for (const f of ERROR_FIELDS_WITH_VALUES) delete copy[f];
    if (copy.cause && typeof copy.cause === 'object')
      copy.cause = depth < 4 ? strip(copy.cause as Record<string, unknown>, depth + 1) : undefined;
    return copy;
  };
  return strip(pino.stdSerializers.err(err) as unknown as Record<string, unknown>, 0);
}

export function createLogger(
  level: string = process.env.LOG_LEVEL ?? 'info',
  destination?: pino.DestinationStream,
): Logger {
  const options: pino.LoggerOptions = {
    level,
    base: { service: 'imaging-ai-adapter' },
    timestamp: pino.stdTimeFunctions.isoTime,
    serializers: { err: serializeError },
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
  };
  return destination ? pino(options, destination) : pino(options);
}

const NEST_STARTUP_CONTEXTS = new Set([
  'NestFactory',
  'InstanceLoader',
  'RoutesResolver',
  'RouterExplorer',
  'NestApplication',
]);

/** Nest's own log lines go through pino too. */
export class PinoNestLogger implements LoggerService {
  constructor(private readonly logger: Logger) {}

  log(message: unknown, context?: string): void {
    // Nest's start-up chatter (one line per module and per route) stays at debug: at info it
    // scrolled the token block away.
    if (context && NEST_STARTUP_CONTEXTS.has(context))
      this.logger.debug({ context }, String(message));
    else this.logger.info({ context }, String(message));
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
