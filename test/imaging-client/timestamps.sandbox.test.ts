import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createMrBrainSeries, generateUid, zipEntries } from '../helpers/dicom-factory';
import { startFaultyProxy } from './faulty-proxy';
import { buildClient, startTestSandbox } from './sandbox-harness';

const ROOT = join(__dirname, '..', '..');
const MIB = 1024 * 1024;

let peer: Awaited<ReturnType<typeof startTestSandbox>>;
let dir: string;
beforeAll(async () => {
  peer = await startTestSandbox();
  dir = await mkdtemp(join(tmpdir(), 'imaging-client-tz-'));
});
afterAll(async () => {
  await peer?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

function createInZone(
  tz: string,
  baseUrl: string,
  correlationId: string,
): Promise<{ orderId: string; recovered: boolean }> {
  return inZone(tz, 'create-order.tz-child.ts', [baseUrl, correlationId]);
}

/** Runs the child script `script` in a process on the time zone `tz`; its JSON answer. */
function inZone<T>(tz: string, script: string, args: string[]): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        'scripts/with-node.cjs',
        '-r',
        '@swc-node/register',
        `test/imaging-client/${script}`,
        ...args,
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

  it('renews multipart URLs once an hour, not before every part, on a server in Berlin when expires_at names no offset', async () => {
    // A study of about 24 MiB goes up in 3 parts. The part URLs' expires_at comes without the
    // `Z`: read as Berlin's local time, URLs valid for an hour looked expired on arrival, and
    // all remaining part URLs were fetched again before the parts went (2 calls instead of 1;
    // one more for every round of parts a larger study takes).
    const studyUid = generateUid();
    const series = createMrBrainSeries({
      study: { studyInstanceUid: studyUid },
      series: { slices: 4, rows: 512, columns: 512 },
    });
    const entries = [];
    for (let i = 0, total = 0; total < 24 * MIB; i++) {
      const inst = series[i % series.length];
      entries.push({ name: `DICOM/S1/IM${String(i + 1).padStart(4, '0')}.dcm`, data: inst.bytes });
      total += inst.bytes.length;
    }
    const path = join(dir, 'study.zip');
    await writeFile(path, await zipEntries(entries.map((e) => ({ ...e, store: true }))));
    const proxy = await startFaultyProxy(peer.sandbox.baseUrl, (method, p) =>
      method === 'POST' && p === '/upload/multipart/presigned-urls'
        ? {
            rewrite: (body) =>
              body.toString('utf8').replace(/"expires_at":"([^"]+)Z"/, '"expires_at":"$1"'),
          }
        : 'pass',
    );
    const setup = buildClient(peer.sandbox.baseUrl);
    try {
      const { orderId } = await setup.client.createOrder(
        { study_uid: studyUid },
        { correlationId: randomUUID() },
      );
      const { result, calls } = await inZone<{
        result: { mode: string; partCount: number };
        calls: Record<string, number>;
      }>('Europe/Berlin', 'upload.tz-child.ts', [proxy.baseUrl, orderId, path]);
      expect(result).toMatchObject({ mode: 'multipart', partCount: 3 });
      expect(calls['upload-part']).toBe(3);
      expect(calls['multipart-presigned-urls']).toBe(1);
    } finally {
      await setup.close();
      await proxy.close();
    }
  });
});
