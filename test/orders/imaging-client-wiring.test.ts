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
  ormMessage,
  SANDBOX_CLIENT,
  waitFor,
  writeSiteConfig,
} from '../e2e/e2e-support';

jest.setTimeout(120_000);

/**
 * The upstream client as the app wires it: every call audited (`upstream.call`, no URL),
 * /health fed by what the calls saw (deprecation header, retirement with its migration
 * guide), and a retired API leaving orders waiting rather than failing them.
 */
describe.each([
  { name: 'deprecated', options: { deprecationDate: '2027-03-01' } },
  { name: 'retired', options: { retired: true } },
])('imaging client wiring against a $name upstream', ({ name, options }) => {
  let sandbox: RunningSandbox;
  let adapter: TestAdapter;
  let db: PgClient;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wiring-'));
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', dataDir: dir, ...options });
    adapter = await startTestAdapter({
      IMAGING_BASE_URL: sandbox.baseUrl,
      ...SANDBOX_CLIENT,
      CONFIG_FILE: writeSiteConfig(dir),
    });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await sandbox?.close();
  });

  it('audits the calls of an order and reports the upstream on /health', async () => {
    const spec = newOrderSpec();
    const mllp = new MllpClient({ host: '127.0.0.1', port: adapter.mllpPort });
    try {
      expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    } finally {
      await mllp.close();
    }
    const order = await waitFor('the order', () => orderByPlacer(db, spec.placer));
    const calls = await waitFor('upstream calls audited', async () => {
      const { rows } = await db.query(
        `SELECT order_id, severity, summary, detail FROM audit_events WHERE kind = 'upstream.call' ORDER BY id`,
      );
      const wanted =
        name === 'retired'
          ? rows.some((r) => r.detail.status === 410)
          : rows.some((r) => r.detail.operation === 'new-order');
      return wanted ? rows : undefined;
    });
    expect(JSON.stringify(calls)).not.toMatch(/https?:\/\/|X-Amz|signature=/i);
    const health = (await (await fetch(`${adapter.httpUrl}/health`)).json()) as {
      status: string;
      checks: { upstream: Record<string, unknown> };
    };
    if (name === 'deprecated') {
      await waitFor(
        'placed',
        async () => (await orderByPlacer(db, spec.placer))?.state === 'placed',
      );
      // A call about a placed order shows in that order's timeline.
      // an order over HL7 carries no sender token: admin cancels it through the API
      const cancel = await fetch(`${adapter.httpUrl}/api/orders/${order.id}/cancel`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.admin}`,
          'content-type': 'application/json',
        },
        body: JSON.stringify({ reason: 'wiring test' }),
      });
      expect(cancel.status).toBe(202);
      const rows = await waitFor('the cancel call in the timeline', async () => {
        const r = await db.query(
          `SELECT detail FROM audit_events WHERE kind = 'upstream.call' AND order_id = $1 AND detail->>'operation' = 'cancel-order'`,
          [order.id],
        );
        return r.rows.length > 0 ? r.rows : undefined;
      });
      expect(rows[0].detail).toMatchObject({ endpoint: '/cancel-order', status: 200 });
      expect(rows.length).toBeGreaterThanOrEqual(1);
      expect(health.checks.upstream).toMatchObject({
        status: 'up',
        deprecation: 'v1 will be deprecated on 2027-03-01',
      });
    } else {
      expect(health.status).toBe('degraded');
      expect(health.checks.upstream).toMatchObject({
        status: 'retired',
        migrationGuide: expect.stringMatching(/^https:\/\//),
      });
      // Nothing is wrong with the order: it waits for the migration instead of failing.
      expect((await orderByPlacer(db, spec.placer))?.state).toBe('received');
    }
  });
});
