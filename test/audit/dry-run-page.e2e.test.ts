import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { hl7Fixture } from '../helpers/hl7-fixtures';
import { launchChromium } from '../helpers/chromium';

/** The dry-run page (issue #18 item 4) in real Chromium; screenshots in test-artifacts/dry-run. */

const ARTIFACTS = join(__dirname, '..', '..', 'test-artifacts', 'dry-run');

describe('dry-run page (headless Chromium)', () => {
  let adapter: TestAdapter;
  let context: BrowserContext;
  let page: Page;
  let userDataDir: string;

  const counts = async () =>
    (
      await adapter.dataSource.query(
        `SELECT (SELECT count(*) FROM inbound_messages)::int AS messages,
                (SELECT count(*) FROM orders)::int AS orders,
                (SELECT count(*) FROM audit_events)::int AS events`,
      )
    )[0] as Record<string, number>;

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
    userDataDir = mkdtempSync(join(tmpdir(), 'dry-run-chromium-'));
    context = await launchChromium(userDataDir);
    page = context.pages()[0] ?? (await context.newPage());
    await page.goto(`${adapter.httpUrl}/audit`);
    await page.getByLabel('API token').fill(TEST_TOKENS.analyst);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/audit/);
  });

  afterAll(async () => {
    await context?.close();
    if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
    await adapter?.close();
  });

  it('is linked from the nav; a pasted ORM^O01 shows AA, the order, lineage and metadata; nothing stored', async () => {
    const before = await counts();
    await page.getByRole('link', { name: 'Dry run', exact: true }).click();
    await page.waitForURL(/\/audit\/dry-run$/);
    const text = hl7Fixture('orm-o01-v231-ihe-swf-zds').toString('latin1').split('\r').join('\n');
    await page.getByLabel('Message').fill(text);
    await page.getByRole('button', { name: 'Dry run', exact: true }).click();
    await page.waitForLoadState();
    expect(await page.getByRole('heading', { name: /Our answer\s+AA/ }).count()).toBe(1);
    expect(await page.getByRole('region', { name: 'ACK' }).innerText()).toMatch(/MSA\|AA/);
    expect(await page.getByRole('heading', { name: /Order 1/ }).count()).toBe(1);
    expect(await page.locator('table.lineage tbody tr').count()).toBeGreaterThan(3);
    expect(await page.getByRole('heading', { name: 'Upstream metadata' }).count()).toBe(1);
    expect(await page.getByText(/Not part of a dry run: duplicate and state checks/).count()).toBe(
      1,
    );
    // the pasted message stays in the form, as pasted
    expect(await page.getByLabel('Message').inputValue()).toContain('RADIS1');
    await page.screenshot({ path: join(ARTIFACTS, 'dry-run-hl7-aa.png'), fullPage: true });

    await page.getByLabel('Message').fill('not an HL7 message');
    await page.getByRole('button', { name: 'Dry run', exact: true }).click();
    await page.waitForLoadState();
    expect(await page.getByRole('region', { name: 'ACK' }).innerText()).toMatch(/MSA\|AR/);
    expect(await page.getByRole('region', { name: 'ACK' }).innerText()).toMatch(/ERR\|/);
    await page.screenshot({ path: join(ARTIFACTS, 'dry-run-hl7-ar.png'), fullPage: true });
    expect(await counts()).toEqual(before);
  });
});
