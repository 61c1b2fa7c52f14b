import { Writable } from 'node:stream';
import { QueryFailedError } from 'typeorm';
import { createLogger, prettyLine, routeConsoleToLogger } from './logger';

function capture(): { sink: Writable; lines: () => Array<Record<string, unknown>> } {
  let out = '';
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      out += chunk.toString();
      done();
    },
  });
  return {
    sink,
    lines: () =>
      out
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

/** A failed insert as TypeORM reports it: the query, its parameters, pg's error with detail. */
function failedInsert(): QueryFailedError {
  const pgError = Object.assign(new Error('Connection terminated unexpectedly'), {
    code: '23505',
    detail: 'Key (patient)=(MUSTERMANN^ERIKA) already exists.',
    where: 'PL/pgSQL function intake_accept(PAT-0042)',
  });
  return new QueryFailedError(
    'INSERT INTO inbound_messages (raw) VALUES ($1)',
    ['PID|||PAT-0042||MUSTERMANN^ERIKA||19640812'],
    pgError,
  );
}

describe('logger: errors without stored values', () => {
  it('logs a failed query with its message and code, never its parameters, detail or query', () => {
    const { sink, lines } = capture();
    const logger = createLogger('info', sink);
    const err = failedInsert();
    logger.error({ err }, 'hl7 message could not be stored');
    logger.error(err);
    logger.warn({ err: new Error('outer', { cause: failedInsert() }) }, 'wrapped');

    const text = JSON.stringify(lines());
    expect(text).toContain('Connection terminated unexpectedly');
    expect(text).toContain('23505');
    expect(text).not.toMatch(/MUSTERMANN|PAT-0042|19640812|INSERT INTO/);
    const [first] = lines();
    expect(first!.err).toMatchObject({ type: 'QueryFailedError', code: '23505' });
    // The error object itself is untouched (callers may still inspect it).
    expect(err.parameters).toHaveLength(1);
    expect((err as unknown as { detail: string }).detail).toContain('MUSTERMANN');
  });

  it('leaves values that are not errors as they are', () => {
    const { sink, lines } = capture();
    createLogger('info', sink).info({ err: 'connect ECONNREFUSED' }, 'x');
    expect(lines()[0]!.err).toBe('connect ECONNREFUSED');
  });
});

describe('logger: repeated errors, pretty lines, console', () => {
  afterEach(() => jest.useRealTimers());

  it('writes a repeated warning once per interval, then one line with the count', () => {
    jest.useFakeTimers();
    const { sink, lines } = capture();
    const logger = createLogger('info', sink, { repeatIntervalMs: 10_000 });
    for (let i = 0; i < 50; i++)
      logger.warn({ destination: 'fhir', err: 'ECONNREFUSED' }, 'outbox claim failed');
    logger.warn({ destination: 'hl7', err: 'ECONNREFUSED' }, 'outbox claim failed');
    logger.info('not limited');
    logger.info('not limited');
    expect(lines().map((l) => l.msg)).toEqual([
      'outbox claim failed',
      'outbox claim failed',
      'not limited',
      'not limited',
    ]);
    jest.advanceTimersByTime(10_000);
    const last = lines().at(-1)!;
    expect(last).toMatchObject({
      msg: 'outbox claim failed',
      destination: 'fhir',
      repeated: 49,
      repeatIntervalSeconds: 10,
    });
    // the hl7 line had no repeats: nothing more for it
    expect(lines()).toHaveLength(5);
    // the next interval starts afresh
    logger.warn({ destination: 'fhir', err: 'ECONNREFUSED' }, 'outbox claim failed');
    expect(lines()).toHaveLength(6);
  });

  it('a different cause is a different line', () => {
    const { sink, lines } = capture();
    const logger = createLogger('info', sink, { repeatIntervalMs: 60_000 });
    logger.error({ err: new Error('connect ECONNREFUSED') }, 'poll failed');
    logger.error({ err: new Error('connect ECONNREFUSED') }, 'poll failed');
    logger.error({ err: new Error('timeout') }, 'poll failed');
    expect(lines()).toHaveLength(2);
  });

  it('pretty: one readable line per entry', () => {
    const line = prettyLine(
      JSON.stringify({
        level: 40,
        time: '2026-11-25T03:04:05.678Z',
        service: 'imaging-ai-adapter',
        msg: 'outbox claim failed',
        destination: 'fhir',
        err: {
          type: 'Error',
          message: 'connect ECONNREFUSED 127.0.0.1:5432',
          code: 'ECONNREFUSED',
        },
        repeated: 12,
      }),
    );
    expect(line).toBe(
      '03:04:05.678 WARN  outbox claim failed  destination=fhir err="ECONNREFUSED connect ECONNREFUSED 127.0.0.1:5432" repeated=12',
    );
  });

  it('console.error of a library becomes one JSON line with the stack inside', () => {
    const { sink, lines } = capture();
    const saved = { error: console.error, warn: console.warn, log: console.log };
    try {
      routeConsoleToLogger(createLogger('info', sink));
      console.error('Graphile Worker Internal Error', new Error('boom'));
    } finally {
      Object.assign(console, saved);
    }
    const [l] = lines();
    expect(l).toMatchObject({ level: 50, msg: 'Graphile Worker Internal Error' });
    expect((l!.err as { stack: string }).stack).toContain('boom');
  });
});
