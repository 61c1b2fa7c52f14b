import { mkdtempSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { freePort } from '../../src/persistence/embedded-postgres';
import { startSandbox } from '../../src/sandbox/sandbox';
import { spawnAdapter, waitHealthy } from '../helpers/adapter-process';
import { createEmptyDatabase } from '../helpers/database';
import { writeSiteConfig } from '../e2e/e2e-support';

const TOKENS = 'admin:drain-test-admin-token-1,sender:drain-test-sender-token1';

/** One MLLP frame out, its ACK's MSA-1 back. */
function sendMllp(port: number, message: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () =>
      socket.write(
        Buffer.concat([Buffer.from([0x0b]), Buffer.from(message), Buffer.from([0x1c, 0x0d])]),
      ),
    );
    let reply = '';
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString('latin1');
      if (reply.includes('\x1c')) {
        socket.end();
        resolve(/MSA\|(\w+)/.exec(reply)?.[1] ?? reply);
      }
    });
    socket.on('error', reject);
  });
}

describe('SIGTERM while an upstream call is under way', () => {
  it('a job whose create answer is lost finds its order with a working client; the order is placed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'drain-'));
    // The upstream creates the order after 3 s and its answer is lost on the way (a dropped
    // connection): the client then looks the order up by our correlation_id (GET /list-orders).
    const sandbox = await startSandbox({
      port: 0,
      host: '127.0.0.1',
      dataDir: join(dir, 'sandbox'),
      faults: {
        seed: 1,
        endpoints: { 'POST /new-order': { slowMs: 3_000, slowShare: 1, dropAfter: 1 } },
      },
    });
    const db = await createEmptyDatabase();
    const [httpPort, mllpPort] = [await freePort(), await freePort()];
    const proc = spawnAdapter({
      DATABASE_URL: db.url,
      IMAGING_BASE_URL: sandbox.baseUrl,
      IMAGING_CLIENT_ID: 'sandbox-client',
      IMAGING_CLIENT_SECRET: 'sandbox-secret',
      IMAGING_ORGANIZATION_ID: 'sandbox-org',
      CONFIG_FILE: writeSiteConfig(dir),
      DATA_DIR: join(dir, 'data'),
      API_TOKENS: TOKENS,
      HTTP_PORT: String(httpPort),
      MLLP_PORT: String(mllpPort),
      HL7_PROCESSING_IDS: 'P,T',
    });
    const client = new Client({ connectionString: db.url });
    try {
      await waitHealthy(`http://127.0.0.1:${httpPort}`, 60_000, proc);
      const order = readFileSync('scripts/samples/orm-o01.hl7', 'utf8').replace(/\r?\n/g, '\r');
      expect(await sendMllp(mllpPort, order)).toBe('AA');
      await client.connect();
      // The placing job has started (place_attempted_at): its POST /new-order is under way.
      const started = Date.now();
      for (;;) {
        const { rows } = await client.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM orders WHERE place_attempted_at IS NOT NULL`,
        );
        if (rows[0]!.n > 0) break;
        if (Date.now() - started > 30_000) throw new Error(`not placing:\n${proc.output()}`);
        await sleep(100);
      }
      await sleep(1_000);
      proc.child.kill('SIGTERM');
      const { code } = await proc.exited;
      // Before, Nest's shutdown closed the upstream client before the job queue was stopped:
      // the look-up after the lost answer ran against the closed client (UND_ERR_DESTROYED),
      // 6 times over seconds, and the job failed with the order created upstream but not
      // recorded as placed.
      expect(proc.output()).not.toContain('UND_ERR_DESTROYED');
      expect(code).toBe(0);
      const { rows } = await client.query<{ state: string; placed: boolean }>(
        `SELECT state, upstream_order_id IS NOT NULL AS placed FROM orders`,
      );
      expect(rows).toEqual([{ state: 'placed', placed: true }]);
    } finally {
      if (proc.child.exitCode === null) proc.child.kill('SIGKILL');
      await proc.exited;
      await client.end().catch(() => undefined);
      await db.drop();
      await sandbox.close();
    }
  }, 180_000);
});
