import { createServer } from 'node:net';
import { Client } from 'pg';
import { QueryFailedError } from 'typeorm';
import { isDatabaseUnavailable } from './database-unavailable';

const pgError = (message: string, code?: string) =>
  Object.assign(new Error(message), code ? { code } : {});

describe('isDatabaseUnavailable', () => {
  it('is true for a real refused connection', async () => {
    // A port nobody listens on: bind, note, close.
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const client = new Client({ host: '127.0.0.1', port, connectionTimeoutMillis: 2000 });
    const error = await client.connect().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isDatabaseUnavailable(error)).toBe(true);
  });

  it('is true for a restart, a crash, recovery and broken connections, also wrapped by TypeORM', () => {
    for (const e of [
      pgError('terminating connection due to administrator command', '57P01'),
      pgError('terminating connection because of crash of another server process', '57P02'),
      pgError('the database system is starting up', '57P03'),
      pgError('the database system is not yet accepting connections', '57P03'),
      pgError('connection failure', '08006'),
      pgError('sorry, too many clients already', '53300'),
      pgError('Connection terminated unexpectedly'),
      pgError('timeout exceeded when trying to connect'),
      pgError('read ECONNRESET', 'ECONNRESET'),
      new QueryFailedError('SELECT 1', [], pgError('Connection terminated unexpectedly')),
      new QueryFailedError(
        'SELECT 1',
        [],
        pgError('the database system is shutting down', '57P03'),
      ),
      new Error('store failed', { cause: pgError('connect ECONNREFUSED', 'ECONNREFUSED') }),
    ])
      expect([e.message, isDatabaseUnavailable(e)]).toEqual([e.message, true]);
  });

  it('is false for errors the database answered (constraint, syntax) and for anything else', () => {
    for (const e of [
      pgError('duplicate key value violates unique constraint "orders_pkey"', '23505'),
      pgError('syntax error at or near "SELEC"', '42601'),
      new QueryFailedError('SELEC 1', [], pgError('syntax error', '42601')),
      new Error('something else'),
      'a string',
      undefined,
    ])
      expect(isDatabaseUnavailable(e)).toBe(false);
  });
});
