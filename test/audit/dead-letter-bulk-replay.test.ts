import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { launchChromium } from '../helpers/chromium';
import { DESTINATIONS } from '../../src/outbound/outbound.settings';
import { OutboxOrderEvents } from '../../src/outbound/outbox-order-events';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startAckingRis, type TestRis } from '../outbound/outbound-peers';
import { playStatus, seedOrder, testOutboundSettings } from '../outbound/outbound-seed';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

jest.setTimeout(120_000);

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, ms = 30_000) {
  const end = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Bulk replay of dead letters through the running adapter: the RIS refuses every ORU (AR) while
 * `refusing`, so five orders' ORUs die; the interface is fixed and an admin replays them by
 * destination, three then two, through POST /api/audit/dead-letters/replay. Real PostgreSQL,
 * a real MLLP RIS on loopback, the adapter's own outbox workers.
 */
describe('bulk replay of dead letters (real adapter, real RIS over MLLP)', () => {
  let ris: TestRis;
  let adapter: TestAdapter;
  let db: Client;
  let refusing = true;
  const orderIds: string[] = [];
  let events: OutboxOrderEvents;

  const post = async (path: string, body: unknown, role: keyof typeof TEST_TOKENS = 'admin') => {
    const res = await fetch(`${adapter.httpUrl}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS[role]}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? (JSON.parse(text) as Json) : undefined };
  };
  const oruStates = async () =>
    (
      await db.query<{ status: string }>(
        `SELECT status FROM outbox WHERE kind = 'hl7-oru' AND order_id = ANY($1::uuid[]) ORDER BY id`,
        [orderIds],
      )
    ).rows.map((r) => r.status);

  beforeAll(async () => {
    ris = await startAckingRis(() => (refusing ? 'AR' : 'AA'));
    adapter = await startTestAdapter({
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: String(ris.port),
      OUTBOUND_POLL_MS: '50',
      POLL_INTERVAL_SECONDS: '3600',
    });
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
    events = new OutboxOrderEvents(testOutboundSettings({ destinations: [DESTINATIONS.hl7] }));
    for (let i = 0; i < 5; i++) {
      const order = await seedOrder(adapter.db.dataSource, {
        request: { accessionNumber: `ACC-BULK-${i}` },
      });
      orderIds.push(order.id);
      await playStatus(adapter.db.dataSource, events, order, 'CANCELLED');
    }
    await waitFor('five dead ORUs', async () => {
      const s = await oruStates();
      return s.length === 5 && s.every((x) => x === 'dead');
    });
    // and a dead letter to a destination this adapter no longer delivers to (the EHR)
    await db.query(
      `INSERT INTO outbox (order_id, destination, kind, dedupe_key, payload, status, attempts, last_error, dead_xid)
       VALUES ($1, 'ehr-fhir', 'fhir-task', 'task:bulk', '{"resourceType":"Task"}', 'dead', 8, 'HTTP 503', pg_current_xact_id())`,
      [orderIds[0]],
    );
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ris?.close();
  });

  it('refuses analysts, a request without a filter or reason, and an unconfigured destination', async () => {
    expect(
      (
        await post(
          '/api/audit/dead-letters/replay',
          { reason: 'fixed', destination: 'ris-hl7' },
          'analyst',
        )
      ).status,
    ).toBe(403);
    const none = await post('/api/audit/dead-letters/replay', { reason: 'RIS fixed' });
    expect(none.status).toBe(400);
    expect(none.body.detail).toMatch(/destination, error, from or to/);
    expect((await post('/api/audit/dead-letters/replay', { destination: 'ris-hl7' })).status).toBe(
      400,
    );
    expect(
      (
        await post('/api/audit/dead-letters/replay', {
          reason: 'x fixed',
          destination: 'ris-hl7',
          limit: 101,
        })
      ).status,
    ).toBe(400);
    const ehr = await post('/api/audit/dead-letters/replay', {
      reason: 'EHR back',
      destination: 'ehr-fhir',
    });
    expect(ehr.status).toBe(409);
    expect(ehr.body.detail).toMatch(/FHIR_SERVER_URL/);
    // a name no destination has (a typo, or a JavaScript built-in such as __proto__, which read
    // `[object Object]` as its setting) is a bad request naming the destinations there are
    for (const destination of ['ris_hl7', '__proto__', 'constructor']) {
      const unknown = await post('/api/audit/dead-letters/replay', {
        reason: 'RIS fixed',
        destination,
        dryRun: true,
      });
      expect(unknown.status).toBe(400);
      expect(unknown.body.detail).toMatch(/destination: one of ehr-fhir, ris-hl7, pacs-dicomweb/);
      expect(unknown.body.detail).not.toMatch(/object/);
    }
  });

  it('a dry run counts and lists, and changes nothing; without a destination it says which it would refuse', async () => {
    const dry = await post('/api/audit/dead-letters/replay', {
      reason: 'RIS interface fixed',
      from: new Date(Date.now() - 3600_000).toISOString(),
      dryRun: true,
    });
    expect(dry.status).toBe(200);
    expect(dry.body).toMatchObject({ dryRun: true, matched: 6, remaining: 6 });
    const outcomes = (dry.body.letters as Array<{ destination: string; outcome: string }>).map(
      (l) => `${l.destination}:${l.outcome}`,
    );
    expect(outcomes.filter((o) => o === 'ris-hl7:would-replay')).toHaveLength(5);
    expect(outcomes).toContain('ehr-fhir:refused');
    expect(await oruStates()).toEqual(['dead', 'dead', 'dead', 'dead', 'dead']);
    const byError = await post('/api/audit/dead-letters/replay', {
      reason: 'EHR back',
      error: '503',
      dryRun: true,
    });
    expect(byError.body.matched).toBe(1);
  });

  it('replays at most limit a request, each audited with who replayed it, and the RIS receives them', async () => {
    refusing = false;
    const before = ris.received.length;
    const first = await post('/api/audit/dead-letters/replay', {
      reason: 'RIS interface fixed, ticket 4471',
      destination: 'ris-hl7',
      limit: 3,
    });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ dryRun: false, matched: 5, remaining: 2 });
    expect(first.body.letters.map((l: { outcome: string }) => l.outcome)).toEqual([
      'queued',
      'queued',
      'queued',
    ]);
    const second = await post('/api/audit/dead-letters/replay', {
      reason: 'RIS interface fixed, ticket 4471',
      destination: 'ris-hl7',
    });
    expect(second.body).toMatchObject({ matched: 2, remaining: 0 });
    await waitFor('every replayed ORU delivered', async () =>
      (await oruStates()).every((s) => s === 'delivered'),
    );
    expect(ris.received.length - before).toBe(5);
    const { rows } = await db.query(
      `SELECT actor, detail FROM audit_events WHERE kind = 'outbound.replay' ORDER BY id`,
    );
    expect(rows).toHaveLength(5);
    for (const r of rows) {
      expect(r.actor).toMatch(/^admin#[0-9a-f]{8}$/);
      expect(r.detail).toMatchObject({
        reason: 'RIS interface fixed, ticket 4471',
        destination: 'ris-hl7',
        bulk: { destination: 'ris-hl7' },
      });
    }
    // nothing left to replay for the RIS; the EHR's letter is still dead
    const again = await post('/api/audit/dead-letters/replay', {
      reason: 'RIS interface fixed',
      destination: 'ris-hl7',
    });
    expect(again.body).toMatchObject({ matched: 0, letters: [], remaining: 0 });
  });

  it('an admin replays many from the page: counts first, then a reason and a ticked confirmation (headless Chromium)', async () => {
    refusing = true;
    for (let i = 0; i < 2; i++) {
      const order = await seedOrder(adapter.db.dataSource, {
        request: { accessionNumber: `ACC-PAGE-${i}` },
      });
      orderIds.push(order.id);
      await playStatus(adapter.db.dataSource, events, order, 'CANCELLED');
    }
    await waitFor('two more dead ORUs', async () =>
      (await oruStates()).filter((x) => x === 'dead').length === 2 ? true : undefined,
    );
    refusing = false;
    const userDataDir = mkdtempSync(join(tmpdir(), 'bulk-replay-chromium-'));
    const context = await launchChromium(userDataDir);
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      await page.goto(`${adapter.httpUrl}/audit`);
      await page.getByLabel('API token').fill(TEST_TOKENS.admin);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL(`${adapter.httpUrl}/audit`);
      await page.goto(`${adapter.httpUrl}/audit/dead-letters`);
      await page.getByRole('link', { name: 'Replay many…' }).click();
      await page.waitForURL(`${adapter.httpUrl}/audit/dead-letters/replay`);
      await page.getByLabel('Destination (e.g. ris-hl7)').fill('ris-hl7');
      await page.getByRole('button', { name: 'Count' }).click();
      await page.waitForURL(/\/audit\/dead-letters\/replay\?/);
      expect(await page.getByRole('status').innerText()).toContain('2 dead letters match');
      expect(await oruStates()).toContain('dead');
      // the browser enforces the reason and the confirmation before anything is sent
      await page.getByRole('button', { name: 'Replay these' }).click();
      expect(page.url()).toMatch(/\?destination=ris-hl7/);
      await page.getByLabel('Reason for the replay').fill('RIS back after maintenance');
      await page.getByLabel('I confirm that these documents should be sent again').check();
      await page.getByRole('button', { name: 'Replay these' }).click();
      await page.waitForLoadState();
      expect(await page.getByRole('status').innerText()).toContain(
        '2 dead letters are queued again',
      );
    } finally {
      await context.close();
      rmSync(userDataDir, { recursive: true, force: true });
    }
    await waitFor('the page-replayed ORUs delivered', async () =>
      (await oruStates()).every((x) => x === 'delivered'),
    );
    const { rows } = await db.query(
      `SELECT count(*)::int AS n FROM audit_events WHERE kind = 'outbound.replay' AND detail->>'reason' = 'RIS back after maintenance'`,
    );
    expect(rows[0].n).toBe(2);
  });
});
