import { type BrowserContext, chromium } from 'playwright-core';

/** Debian's Chromium (apt package `chromium`, installed by .ci/run); never a downloaded build. */
export const CHROMIUM_PATH = '/usr/bin/chromium';

/**
 * Headless Chromium with its own profile folder, for the page suites. The flags keep it from
 * reaching for the network at start (this machine has none but loopback) and let it run as root.
 */
export function launchChromium(userDataDir: string): Promise<BrowserContext> {
  return chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1440, height: 1000 },
  });
}
