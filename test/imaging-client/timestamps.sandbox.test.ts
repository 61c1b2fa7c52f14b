import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { startFaultyProxy } from './faulty-proxy';
import { buildClient, startTestSandbox } from './sandbox-harness';

const ROOT = join(__dirname, '..', '..');

let peer: Awaited<ReturnType<typeof startTestSandbox>>;
beforeAll(async () => {
  peer = await startTestSandbox();
});
afterAll(async () => {
  await peer?.close();
});

/** Runs create-order.tz-child.ts in a process on the time zone `tz`; its JSON answer. */
function createInZone(
  tz: string,
  baseUrl: string,
  correlationId: string,
): Promise<{ orderId: string; recovered: boolean }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        'scripts/with-node.cjs',
        '-r',
        '@swc-node/register',
        'test/imaging-client/create-order.tz-child.ts',
        baseUrl,
        correlationId,
      ],
      { cwd: ROOT, env: { ...process.env, TZ: tz }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out.trim())) : reject(new Error(`child ${code}: ${err}`)),
    );
  });
}

describe('upstream timestamps: the contract names no time zone', () => {
  it('finds its own lost order on a server in Berlin when the upstream writes created_at without an offset', async () => {
    // The first create's answer is lost after the upstream made the order; every list names
    // created_at in UTC but without the `Z` (`2026-11-28T13:10:00.000`), as an upstream on UTC
    // that prints its times naively would. Read as Berlin's local time it was an hour earlier
    // than the create, outside the lookback, and a second order was made for the same request.
    let creates = 0;
    const proxy = await startFaultyProxy(peer.sandbox.baseUrl, (method, path) => {
      if (method === 'POST' && path === '/new-order' && creates++ === 0) return 'drop-after';
      if (method === 'GET' && path === '/list-orders')
        return {
          rewrite: (body) =>
            body.toString('utf8').replace(/"(created_at|updated_at)":"([^"]+)Z"/g, '"$1":"$2"'),
        };
      return 'pass';
    });
    const reader = buildClient(peer.sandbox.baseUrl);
    try {
      const correlationId = randomUUID();
      const created = await createInZone('Europe/Berlin', proxy.baseUrl, correlationId);
      const ours: string[] = [];
      for (const order of await reader.client.listOrders()) {
        const { metadata } = await reader.client.getMetadata({ orderId: order.orderId });
        if (metadata.correlation_id === correlationId) ours.push(order.orderId);
      }
      expect(ours).toEqual([created.orderId]);
      expect(created.recovered).toBe(true);
      expect(proxy.hits.filter((h) => h.method === 'POST' && h.path === '/new-order')).toHaveLength(
        1,
      );
    } finally {
      await reader.close();
      await proxy.close();
    }
  });
});
