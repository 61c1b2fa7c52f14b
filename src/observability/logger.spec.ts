import { Writable } from 'node:stream';
import { QueryFailedError } from 'typeorm';
import { createLogger } from './logger';

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
