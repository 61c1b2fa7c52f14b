import { OrderRepository } from '../../src/persistence/order.repository';
import { PollScheduleRepository } from '../../src/persistence/poll-schedule.repository';
import { createTestDatabase, type TestDatabase } from '../helpers/database';

/**
 * Values that reach PostgreSQL from another system's words (an upstream's error text, a
 * clinician's bypass reason, poll figures holding an upstream status) may hold a NUL, which
 * text and jsonb cannot store, or a lone UTF-16 surrogate, which jsonb refuses. A write that
 * fails for the same value every time fails the job that makes it every time (the outbox's
 * version of this resent one ORU 3,198 times in 30 s): every repository write stores them as
 * U+FFFD, as the intake and the outbox already did.
 */
describe('repository writes of values from other systems', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('stores a NUL and a lone surrogate as U+FFFD in text and jsonb columns', async () => {
    const [{ id }] = (await db.dataSource.query(
      `INSERT INTO orders (source, state, request) VALUES ('api', 'placed', '{}'::jsonb) RETURNING id`,
    )) as Array<{ id: string }>;
    const orders = new OrderRepository(db.dataSource);
    // an upstream's 422 body quoted in the reason, as a C-string-minded service pads it
    await orders.setLastError(id, 'the upstream refused the batch: invalid_products\u0000\u0000');
    await orders.setQcBypass(id, {
      status: 'requested',
      by: 'dr.okafor',
      reason: 'motion artefact only \ud83d; proceed',
      at: '2026-11-27T08:00:00.000Z',
    });
    const [row] = (await db.dataSource.query(
      `SELECT last_error, qc_bypass->>'reason' AS reason FROM orders WHERE id = $1`,
      [id],
    )) as Array<{ last_error: string; reason: string }>;
    expect(row).toEqual({
      last_error: 'the upstream refused the batch: invalid_products\ufffd\ufffd',
      reason: 'motion artefact only \ufffd; proceed',
    });

    const polls = new PollScheduleRepository(db.dataSource);
    await polls.ensure('status-poll');
    expect(await polls.claim('status-poll', true, 60_000, 'replica-a')).toBe(true);
    await polls.release('status-poll', 'replica-a', 1_000, { lastStatus: 'QC_FAILED\u0000' });
    const [stats] = (await db.dataSource.query(
      `SELECT last_stats->>'lastStatus' AS s FROM poll_schedule WHERE name = 'status-poll'`,
    )) as Array<{ s: string }>;
    expect(stats!.s).toBe('QC_FAILED\ufffd');
  });
});
