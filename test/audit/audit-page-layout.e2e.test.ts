import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { MllpClient } from '../../src/hl7';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { launchChromium } from '../helpers/chromium';
import { ackSummary, hl7Fixture } from '../helpers/hl7-fixtures';

/**
 * The audit page drawn by headless Chromium for an order whose identifiers are as long as the
 * front door takes them (199 characters, no space: a RIS that pads, or a number built from a
 * chain of ids). The page must stay as wide as the window: a value that does not fit wraps.
 */
describe('audit page layout with long unbroken identifiers (headless Chromium)', () => {
  let adapter: TestAdapter;
  let context: BrowserContext;
  let page: Page;
  let userDataDir: string;
  const accession = `ACC-${'7'.repeat(195)}`;
  const placer = `PLC-${'4'.repeat(195)}`;

  beforeAll(async () => {
    adapter = await startTestAdapter();
    // the IHE SWF ORM^O01 with its accession (OBR-18) and placer number (ORC-2, OBR-2) at the
    // longest the front door accepts
    const raw = hl7Fixture('orm-o01-v231-ihe-swf-zds')
      .toString('latin1')
      .replaceAll('ACC-20240318-0042', accession)
      .replaceAll('PLC-100234', placer);
    const mllp = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      expect(ackSummary(await mllp.send(Buffer.from(raw, 'latin1'))).code).toBe('AA');
    } finally {
      await mllp.close();
    }
    userDataDir = mkdtempSync(join(tmpdir(), 'audit-layout-chromium-'));
    context = await launchChromium(userDataDir);
    page = context.pages()[0] ?? (await context.newPage());
    await page.goto(`${adapter.httpUrl}/audit`);
    await page.getByLabel('API token').fill(TEST_TOKENS.analyst);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${adapter.httpUrl}/audit`);
  });

  afterAll(async () => {
    await context?.close();
    if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
    await adapter?.close();
  });

  /** How far the page reaches past the window's right edge (0: nothing to scroll sideways). */
  const overflow = () =>
    page.evaluate<number>('document.documentElement.scrollWidth - window.innerWidth');

  it('the order list and the order page stay within the window; the identifiers wrap, whole', async () => {
    await page.goto(`${adapter.httpUrl}/audit/orders?placer=${placer}`);
    const row = page.locator('main table tbody tr');
    expect(await row.count()).toBe(1);
    // before: the accession cell stretched the table to 2,000 px, past the card and the window
    expect(await overflow()).toBe(0);
    expect((await row.innerText()).replace(/\s+/g, '')).toContain(accession);
    expect((await row.innerText()).replace(/\s+/g, '')).toContain(placer);

    await row.getByRole('link').first().click();
    await page.waitForURL(/\/audit\/orders\/[0-9a-f-]{36}$/);
    // before: the heading "Order <accession>" drew the page 4,000 px wide
    const heading = page.getByRole('heading', { level: 1 });
    expect((await heading.innerText()).replace(/\s+/g, '')).toContain(accession);
    expect(await overflow()).toBe(0);
  });
});
