import { connect } from 'node:net';
import { freePort } from '../../src/persistence/embedded-postgres';
import { exitWithin, spawnAdapter } from '../helpers/adapter-process';
import { createEmptyDatabase } from '../helpers/database';

const TOKENS = 'admin:timer-test-admin-token-1,sender:timer-test-sender-token1';

describe('durations longer than a timer can hold stop the start', () => {
  it('MLLP_FRAME_TIMEOUT_SECONDS=3000000 and OUTBOUND_BACKOFF_MAX_MS past 2^31-1 are refused, one line each', async () => {
    // Before, both were taken: Node runs a timer past 2^31-1 ms after 1 ms, so every MLLP
    // connection was closed 24 ms after its first byte (before any message could complete).
    const proc = spawnAdapter({
      MLLP_FRAME_TIMEOUT_SECONDS: '3000000',
      MLLP_IDLE_TIMEOUT_SECONDS: '2147484',
      OUTBOUND_BACKOFF_MAX_MS: '2592000000',
      API_TOKENS: TOKENS,
      HTTP_PORT: String(await freePort()),
      MLLP_PORT: String(await freePort()),
      DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none',
    });
    const { code } = await exitWithin(proc, 30_000);
    expect(code).toBe(2);
    expect(proc.output().trim().split('\n')).toEqual([
      'imaging-ai-adapter: MLLP_FRAME_TIMEOUT_SECONDS: must be at most 2147483 (24.8 days, the longest timer) (got "3000000")',
      'imaging-ai-adapter: MLLP_IDLE_TIMEOUT_SECONDS: must be at most 2147483 (24.8 days, the longest timer) (got "2147484")',
      'imaging-ai-adapter: OUTBOUND_BACKOFF_MAX_MS: must be at most 2147483647 (24.8 days, the longest timer) (got "2592000000")',
    ]);
  });

  it('the largest accepted MLLP_FRAME_TIMEOUT_SECONDS keeps a started frame open', async () => {
    const mllpPort = await freePort();
    const db = await createEmptyDatabase();
    const proc = spawnAdapter({
      MLLP_FRAME_TIMEOUT_SECONDS: '2147483',
      MLLP_IDLE_TIMEOUT_SECONDS: '0',
      API_TOKENS: TOKENS,
      HTTP_PORT: String(await freePort()),
      MLLP_PORT: String(mllpPort),
      DATABASE_URL: db.url,
    });
    try {
      const started = Date.now();
      let socket: ReturnType<typeof connect> | undefined;
      while (!socket && Date.now() - started < 60_000) {
        socket = await new Promise((resolve) => {
          const s = connect(mllpPort, '127.0.0.1', () => resolve(s));
          s.once('error', () => setTimeout(() => resolve(undefined), 300));
        });
        if (proc.child.exitCode !== null) throw new Error(proc.output());
      }
      const closedEarly = new Promise<boolean>((resolve) => {
        socket!.once('close', () => resolve(true));
        setTimeout(() => resolve(false), 2_000);
      });
      socket!.write('\x0bMSH|^~\\&|RADIS1|DEMOHOSP|');
      expect(await closedEarly).toBe(false);
      socket!.destroy();
    } finally {
      proc.child.kill('SIGTERM');
      await proc.exited;
      await db.drop();
    }
  }, 120_000);
});
