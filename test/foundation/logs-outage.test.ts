import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  freePort,
  startEmbeddedPostgres,
  type RunningEmbeddedPostgres,
} from '../../src/persistence/embedded-postgres';
import { spawnAdapter, waitHealthy } from '../helpers/adapter-process';

jest.setTimeout(120_000);

/**
 * Issue #18 item 12: the log during a database outage, read from a real adapter process on a
 * PostgreSQL of the test's own that is stopped like a crash. Every line is JSON, a cause that
 * repeats is written once per interval with a count, and the last line says it stopped.
 */
describe('logs a person can read during an outage', () => {
  const dir = mkdtempSync(join(tmpdir(), 'logs-outage-'));
  let pg: RunningEmbeddedPostgres | undefined;
  let upstream: Server;

  beforeAll(async () => {
    pg = await startEmbeddedPostgres({ dataDir: join(dir, 'pg'), port: await freePort() });
    upstream = createServer((_, res) => {
      res.statusCode = 401;
      res.end();
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  });
  afterAll(async () => {
    await pg?.stop();
    await new Promise((r) => upstream.close(r));
    rmSync(dir, { recursive: true, force: true });
  });

  it('database down: JSON lines only, one "outbox claim failed" per destination per interval, a final stopped line', async () => {
    const port = await freePort();
    const proc = spawnAdapter({
      DATABASE_URL: pg!.url,
      IMAGING_BASE_URL: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`,
      IMAGING_CLIENT_ID: 'c',
      IMAGING_CLIENT_SECRET: 's',
      IMAGING_ORGANIZATION_ID: 'o',
      // two outbox destinations whose workers claim every OUTBOUND_POLL_MS
      FHIR_SERVER_URL: 'http://127.0.0.1:9/fhir',
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: '9',
      OUTBOUND_POLL_MS: '100',
      HTTP_PORT: String(port),
      MLLP_PORT: '0',
      API_TOKENS: 'admin:logs-outage-admin-token-01',
      DATA_DIR: join(dir, 'data'),
      LOG_LEVEL: 'info',
      LOG_REPEAT_SECONDS: '60',
    });
    await waitHealthy(`http://127.0.0.1:${port}`, 60_000, proc);
    const before = proc.output().length;
    await pg!.stop('immediate');
    await sleep(8_000); // ~80 claims per destination without the limit
    const during = proc.output().slice(before);
    proc.child.kill('SIGTERM');
    await proc.exited;

    const lines = proc
      .output()
      .split('\n')
      .filter((l) => l.trim() !== '');
    const parsed = lines.map((l) => {
      try {
        return JSON.parse(l) as Record<string, unknown>;
      } catch {
        throw new Error(`not a JSON line: ${l}`);
      }
    });
    expect(parsed.length).toBeGreaterThan(0);

    const claimFailures = during
      .split('\n')
      .filter((l) => l.includes('"outbox claim failed"'))
      .map((l) => JSON.parse(l) as { destination: string });
    expect(claimFailures.length).toBeGreaterThan(0); // it did fail, and said so
    const perDestination = new Map<string, number>();
    for (const l of claimFailures)
      perDestination.set(l.destination, (perDestination.get(l.destination) ?? 0) + 1);
    for (const n of perDestination.values()) expect(n).toBeLessThanOrEqual(2);
    // nothing floods: far fewer lines than the ~10 a second of before
    expect(during.split('\n').filter(Boolean).length).toBeLessThan(40);

    const last = parsed.at(-1)!;
    expect(String(last.msg)).toMatch(/^imaging-ai-adapter stopped/);
    expect(last).toMatchObject({ signal: 'SIGTERM' });
  });
});
