import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { ackSummary } from '../helpers/hl7-fixtures';
import {
  newOrderSpec,
  orderByPlacer,
  orderState,
  ormMessage,
  SANDBOX_CLIENT,
  waitFor,
  writeSiteConfig,
} from '../e2e/e2e-support';

jest.setTimeout(120_000);

/**
 * Our upstream budget is shared by the whole cluster (PostgreSQL). When it is used up for
 * an endpoint, a lifecycle job whose first call needs that endpoint must not sit in one of
 * the few job workers for up to a minute: it is put back for when the budget frees, so the
 * workers stay free for the next steps of other orders (the fault suite's stalled stages).
 */
describe('a lifecycle job that would only wait for upstream budget gives its worker back', () => {
  const LIMIT = 3;
  let sandbox: RunningSandbox;
  let adapter: TestAdapter;
  let mllp: MllpClient;
  let db: PgClient;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'upstream-budget-'));
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', dataDir: dir, timeScale: 0.01 });
    adapter = await startTestAdapter({
      IMAGING_BASE_URL: sandbox.baseUrl,
      ...SANDBOX_CLIENT,
      IMAGING_RATE_LIMIT_PER_ENDPOINT: String(LIMIT),
      CONFIG_FILE: writeSiteConfig(dir),
      POLL_INTERVAL_SECONDS: '3600',
    });
    mllp = new MllpClient({ host: '127.0.0.1', port: adapter.mllpPort, responseTimeoutMs: 10_000 });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await mllp?.close();
    await db?.end();
    await adapter?.close();
    await sandbox?.close();
  });

  it('placing is rescheduled while the /new-order budget is used up, and goes ahead once it frees', async () => {
    // Another replica used this minute's whole /new-order budget a moment ago.
    const budgetKey = `${new URL(sandbox.baseUrl).host}|endpoint|/new-order`;
    await db.query(
      `INSERT INTO imaging_rate_limit_buckets (key, bucket_start_ms, count)
       VALUES ($1, (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint / 1000) * 1000, $2)`,
      [budgetKey, LIMIT],
    );
    const spec = newOrderSpec('sandbox-outcome: delivered');
    expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    const { id } = await waitFor('the order', () => orderByPlacer(db, spec.placer));

    // Put back for when the budget frees (about a minute), not waiting in a worker.
    const deferred = await waitFor(
      'the place job rescheduled',
      async () =>
        (
          await db.query(
            `SELECT run_at FROM graphile_worker._private_jobs
              WHERE key = $1 AND locked_at IS NULL AND run_at > now() + interval '30 seconds'`,
            [`place:${id}`],
          )
        ).rows[0],
      20_000,
    );
    expect(deferred).toBeDefined();
    expect(await orderState(db, id)).toBe('received');
    const { rows } = await db.query(`SELECT place_attempted_at FROM orders WHERE id = $1`, [id]);
    expect(rows[0].place_attempted_at).toBeNull();
    expect(
      [...sandbox.state.orders.values()].filter(
        (o) => (o.apiMetadata as Record<string, unknown>).correlation_id === id,
      ),
    ).toEqual([]);
    const metrics = await (
      await fetch(`${adapter.httpUrl}/metrics`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
      })
    ).text();
    expect(metrics).toMatch(
      /adapter_order_jobs_deferred_total\{job="order.place-upstream"\} [1-9]/,
    );

    // The budget frees (as the minute passes) and the job comes due: the order is placed.
    await db.query(`DELETE FROM imaging_rate_limit_buckets WHERE key = $1`, [budgetKey]);
    await db.query(`UPDATE graphile_worker._private_jobs SET run_at = now() WHERE key = $1`, [
      `place:${id}`,
    ]);
    await waitFor('the order placed', async () => (await orderState(db, id)) !== 'received');
    expect(
      [...sandbox.state.orders.values()].filter(
        (o) => (o.apiMetadata as Record<string, unknown>).correlation_id === id,
      ),
    ).toHaveLength(1);
  });
});
