import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';
import { ackSummary } from '../helpers/hl7-fixtures';
import { startFaultyProxy } from '../imaging-client/faulty-proxy';
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
 * The upstream's error body is not specified (contract, "Errors"); a service that fails while
 * handling an order may echo what it was sent, in any form. A retried answer (5xx) ends in a
 * job failure, and the job runner logs "Failed task … with error '…'" with the error's
 * message: that message must name the status and attempts, never the upstream's words, so
 * the log holds no patient data whatever the upstream writes.
 */
describe('hostile: an upstream failure that echoes the patient, retried', () => {
  const ECHO = {
    error: 'internal_error',
    // Set by the case: the patient echoed as sent (PN), as prose, and the identifiers.
    message: '',
  };
  let sandbox: RunningSandbox;
  let proxy: Awaited<ReturnType<typeof startFaultyProxy>>;
  let harness: MllpHarness;
  let logs = '';
  let dir: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'phi-echo-logs-'));
    sandbox = await startSandbox({ port: 0, host: '127.0.0.1', clock: 'manual', dataDir: dir });
    proxy = await startFaultyProxy(sandbox.baseUrl, (_method, path) =>
      path === '/new-order' && ECHO.message ? { reply: 500, body: JSON.stringify(ECHO) } : 'pass',
    );
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        logs += chunk.toString();
        done();
      },
    });
    harness = await startMllpHarness(
      {
        JOBS_ENABLED: 'true',
        IMAGING_BASE_URL: proxy.baseUrl,
        ...SANDBOX_CLIENT,
        CONFIG_FILE: writeSiteConfig(dir),
        POLL_INTERVAL_SECONDS: '3600',
      },
      { sink, level: 'debug' },
    );
  });
  afterAll(async () => {
    await harness?.close();
    await proxy?.close();
    await sandbox?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the failed create job is logged with its code, never with the patient the upstream quoted', async () => {
    const { mllp, db, adapter } = harness;
    const spec = newOrderSpec();
    const quoted = [
      spec.patientId,
      'MUSTERMANN',
      'Mustermann',
      'ERIKA',
      'Erika',
      '1964-08-12',
      '19640812',
    ];
    ECHO.message = `cannot process MUSTERMANN^ERIKA (Erika Mustermann, ${spec.patientId}, born 1964-08-12)`;
    expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
    const { id } = (await waitFor('the order', () => orderByPlacer(db, spec.placer))) as {
      id: string;
    };
    // The create was tried and failed (a job failure the runner logs).
    await waitFor('the failed create logged', async () => /Failed task/.test(logs), 30_000);
    expect(logs).toMatch(/Failed task[^\n]*status 500/);
    for (const phi of quoted) expect(logs).not.toContain(phi);
    // The analyst still has the upstream's code on the order's timeline.
    const rows = (await adapter.db.dataSource.query(
      `SELECT summary FROM audit_events WHERE order_id = $1 ORDER BY id`,
      [id],
    )) as Array<{ summary: string }>;
    expect(rows.map((r) => r.summary).join('\n')).toMatch(/not placed upstream yet/);
  });
});
