import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { codeOf } from '../../test/imaging-client/error-code';
import {
  JumpingClock,
  json,
  startScriptedUpstream,
  tokenAnswer,
  type SeenRequest,
} from '../../test/imaging-client/scripted-upstream';
import { ImagingClient } from './imaging-client';
import { withDefaults } from './imaging-client.config';
import { ImagingClientError } from './imaging-client.error';
import { InMemoryRateLimiter } from './in-memory-rate-limiter';
import { InMemoryUploadProgressStore, InMemoryUploadSlots } from './in-memory-upload.stores';
import { silentLogger, type CallRecord } from './ports';
import { StudyUploader } from './study-uploader';
import { MIB } from './upload-plan';

const ORDER_ID = '9c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e5f';

interface StorageBehaviour {
  /** Status to answer a part PUT with, or undefined for 200 + ETag. */
  partAnswer?: (partNumber: number, attempt: number, url: URL) => number | 'no-etag' | undefined;
  /** Extra query of the single-PUT URL (e.g. a SigV4 `X-Amz-SignedHeaders`). */
  singlePutQuery?: string;
  /** `expires_at` of the URL answers, instead of an ISO time an hour ahead. */
  expiresAt?: () => unknown;
  /** The `order_id` the initiate answer names (default: the order asked for). */
  initiateOrderId?: string;
  /** The `upload_id` the part-URL answer names (default: the one asked for). */
  partUrlsUploadId?: string;
}

async function setup(behaviour: StorageBehaviour = {}) {
  const parts = new Map<number, Buffer>();
  const attempts = new Map<number, number>();
  let inFlight = 0;
  let maxInFlight = 0;
  let generation = 0;
  const calls: string[] = [];
  const storageContentTypes: Array<string | undefined> = [];
  const expiresAt = behaviour.expiresAt ?? (() => new Date(Date.now() + 3600_000).toISOString());
  const upstream = await startScriptedUpstream(async (req: SeenRequest, res) => {
    if (req.path === '/auth/token') return tokenAnswer(res);
    if (req.path.startsWith('/storage/')) {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      // Hold each part a moment for another to arrive (up to 250 ms): a parallel uploader has
      // one under way, a serial one never does. A fixed 5 ms window missed the overlap when
      // bodies arrived slowly under load (CI).
      for (let waited = 0; inFlight < 2 && waited < 250; waited += 5) {
        await new Promise((resolve) => setTimeout(resolve, 5));
        maxInFlight = Math.max(maxInFlight, inFlight);
      }
      inFlight--;
      expect(req.headers.authorization).toBeUndefined();
      storageContentTypes.push(req.headers['content-type']);
      const url = new URL(`http://x${req.path}?${req.query}`);
      const n = Number(url.searchParams.get('part') ?? 0);
      const attempt = (attempts.get(n) ?? 0) + 1;
      attempts.set(n, attempt);
      const answer = behaviour.partAnswer?.(n, attempt, url);
      if (typeof answer === 'number') return json(res, answer, { error: 'storage' });
      parts.set(n, req.body);
      const etag = `"${createHash('md5').update(req.body).digest('hex')}"`;
      res.writeHead(200, answer === 'no-etag' ? {} : { etag });
      return res.end();
    }
    calls.push(req.path);
    const body = req.body.length ? JSON.parse(req.body.toString()) : {};
    switch (req.path) {
      case '/upload/single-put':
        return json(res, 200, {
          url: `${upstream.origin}/storage/single?sig=S${++generation}${behaviour.singlePutQuery ?? ''}`,
          expires_at: expiresAt(),
        });
      case '/upload/multipart/initiate':
        return json(res, 201, {
          upload_id: 'up-1',
          order_id: behaviour.initiateOrderId ?? ORDER_ID,
        });
      case '/upload/multipart/presigned-urls': {
        const numbers: number[] =
          body.part_numbers ?? Array.from({ length: body.parts }, (_: unknown, i: number) => i + 1);
        generation++;
        return json(res, 200, {
          upload_id: behaviour.partUrlsUploadId ?? body.upload_id,
          urls: numbers.map((n) => ({
            part_number: n,
            url: `${upstream.origin}/storage/up-1?part=${n}&gen=${generation}&sig=S`,
          })),
          expires_at: expiresAt(),
        });
      }
      case '/upload/multipart/complete':
        completeBody = body;
        return json(res, 200, { order_id: ORDER_ID, status: 'RECEIVED' });
      case '/upload/multipart/abort':
        return json(res, 200, { upload_id: body.upload_id, aborted: true });
      default:
        return json(res, 404, { error: 'not_found' });
    }
  });
  let completeBody: { parts: Array<{ part_number: number; etag: string }> } | undefined;
  const records: CallRecord[] = [];
  const { client, uploader, progress } = connect(upstream, {
    config: { retry: { maxAttempts: 4, baseDelayMs: 10 }, upload: { partConcurrency: 3 } },
    slots: 100,
    onCall: (r) => records.push(r),
  });
  return {
    upstream,
    parts,
    attempts,
    calls,
    records,
    storageContentTypes,
    progress,
    uploader,
    client,
    get maxInFlight() {
      return maxInFlight;
    },
    get completeBody() {
      return completeBody;
    },
  };
}

/** Every upstream and client a test set up, closed after it. */
const opened: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of opened.splice(0)) await close();
});

/** A client of `upstream` and an uploader over it; both are closed after the test. */
function connect(
  upstream: { baseUrl: string; close(): Promise<void> },
  options: {
    config?: Partial<Parameters<typeof withDefaults>[0]>;
    slots: number;
    onCall?: (record: CallRecord) => void;
  },
) {
  const clock = new JumpingClock();
  const progress = new InMemoryUploadProgressStore();
  const client = new ImagingClient(
    withDefaults({
      baseUrl: upstream.baseUrl,
      clientId: 'c',
      clientSecret: 's',
      organizationId: 'org-1',
      ...options.config,
    }),
    {
      clock,
      rateLimiter: new InMemoryRateLimiter(),
      observer: { onCall: options.onCall ?? (() => undefined) },
      logger: silentLogger,
    },
  );
  const uploader = new StudyUploader(client, {
    progress,
    slots: new InMemoryUploadSlots(options.slots),
    clock,
    logger: silentLogger,
  });
  opened.push(async () => {
    await client.close();
    await upstream.close();
  });
  return { client, uploader, progress };
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'uploader-spec-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function studyFile(name: string, size: number): Promise<{ path: string; bytes: Buffer }> {
  const bytes = Buffer.alloc(size);
  for (let i = 0; i < size; i += 4096) bytes.writeUInt32LE(i, i);
  const path = join(dir, name);
  await writeFile(path, bytes);
  return { path, bytes };
}

describe('StudyUploader', () => {
  it('sends a study under 5 MB with one PUT and no Authorization header', async () => {
    const t = await setup();
    const { path, bytes } = await studyFile('small.zip', 5_000_000 - 1); // under 5 MB read decimally (the safe reading)
    await expect(t.uploader.upload(ORDER_ID, path)).resolves.toMatchObject({
      mode: 'single',
      partCount: 1,
    });
    expect(t.parts.get(0)?.equals(bytes)).toBe(true);
    expect(t.calls).toEqual(['/upload/single-put']);
    const put = t.records.find((r) => r.operation === 'upload-single-put');
    expect(put).toMatchObject({ endpoint: '<presigned-url>', status: 200, orderId: ORDER_ID });
    expect(JSON.stringify(t.records)).not.toContain('sig=');
  });

  it('an expires_at that is no ISO time (epoch seconds, null, an object) is a hint ignored, not a failed upload', async () => {
    // The contract names no expires_at at all (docs/upstream-assumptions.md): only when the
    // URL is renewed depends on it, and the contract's hour from issue applies without it.
    for (const hint of [Math.floor(Date.now() / 1000) + 3600, null, { seconds: 3600 }]) {
      const t = await setup({ expiresAt: () => hint });
      const small = await studyFile('hint-small.zip', 1000);
      await expect(t.uploader.upload(ORDER_ID, small.path)).resolves.toMatchObject({
        mode: 'single',
      });
      const large = await studyFile('hint-large.zip', 6 * MIB);
      await expect(t.uploader.upload(ORDER_ID, large.path)).resolves.toMatchObject({
        mode: 'multipart',
      });
    }
  });

  it('sends no Content-Type with a presigned PUT unless the URL signs one (SigV4 / GCS SignedHeaders)', async () => {
    const { path } = await studyFile('typed.zip', 1000);
    const plain = await setup();
    await plain.uploader.upload(ORDER_ID, path);
    expect(plain.storageContentTypes).toEqual([undefined]);
    const hostOnly = await setup({ singlePutQuery: '&X-Amz-SignedHeaders=host' });
    await hostOnly.uploader.upload(ORDER_ID, path);
    expect(hostOnly.storageContentTypes).toEqual([undefined]);
    for (const query of [
      '&X-Amz-SignedHeaders=content-type%3Bhost',
      '&x-goog-signedheaders=host%3Bcontent-type',
    ]) {
      const signed = await setup({ singlePutQuery: query });
      await signed.uploader.upload(ORDER_ID, path);
      expect(signed.storageContentTypes).toEqual(['application/octet-stream']);
    }
    // Multipart parts follow the same rule (the sandbox-style URLs sign no headers).
    const parts = await setup();
    const big = await studyFile('typed-multi.zip', 11 * MIB);
    await parts.uploader.upload(ORDER_ID, big.path);
    expect(parts.storageContentTypes.length).toBeGreaterThan(1);
    expect(parts.storageContentTypes.every((t) => t === undefined)).toBe(true);
  });

  it('uploads multipart in parallel within the concurrency bound, retrying failed parts', async () => {
    const t = await setup({
      partAnswer: (n, attempt) => (n === 2 && attempt === 1 ? 503 : undefined),
    });
    const { path, bytes } = await studyFile('mid.zip', 45 * MIB + 123);
    const result = await t.uploader.upload(ORDER_ID, path);
    expect(result).toMatchObject({ mode: 'multipart', partCount: 5, resumedParts: 0 });
    expect(Buffer.concat([1, 2, 3, 4, 5].map((n) => t.parts.get(n)!)).equals(bytes)).toBe(true);
    expect(t.maxInFlight).toBeLessThanOrEqual(3);
    expect(t.maxInFlight).toBeGreaterThan(1);
    expect(t.completeBody?.parts.map((p) => p.part_number)).toEqual([1, 2, 3, 4, 5]);
    expect(t.completeBody?.parts.every((p) => /^"[0-9a-f]{32}"$/.test(p.etag))).toBe(true);
    expect(await t.progress.load(ORDER_ID)).toBeNull();
  });

  it('fetches fresh URLs for the remaining parts when storage refuses an expired one', async () => {
    const t = await setup({
      partAnswer: (_n, _attempt, url) => (url.searchParams.get('gen') === '1' ? 403 : undefined),
    });
    const { path } = await studyFile('expired.zip', 25 * MIB);
    await t.uploader.upload(ORDER_ID, path);
    expect(
      t.calls.filter((c) => c === '/upload/multipart/presigned-urls').length,
    ).toBeGreaterThanOrEqual(2);
    expect(t.calls).toContain('/upload/multipart/complete');
  });

  it('aborts the upload when storage sends no ETag, with a typed error', async () => {
    const t = await setup({ partAnswer: (n) => (n === 3 ? 'no-etag' : undefined) });
    const { path } = await studyFile('noetag.zip', 25 * MIB);
    const error = (await t.uploader
      .upload(ORDER_ID, path)
      .catch((e: unknown) => e)) as ImagingClientError;
    expect(error).toBeInstanceOf(ImagingClientError);
    expect(error.code).toBe('invalid_response');
    expect(error.operation).toBe('upload-part');
    expect(t.calls).toContain('/upload/multipart/abort');
    expect(t.calls).not.toContain('/upload/multipart/complete');
    expect(await t.progress.load(ORDER_ID)).toBeNull();
  });

  it('an initiate answered about another order, or part URLs of another upload: not one byte of the study is sent', async () => {
    // The answers name the order and the upload they are about (docs/upstream-assumptions.md).
    // An upstream cache or routing mix-up that answers with another order's upload: taken as it
    // stands, our patient's study went into another order (another system's, another patient's)
    // and was completed there. Refused as invalid_response before any PUT; the other order's
    // upload is not aborted by us either (it is not ours).
    const other = '1b2c3d4e-5f60-4718-9a0b-c1d2e3f4a5b6';
    const { path } = await studyFile('mixup.zip', 25 * MIB);
    const a = await setup({ initiateOrderId: other });
    const initiate = (await a.uploader
      .upload(ORDER_ID, path)
      .catch((e: unknown) => e)) as ImagingClientError;
    expect(initiate).toMatchObject({ code: 'invalid_response', operation: 'multipart-initiate' });
    expect(a.parts.size).toBe(0);
    expect(a.calls).toEqual(['/upload/multipart/initiate']);
    // The same order in upper case is ours (a UUID in either case).
    const b = await setup({ initiateOrderId: ORDER_ID.toUpperCase() });
    await expect(b.uploader.upload(ORDER_ID, path)).resolves.toMatchObject({ mode: 'multipart' });

    const c = await setup({ partUrlsUploadId: 'up-of-another-order' });
    const urls = (await c.uploader
      .upload(ORDER_ID, path)
      .catch((e: unknown) => e)) as ImagingClientError;
    expect(urls).toMatchObject({ code: 'invalid_response', operation: 'multipart-presigned-urls' });
    expect(c.parts.size).toBe(0);
    expect(c.calls).not.toContain('/upload/multipart/complete');
  });

  it('keeps progress after a transient failure and resumes without resending finished parts', async () => {
    let failing = true;
    const t = await setup({ partAnswer: (n) => (failing && n === 4 ? 500 : undefined) });
    const { path, bytes } = await studyFile('resume.zip', 45 * MIB);
    expect(await codeOf(t.uploader.upload(ORDER_ID, path))).toBe('server_error_exhausted');
    const kept = await t.progress.load(ORDER_ID);
    expect(kept?.parts.map((p) => p.partNumber).sort()).toEqual([1, 2, 3, 5]);
    expect(t.calls).not.toContain('/upload/multipart/abort');
    failing = false;
    const sentBefore = new Map(t.attempts);
    const result = await t.uploader.upload(ORDER_ID, path);
    expect(result.resumedParts).toBe(4);
    for (const n of [1, 2, 3, 5]) expect(t.attempts.get(n)).toBe(sentBefore.get(n));
    expect(t.calls.filter((c) => c === '/upload/multipart/initiate')).toHaveLength(1);
    expect(Buffer.concat([1, 2, 3, 4, 5].map((n) => t.parts.get(n)!)).equals(bytes)).toBe(true);
  });

  it('refuses a study over the limit before any call', async () => {
    const t = await setup();
    const path = join(dir, 'huge.zip');
    const { open } = await import('node:fs/promises');
    const handle = await open(path, 'w');
    await handle.truncate(10 * 1024 * MIB + 1); // sparse: no disk used
    await handle.close();
    expect(await codeOf(t.uploader.upload(ORDER_ID, path))).toBe('too_large');
    expect(t.upstream.seen).toHaveLength(0);
    await rm(path);
  });
});

describe('StudyUploader, single PUT whose answer is lost', () => {
  it('treats the retried PUT refused as "already processing" as done when the order moved on', async () => {
    let puts = 0;
    const upstream = await startScriptedUpstream((req, res) => {
      if (req.path === '/auth/token') return tokenAnswer(res);
      if (req.path === '/upload/single-put') {
        return json(res, 200, {
          url: `${upstream.origin}/storage/single?sig=S`,
          expires_at: new Date(Date.now() + 3600_000).toISOString(),
        });
      }
      if (req.path === '/storage/single') {
        // First PUT lands, but the connection dies before the answer; the retry is refused.
        if (++puts === 1) return res.socket?.destroy();
        return json(res, 409, {
          error: 'order_terminal',
          message: 'order is QUEUED; it accepts no upload',
        });
      }
      if (req.path === '/status') return json(res, 200, { order_id: ORDER_ID, status: 'QUEUED' });
      return json(res, 404, { error: 'not_found' });
    });
    const { uploader } = connect(upstream, { slots: 1 });
    const { path } = await studyFile('lost-answer.zip', 1024);
    await expect(uploader.upload(ORDER_ID, path)).resolves.toMatchObject({ mode: 'single' });
    expect(puts).toBe(2);
  });
});
