import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
import { OrderPollerService } from '../../src/orders/order-poller.service';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import {
  newOrderSpec,
  placeWithStudy,
  orderState,
  SANDBOX_CLIENT,
  upstreamStatuses,
  waitFor,
  writeSiteConfig,
} from '../e2e/e2e-support';

jest.setTimeout(240_000);

/**
 * The poller against an upstream that pages `/list-orders` and `/reports` (sandbox,
 * SANDBOX_PAGE_SIZE 2, `links.next`) and lists one order with a status value the contract
 * does not name (sandbox outcome `unknown_status`): every order is followed to its end, every
 * stored report acknowledged, and the odd one is left as it was and flagged once.
 */
describe('poller: paged lists and an unknown status (adapter, sandbox, real PostgreSQL)', () => {
  let sandbox: RunningSandbox;
  let adapter: TestAdapter;
  let mllp: MllpClient;
  let db: PgClient;
  let poller: OrderPollerService;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orders-paging-'));
    sandbox = await startSandbox({
      port: 0,
      host: '127.0.0.1',
      clock: 'manual',
      dataDir: dir,
      pageSize: 2,
      pageStyle: 'links',
    });
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
    poller = adapter.app.get(OrderPollerService);
  });
  afterAll(async () => {
    await mllp?.close();
    await db?.end();
    await adapter?.close();
    await sandbox?.close();
  });

  async function place(outcome: string): Promise<string> {
    const spec = newOrderSpec(`sandbox-outcome: ${outcome}`);
    return placeWithStudy({ adapter, mllp, db }, spec);
  }

  const flags = async (id: string) =>
    (
      await db.query(
        `SELECT severity, summary, detail FROM audit_events WHERE order_id = $1 AND kind = 'upstream.unknown-status'`,
        [id],
      )
    ).rows;

  it('follows every order over all pages, acknowledges every stored report, and flags the unknown status once', async () => {
    const ids: string[] = [];
    for (const outcome of ['delivered', 'failed', 'delivered', 'delivered', 'unknown_status'])
      ids.push(await place(outcome));
    const odd = ids[4]!;
    for (const id of ids)
      await waitFor(
        `${id} uploaded`,
        async () => (await orderState(db, id)) === 'processing',
        90_000,
      );
    // All five active upstream, on three pages: each is found in the list (none costs a
    // GET /status as if it had left it).
    // Three pages of /list-orders and one (empty) of /reports, each a call.
    expect(await poller.runNow()).toMatchObject({
      followed: 5,
      leftActiveList: 0,
      upstreamCalls: 4,
    });
    let maxReportsListed = 0;
    const cycle = async () => {
      const stats = await poller.runNow();
      maxReportsListed = Math.max(maxReportsListed, stats?.reportsListed ?? 0);
      return stats;
    };

    // Into the unknown status: three cycles see it, one flag is written, the order waits.
    for (let i = 0; i < 4; i++) {
      await sandbox.advance(1_000);
      await cycle();
    }
    const upstreamId = (await db.query(`SELECT upstream_order_id FROM orders WHERE id = $1`, [odd]))
      .rows[0].upstream_order_id as string;
    expect(sandbox.state.orders.get(upstreamId)!.status).toBe('VENDOR_REVIEW_HOLD');
    for (let i = 0; i < 3; i++) {
      expect(await cycle()).toMatchObject({ unknownStatus: 1 });
    }
    expect(await orderState(db, odd)).toBe('processing');
    const flagged = await flags(odd);
    expect(flagged).toHaveLength(1);
    expect(flagged[0]).toMatchObject({
      severity: 'warning',
      detail: { status: 'VENDOR_REVIEW_HOLD', upstreamOrderId: upstreamId },
    });

    // Everything reaches its end, the odd one too once its status is a known one again.
    const states = async () => {
      const out: string[] = [];
      for (const id of ids) out.push(await orderState(db, id));
      return out;
    };
    for (let i = 0; i < 40; i++) {
      if ((await states()).every((st) => st === 'delivered' || st === 'failed')) break;
      await sandbox.advance(5_000);
      await cycle();
    }
    expect(await states()).toEqual(['delivered', 'failed', 'delivered', 'delivered', 'delivered']);
    expect(await upstreamStatuses(db, odd)).not.toContain('VENDOR_REVIEW_HOLD');
    expect(await flags(odd)).toHaveLength(1);

    // Reports of every page acknowledged once their documents are stored.
    await waitFor('every report acknowledged', async () => {
      await cycle();
      const upstreamIds = new Set(
        (
          await db.query(`SELECT upstream_order_id FROM orders WHERE id = ANY($1::uuid[])`, [ids])
        ).rows.map((r) => r.upstream_order_id as string),
      );
      const reports = [...sandbox.state.reports.values()].filter((r) => upstreamIds.has(r.orderId));
      return reports.length === 5 && reports.every((r) => r.acknowledged);
    });
    // More reports at once than one page holds: the cycle read /reports page by page.
    expect(maxReportsListed).toBeGreaterThan(2);
  });
});
