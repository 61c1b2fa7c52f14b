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

export interface LoggerOptions {
  /**
   * Repeated warnings and errors (same message, same cause) are written once per interval;
   * the next line for that cause carries `repeated` (how many were held back). 0: off.
   */
  repeatIntervalMs?: number;
  /** `json` (one object per line, the default) or `pretty` (one readable line, for a terminal). */
  format?: 'json' | 'pretty';
}

export function createLogger(
  level: string = process.env.LOG_LEVEL ?? 'info',
  destination?: pino.DestinationStream,
  settings: LoggerOptions = {},
): Logger {
  const repeats = new RepeatLimiter(settings.repeatIntervalMs ?? 60_000);
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
    hooks: {
      logMethod(args, method, levelValue) {
        if (levelValue < 40 || !repeats.enabled) return method.apply(this, args);
        const verdict = repeats.admit(args, () => (extra) => {
          const [first, ...rest] = args;
          const merged =
            first && typeof first === 'object'
              ? { ...(first as object), ...extra }
              : { ...extra, msg: first };
          method.apply(this, [merged, ...rest] as Parameters<typeof method>);
        });
        if (verdict === 'write') method.apply(this, args);
      },
    },
    mixin() {
      const id = currentCorrelationId();
      return id ? { correlationId: id } : {};
    },
  };
  // Lines are written synchronously, in the order they were logged: pino's default stream
  // writes in the background and flushes what is left with a synchronous write at exit, which
  // can land ahead of a background write still under way (the final `stopped` line was seen
  // before a line logged a millisecond earlier). One write per line costs microseconds; the
  // message path logs at most one info line per message.
  const target =
    destination ??
    (settings.format === 'pretty'
      ? prettyStream(process.stdout)
      : pino.destination({ dest: process.stdout.fd ?? 1, sync: true }));
  return pino(options, target);
}

/**
 * One line per cause per interval. The first occurrence of a warning or error is written at
 * once; later ones within the interval are counted, and when the interval ends a single line
 * says how many there were (`repeated`, `repeatIntervalSeconds`). During a database outage
 * that turns ~10 lines a second into one a minute per cause.
 */
class RepeatLimiter {
  private readonly held = new Map<
    string,
    { count: number; timer: NodeJS.Timeout; emit: (extra: object) => void }
  >();

  constructor(private readonly intervalMs: number) {}

  get enabled(): boolean {
    return this.intervalMs > 0;
  }

  admit(args: unknown[], emitter: () => (extra: object) => void): 'write' | 'held' {
    const key = causeKey(args);
    const entry = this.held.get(key);
    if (entry) {
      entry.count += 1;
      entry.emit = emitter();
      return 'held';
    }
    if (this.held.size >= 1000) return 'write'; // never hold back without bound
    const timer = setTimeout(() => this.flush(key), this.intervalMs);
    timer.unref();
    this.held.set(key, { count: 0, timer, emit: emitter() });
    return 'write';
  }

  private flush(key: string): void {
    const entry = this.held.get(key);
    this.held.delete(key);
    if (!entry || entry.count === 0) return;
    entry.emit({ repeated: entry.count, repeatIntervalSeconds: this.intervalMs / 1000 });
  }
}

/** The message and its cause (the error's code or first line), without ids that vary. */
function causeKey(args: unknown[]): string {
  const [first, second] = args;
  if (typeof first === 'string') return first;
  const obj = (first ?? {}) as Record<string, unknown>;
  const err = obj.err;
  const cause =
    err instanceof Error
      ? `${(err as NodeJS.ErrnoException).code ?? ''} ${err.message.split('\n')[0]}`
      : typeof err === 'string'
        ? err.split('\n')[0]
        : '';
  const msg = typeof second === 'string' ? second : '';
  return `${msg}\u0000${cause}\u0000${String(obj.destination ?? obj.component ?? '')}`;
}

const LEVEL_NAMES: Record<number, string> = {
  10: 'TRACE',
  20: 'DEBUG',
  30: 'INFO',
  40: 'WARN',
  50: 'ERROR',
  60: 'FATAL',
};
const PRETTY_SKIP = new Set(['level', 'time', 'msg', 'service', 'pid', 'hostname']);

/** LOG_FORMAT=pretty: `12:00:01.234 WARN  outbox claim failed destination=fhir err="…"`. */
export function prettyLine(json: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const time = typeof o.time === 'string' ? o.time.slice(11, 23) : '';
  const level = (LEVEL_NAMES[Number(o.level)] ?? String(o.level)).padEnd(5);
  const fields = Object.entries(o)
    .filter(([k, v]) => !PRETTY_SKIP.has(k) && v !== undefined)
    .map(([k, v]) => {
      if (k === 'err' && v && typeof v === 'object') {
        const e = v as { message?: string; code?: string };
        v = [e.code, e.message].filter(Boolean).join(' ');
      }
      const text = typeof v === 'string' ? v : JSON.stringify(v);
      return `${k}=${/[\s"=]/.test(text) ? JSON.stringify(text) : text}`;
    });
  return `${time} ${level} ${String(o.msg ?? '')}${fields.length ? `  ${fields.join(' ')}` : ''}`;
}

function prettyStream(out: NodeJS.WritableStream): pino.DestinationStream {
  return {
    write(chunk: string) {
      for (const line of chunk.split('\n')) if (line) out.write(`${prettyLine(line)}\n`);
    },
  };
}

/**
 * Anything a library writes with console.* (graphile-worker's internal errors, for one) goes
 * through the logger as one JSON line, its stack trace kept inside the line.
 */
export function routeConsoleToLogger(logger: Logger): void {
  const format = (args: unknown[]) => {
    const err = args.find((a): a is Error => a instanceof Error);
    const text = args
      .filter((a) => !(a instanceof Error))
      .map((a) => (typeof a === 'string' ? a : JSON.stringify(a)))
      .join(' ');
    return { obj: err ? { err, component: 'console' } : { component: 'console' }, text };
  };
  console.error = (...args: unknown[]) => {
    const { obj, text } = format(args);
    logger.error(obj, text || 'console.error');
  };
  console.warn = (...args: unknown[]) => {
    const { obj, text } = format(args);
    logger.warn(obj, text || 'console.warn');
  };
  console.log = (...args: unknown[]) => {
    const { obj, text } = format(args);
    logger.info(obj, text);
  };
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
