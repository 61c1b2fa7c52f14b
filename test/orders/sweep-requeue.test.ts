import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import {
  newOrderSpec,
  orderDiagnostics,
  orderState,
  placeWithStudy,
  type Hl7OrderSpec,
  SANDBOX_CLIENT,
  waitFor,
  writeSiteConfig,
} from '../e2e/e2e-support';

jest.setTimeout(180_000);

/**
 * The sweep's lost-job checks against the job queue as it is left by jobs that ran (real
 * PostgreSQL, the sandbox upstream on a manual clock, the sweep run by POST
 * /api/orders/poll-cycle as the minute tick runs it).
 */
describe('the sweep enqueues a lost job again once, and only a lost one', () => {
  let sandbox: RunningSandbox;
  let adapter: TestAdapter;
  let mllp: MllpClient;
  let db: PgClient;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sweep-requeue-'));
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', clock: 'manual', dataDir: dir });
    adapter = await startTestAdapter({
      IMAGING_BASE_URL: sandbox.baseUrl,
      ...SANDBOX_CLIENT,
      IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true',
      STUDY_QUIET_PERIOD_SECONDS: '1',
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

  /** The minute tick's sweep, now: what it did. */
  const sweep = async () => {
    const res = await fetch(`${adapter.httpUrl}/api/orders/poll-cycle`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
    });
    expect(res.status).toBeLessThan(300);
    return ((await res.json()) as { sweep: { leasesResumed: number } }).sweep;
  };

  /** A job under `key`, in the queue or still in the job outbox. */
  const jobUnder = async (key: string) =>
    (
      await db.query(
        `SELECT id FROM graphile_worker._private_jobs WHERE key = $1
          UNION ALL SELECT id FROM job_outbox WHERE job_key = $1`,
        [key],
      )
    ).rows[0];

  const missingJobWarnings = async (id: string) =>
    (
      await db.query(
        `SELECT summary FROM audit_events WHERE order_id = $1 AND kind = 'error' AND summary LIKE '%job was missing%'`,
        [id],
      )
    ).rows.length;

  const uploaded = async (spec: Hl7OrderSpec) => {
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
    await waitFor(
      'uploaded',
      async () => (await orderState(db, id)) === 'processing',
      90_000,
      200,
      () => orderDiagnostics(db, id),
    );
    return id;
  };

  const delivered = async () => {
    const id = await uploaded(newOrderSpec('Bitte KI-Auswertung. sandbox-outcome: delivered'));
    for (let i = 0; i < 40 && (await orderState(db, id)) !== 'delivered'; i++) {
      await sandbox.advance(5_000);
      await sweep();
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(await orderState(db, id)).toBe('delivered');
    return id;
  };

  it('a delivered order whose results are all stored but not marked fetched is marked by the job the sweep enqueues, not given a new job every 10 minutes', async () => {
    const id = await delivered();
    const key = `documents:${id}:DELIVERED`;
    await waitFor(
      'the results stored and the job done',
      async () => {
        const { rows } = await db.query(
          `SELECT count(*)::int AS n FROM order_documents WHERE order_id = $1 AND upstream_status = 'DELIVERED'`,
          [id],
        );
        return rows[0].n === 2 && (await jobUnder(key)) === undefined;
      },
      30_000,
      100,
      () => orderDiagnostics(db, id),
    );
    // `documents_fetched_for` holds the last row whose documents a job stored: a QC report job
    // (QC_FAILED_BYPASSABLE) that waited out its back-off while the order went on to DELIVERED
    // stores its report after the results, and leaves its row there.
    await db.query(
      `UPDATE orders SET documents_fetched_for = 'QC_FAILED_BYPASSABLE',
                         upstream_status_at = now() - interval '20 minutes' WHERE id = $1`,
      [id],
    );
    await sweep();
    expect(await missingJobWarnings(id)).toBe(1);
    await waitFor(
      'the enqueued job run',
      async () => (await jobUnder(key)) === undefined,
      30_000,
      100,
    );
    // Before: the job found every document stored and returned without marking them, so every
    // sweep 10 minutes on enqueued it again (a warning each time), for good.
    const { rows } = await db.query(`SELECT documents_fetched_for FROM orders WHERE id = $1`, [id]);
    expect(rows[0].documents_fetched_for).toBe('DELIVERED');
    await sweep();
    expect(await jobUnder(key)).toBeUndefined();
    expect(await missingJobWarnings(id)).toBe(1);
    // Nothing stored or published twice.
    const docs = await db.query(
      `SELECT count(*)::int AS n FROM order_documents WHERE order_id = $1 AND upstream_status = 'DELIVERED'`,
      [id],
    );
    expect(docs.rows[0].n).toBe(2);
  });

  it('two sweeps at once (the minute tick and POST /api/orders/poll-cycle) enqueue the upload of a lapsed lease once', async () => {
    const id = await uploaded(newOrderSpec());
    // As if the worker uploading it was killed: its lease lapsed, its job gone.
    await db.query(
      `UPDATE orders SET state = 'uploading', upload_completed_at = NULL,
                         lease_owner = 'a-killed-worker', lease_until = now() - interval '1 minute'
        WHERE id = $1`,
      [id],
    );
    // Before: each sweep read the lease lapsed before another had enqueued the upload, and each
    // enqueued it (a second job under the key once a worker had taken the first, the upload
    // run twice). The queue is held for writes (reads go on) until every sweep that is going to
    // enqueue straight into it waits, so all four read before any enqueues, every time.
    const holder = new PgClient({ connectionString: adapter.db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE graphile_worker._private_jobs IN EXCLUSIVE MODE');
      const sweeps = Promise.all([sweep(), sweep(), sweep(), sweep()]);
      const waiting = async () =>
        (
          await db.query(
            `SELECT count(*)::int AS n FROM pg_stat_activity
              WHERE wait_event_type = 'Lock' AND query LIKE '%graphile_worker.add_job(%'`,
          )
        ).rows[0].n as number;
      const until = Date.now() + 3_000;
      while (Date.now() < until && (await waiting()) < 4) {
        await new Promise((r) => setTimeout(r, 50));
      }
      await holder.query('COMMIT');
      const swept = await sweeps;
      expect(swept.reduce((n, s) => n + s.leasesResumed, 0)).toBe(1);
    } finally {
      await holder.end();
    }
    await waitFor('the upload job', async () => (await jobUnder(`upload:${id}`)) !== undefined);
  });
});
