import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import type { BrowserContext, Page } from 'playwright-core';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { addDeadLetter, orderIdByAccession, SEEDED, sendFixtures } from './audit-seed';
import { launchChromium } from '../helpers/chromium';

/** The Debian package's browser, never a downloaded one; no network beyond loopback. */
const ARTIFACTS = join(__dirname, '..', '..', 'test-artifacts', 'audit');

describe('audit page end to end (headless Chromium against the running adapter)', () => {
  let adapter: TestAdapter;
  let db: Client;
  let context: BrowserContext;
  let page: Page;
  let userDataDir: string;
  let swfOrderId: string;
  let deadLetterId: string;

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    // A RIS configured (nothing listens on port 9), so that its dead letter can be replayed;
    // no outbound workers, so that the replayed row stays as the replay left it.
    adapter = await startTestAdapter({
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: '9',
      OUTBOUND_ENABLED: 'false',
    });
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
    await sendFixtures(adapter);
    swfOrderId = await orderIdByAccession(db, SEEDED.swf.accession);
    deadLetterId = await addDeadLetter(db, swfOrderId);
    userDataDir = mkdtempSync(join(tmpdir(), 'audit-chromium-'));
    context = await launchChromium(userDataDir);
    page = context.pages()[0] ?? (await context.newPage());
  });

  afterAll(async () => {
    await context?.close();
    if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
    await db?.end();
    await adapter?.close();
  });

  async function signIn(token: string): Promise<void> {
    const res = await page.goto(`${adapter.httpUrl}/audit`);
    expect(res?.status()).toBe(401);
    await expect(
      page.getByRole('heading', { name: 'Sign in to the audit log' }).count(),
    ).resolves.toBe(1);
    if (token === TEST_TOKENS.analyst) {
      await page.screenshot({ path: join(ARTIFACTS, 'sign-in.png') });
    }
    await page.getByLabel('API token').fill(token);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${adapter.httpUrl}/audit`);
  }

  it('an analyst signs in, finds an order by accession, opens its timeline and sees a field lineage', async () => {
    await signIn(TEST_TOKENS.analyst);
    const cookies = await context.cookies(adapter.httpUrl + '/audit');
    expect(cookies).toEqual([
      expect.objectContaining({
        name: 'audit_session',
        path: '/audit',
        httpOnly: true,
        sameSite: 'Strict',
      }),
    ]);
    // /audit opens on the dashboard; the order list is one link away
    expect(await page.getByRole('heading', { name: /^Dashboard/, level: 1 }).count()).toBe(1);
    await page.getByRole('link', { name: 'Orders', exact: true }).click();
    await page.waitForURL(`${adapter.httpUrl}/audit/orders`);
    expect(await page.getByRole('heading', { name: 'Orders', level: 1 }).count()).toBe(1);

    // keyboard: the first Tab reaches the skip link, and the filters are labelled fields
    await page.keyboard.press('Tab');
    expect(await page.locator(':focus').textContent()).toBe('Skip to content');
    await page.getByLabel('Accession number').fill(SEEDED.swf.accession);
    await page.getByLabel('Accession number').press('Enter');
    await page.waitForURL(/accession=/);
    const rows = page.locator('main table tbody tr');
    expect(await rows.count()).toBe(1);
    expect(await rows.first().textContent()).toContain('***11'); // patient id masked
    await page.screenshot({ path: join(ARTIFACTS, 'order-list.png'), fullPage: true });

    await page.getByRole('link', { name: SEEDED.swf.accession }).click();
    await page.waitForURL(`${adapter.httpUrl}/audit/orders/${swfOrderId}`);
    const timeline = page.locator('ol.timeline');
    for (const kind of [
      'inbound.received',
      'order.created',
      'mapping.applied',
      'outbound.dead-letter',
    ]) {
      expect(await timeline.getByText(kind, { exact: true }).count()).toBeGreaterThanOrEqual(1);
    }
    const lineageRow = page.locator('table.lineage tbody tr', { hasText: 'accessionNumber' });
    const cells = (await lineageRow.locator('td').allInnerTexts()).map((t) => t.trim());
    expect(cells).toEqual(['accessionNumber\nhl7.order.accession', 'OBR-18', SEEDED.swf.accession]);

    // the raw HL7 beside it, field positions on hover, PHI masked
    const pid5 = page.locator('.hl7 .f[data-pos^="PID-5 "]').first();
    expect(await pid5.getAttribute('data-pos')).toBe('PID-5 · Patient Name');
    expect(await pid5.textContent()).toBe('S***^A***^M***^^^^L');
    await pid5.hover();
    const body = await page.locator('main').innerText();
    for (const phi of ['SCHMIDT', '19560214', 'PAT-4711']) expect(body).not.toContain(phi);
    expect(await page.getByRole('button', { name: 'Reveal PHI' }).count()).toBe(0); // analysts cannot
    await page.screenshot({ path: join(ARTIFACTS, 'order-timeline.png'), fullPage: true });

    // the mapping tables are readable
    await page.getByRole('link', { name: 'Mapping tables' }).click();
    expect(await page.getByRole('heading', { name: /HL7 v2 order → OrderRequest/ }).count()).toBe(
      1,
    );
    expect(await page.getByText('hl7.order.accession', { exact: true }).count()).toBe(1);
    await page.screenshot({ path: join(ARTIFACTS, 'mappings.png') });

    // an analyst sees dead letters but has no replay action
    await page.getByRole('link', { name: 'Dead letters' }).click();
    expect(await page.locator('main table tbody tr').count()).toBe(1);
    expect(await page.getByRole('link', { name: 'Replay…' }).count()).toBe(0);

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(`${adapter.httpUrl}/audit`);
    expect(await page.getByRole('heading', { name: 'Sign in to the audit log' }).count()).toBe(1);
    expect(await context.cookies(adapter.httpUrl + '/audit')).toEqual([]);
  });

  it('refuses a form post without the session CSRF token', async () => {
    await signIn(TEST_TOKENS.admin);
    const [cookie] = await context.cookies(adapter.httpUrl + '/audit');
    const res = await fetch(`${adapter.httpUrl}/audit/dead-letters/${deadLetterId}/replay`, {
      method: 'POST',
      headers: {
        cookie: `${cookie!.name}=${cookie!.value}`,
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: new URLSearchParams({ reason: 'forged', confirm: 'yes' }).toString(),
      redirect: 'manual',
    });
    expect(res.status).toBe(403);
    const { rows } = await db.query(`SELECT status FROM outbox WHERE id = $1`, [deadLetterId]);
    expect(rows[0].status).toBe('dead');
    // and the session cookie is no credential for the REST API
    const api = await fetch(`${adapter.httpUrl}/api/audit/orders`, {
      headers: { cookie: `${cookie!.name}=${cookie!.value}` },
    });
    expect(api.status).toBe(401);
  });

  it('an admin reveals PHI with a reason and replays a dead letter with confirmation and a reason', async () => {
    // still signed in as admin (previous test)
    await page.goto(`${adapter.httpUrl}/audit/orders/${swfOrderId}`);
    expect(await page.locator('main').innerText()).not.toContain('SCHMIDT');
    await page.getByLabel('Reason to reveal').fill('clinician call, ticket 4471');
    await page.getByRole('button', { name: 'Reveal PHI' }).click();
    // a POST: the reason is in the form body, not in the URL (nor the browser's history)
    await page.waitForLoadState();
    expect(page.url()).toBe(`${adapter.httpUrl}/audit/orders/${swfOrderId}`);
    expect(await page.locator('.hl7').first().innerText()).toContain('SCHMIDT^ANNA^MARIA');
    const reveal = await db.query(
      `SELECT actor, detail->>'reason' AS reason FROM audit_events WHERE kind = 'phi.reveal'`,
    );
    expect(reveal.rows).toEqual([
      { actor: expect.stringMatching(/^admin#/), reason: 'clinician call, ticket 4471' },
    ]);

    await page.getByRole('link', { name: 'Dead letters' }).click();
    await page.screenshot({ path: join(ARTIFACTS, 'dead-letters.png'), fullPage: true });
    await page.getByRole('link', { name: 'Replay…' }).click();
    await page.waitForURL(`${adapter.httpUrl}/audit/dead-letters/${deadLetterId}/replay`);
    await page.getByLabel('Reason').fill('RIS interface back after maintenance');
    // the browser enforces the confirmation box before anything is sent
    await page.getByRole('button', { name: 'Replay now' }).click();
    expect(page.url()).toBe(`${adapter.httpUrl}/audit/dead-letters/${deadLetterId}/replay`);
    await page.screenshot({ path: join(ARTIFACTS, 'replay-confirm.png'), fullPage: true });
    await page.getByLabel('I confirm that this document should be sent again').check();
    await page.getByRole('button', { name: 'Replay now' }).click();
    await page.waitForURL(/\/audit\/dead-letters\?replayed=/);
    expect(await page.getByRole('status').innerText()).toContain(
      `Outbound document ${deadLetterId} is queued again`,
    );
    await page.screenshot({
      path: join(ARTIFACTS, 'dead-letters-after-replay.png'),
      fullPage: true,
    });

    const { rows } = await db.query(`SELECT status, attempts FROM outbox WHERE id = $1`, [
      deadLetterId,
    ]);
    expect(rows[0]).toEqual({ status: 'pending', attempts: 0 });
    const replay = await db.query(
      `SELECT actor, detail->>'reason' AS reason FROM audit_events WHERE kind = 'outbound.replay'`,
    );
    expect(replay.rows).toEqual([
      { actor: expect.stringMatching(/^admin#/), reason: 'RIS interface back after maintenance' },
    ]);
  });

  it('a sender token cannot sign in', async () => {
    await context.clearCookies();
    await page.goto(`${adapter.httpUrl}/audit`);
    await page.getByLabel('API token').fill(TEST_TOKENS.sender);
    await page.getByRole('button', { name: 'Sign in' }).click();
    expect(await page.getByRole('alert').innerText()).toContain('Sender tokens have no access');
    expect(await context.cookies(adapter.httpUrl + '/audit')).toEqual([]);
  });

  it('a time range given in any accepted form is shown in the fields it filters by, and kept by the next Search', async () => {
    await context.clearCookies();
    await signIn(TEST_TOKENS.analyst);
    const { rows } = await db.query<{ created: Date }>(
      `SELECT created_at AS created FROM orders WHERE id = $1`,
      [swfOrderId],
    );
    const created = rows[0]!.created;
    const minute = new Date(Math.floor(created.getTime() / 60_000) * 60_000);
    const utc = minute.toISOString().slice(0, 16); // what the field holds: UTC, to the minute
    const berlin = new Date(minute.getTime() + 3_600_000).toISOString().slice(0, 16) + '+01:00';
    // the forms the search takes (a bookmark, a link from a ticket, the API's habit): before,
    // each was applied but the field showed nothing, and the next Search dropped the range
    for (const given of [`${utc}Z`, berlin, `${utc}:00.000Z`]) {
      await page.goto(
        `${adapter.httpUrl}/audit/orders?accession=${SEEDED.swf.accession}&from=${encodeURIComponent(given)}`,
      );
      expect({ given, field: await page.getByLabel('Created from (UTC)').inputValue() }).toEqual({
        given,
        field: utc,
      });
      expect(await page.locator('main table tbody tr').count()).toBe(1);
      await page.getByRole('button', { name: 'Search' }).click();
      await page.waitForURL(/from=/);
      expect(new URL(page.url()).searchParams.get('from')).toBe(utc);
      expect(await page.locator('main table tbody tr').count()).toBe(1);
    }
    // a day is midnight UTC
    await page.goto(`${adapter.httpUrl}/audit/messages?from=${utc.slice(0, 10)}`);
    expect(await page.getByLabel('Received from (UTC)').inputValue()).toBe(
      `${utc.slice(0, 10)}T00:00`,
    );
  });
});
