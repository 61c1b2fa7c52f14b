import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { MllpClient } from '../../src/hl7';
import { freePort } from '../../src/persistence/embedded-postgres';
import { spawnAdapter, waitHealthy, type AdapterProcess } from '../helpers/adapter-process';
import { createTestDatabase, type TestDatabase } from '../helpers/database';

const TEMPLATE = readFileSync(
  join(__dirname, '..', 'fixtures', 'hl7', 'orm-o01-v231-ihe-swf-zds.hl7'),
  'latin1',
);

function message(i: number): Buffer {
  return Buffer.from(
    TEMPLATE.replace('MSGID20240318144217', `CRASH-${i}`)
      .replace(/PLC-100234/g, `PLC-CRASH-${i}`)
      .replace(/ACC-20240318-0042/g, `ACC-CRASH-${i}`),
    'latin1',
  );
}

describe('MLLP ingest survives kill -9 (adapter as a real process)', () => {
  let db: TestDatabase;
  let env: Record<string, string>;
  let httpPort: number;
  let mllpPort: number;

  beforeAll(async () => {
    db = await createTestDatabase();
    httpPort = await freePort();
    mllpPort = await freePort();
    env = {
      DATABASE_URL: db.url,
      HTTP_PORT: String(httpPort),
      MLLP_PORT: String(mllpPort),
      HTTP_HOST: '127.0.0.1',
      MLLP_HOST: '127.0.0.1',
      API_TOKENS: 'admin:crash-test-admin-token-01',
      DATA_DIR: mkdtempSync(join(tmpdir(), 'crash-')),
      JOBS_ENABLED: 'false',
    };
  });
  afterAll(async () => {
    await db.drop();
  });

  async function start(): Promise<AdapterProcess> {
    const proc = spawnAdapter(env);
    await waitHealthy(`http://127.0.0.1:${httpPort}`, 60_000, proc);
    return proc;
  }

  it('every ACKed message exists exactly once after a crash mid-stream and a full resend', async () => {
    const total = 300;
    const acked = new Set<number>();
    const first = await start();
    // four connections stream messages; the adapter is killed while they are in flight
    const senders = Array.from({ length: 4 }, (_, c) => {
      const client = new MllpClient({ host: '127.0.0.1', port: mllpPort, responseTimeoutMs: 5000 });
      return (async () => {
        for (let i = c; i < total; i += 4) {
          try {
            const reply = await client.send(message(i));
            if (reply.toString('latin1').includes('\rMSA|AA|')) acked.add(i);
          } catch {
            break; // connection lost: the crash
          }
        }
        await client.close().catch(() => undefined);
      })();
    });
    // killed once a share is acknowledged, not after a fixed time: since the ingest fast path,
    // 300 messages can all be ACKed within the 400 ms this used to wait
    while (acked.size < 40) await new Promise((r) => setTimeout(r, 2));
    first.child.kill('SIGKILL');
    await Promise.all(senders);
    await first.exited;
    expect(acked.size).toBeGreaterThan(0);
    expect(acked.size).toBeLessThan(total);

    // restart; the sender resends everything (a real engine resends what was not ACKed, and
    // sometimes more): every message ends up exactly once, resends get the original ACK
    const second = await start();
    const client = new MllpClient({ host: '127.0.0.1', port: mllpPort, responseTimeoutMs: 10_000 });
    try {
      for (let i = 0; i < total; i++) {
        const reply = (await client.send(message(i))).toString('latin1');
        expect(reply).toContain('\rMSA|AA|');
      }
    } finally {
      await client.close();
      second.child.kill('SIGTERM');
      await second.exited;
    }
    const pg = new Client({ connectionString: db.url });
    await pg.connect();
    try {
      const { rows } = await pg.query<{ placer: string; n: string }>(
        `SELECT placer_order_number AS placer, count(*) AS n FROM orders WHERE placer_order_number LIKE 'PLC-CRASH-%' GROUP BY 1`,
      );
      expect(rows).toHaveLength(total);
      expect(rows.every((r) => r.n === '1')).toBe(true);
      const accepted = await pg.query(
        `SELECT count(*)::int AS n FROM inbound_messages WHERE message_control_id LIKE 'CRASH-%' AND outcome = 'accepted'`,
      );
      expect(accepted.rows[0].n).toBe(total);
      const dupes = await pg.query(
        `SELECT count(*)::int AS n FROM inbound_messages WHERE message_control_id LIKE 'CRASH-%' AND outcome = 'duplicate'`,
      );
      // at least every message ACKed before the crash was answered as a resend
      expect(dupes.rows[0].n).toBeGreaterThanOrEqual(acked.size);
    } finally {
      await pg.end();
    }
  }, 120_000);
});
