/**
 * Child process of bench/upload: uploads one file to the sandbox and prints one JSON line
 * with its timings and this process's own peak RSS. BENCH_MODE=client uses the adapter's
 * StudyUploader (multipart); BENCH_MODE=raw streams the same bytes in one PUT with undici
 * `request()`, one PUT at a time, to presigned URLs of the same storage — the ceiling to
 * compare with.
 */
import { randomUUID } from 'node:crypto';
import { createReadStream, statSync } from 'node:fs';
import { request } from 'undici';
import {
  ImagingClient,
  InMemoryRateLimiter,
  InMemoryUploadProgressStore,
  InMemoryUploadSlots,
  StudyUploader,
  silentLogger,
  systemClock,
  withDefaults,
  type CallRecord,
} from '../../src/imaging-client';
import { partRange, planUpload } from '../../src/imaging-client/upload-plan';

async function main(): Promise<void> {
  const baseUrl = process.env.BENCH_BASE_URL ?? '';
  const file = process.env.BENCH_FILE ?? '';
  const studyUid = process.env.BENCH_STUDY_UID ?? '';
  const mode = process.env.BENCH_MODE === 'raw' ? 'raw' : 'client';
  const concurrency = Number(process.env.BENCH_PART_CONCURRENCY ?? 4);
  const size = statSync(file).size;
  const records: Array<CallRecord & { endedAt: number }> = [];
  const client = new ImagingClient(
    withDefaults({
      baseUrl,
      clientId: 'sandbox-client',
      clientSecret: 'sandbox-secret',
      organizationId: 'sandbox-org',
      upload: { partConcurrency: concurrency },
    }),
    {
      clock: systemClock,
      rateLimiter: new InMemoryRateLimiter(),
      observer: { onCall: (r) => records.push({ ...r, endedAt: performance.now() }) },
      logger: silentLogger,
    },
  );
  const { orderId } = await client.createOrder(
    { study_uid: studyUid, modality: 'MR' },
    { correlationId: randomUUID() },
  );

  if (mode === 'raw') {
    // The storage holds every object PUT to the contract's limits (single PUT < 5 MB, part
    // ≤ 100 MB), so a 1 GB study cannot go up in one request. The ceiling is therefore the
    // same bytes streamed raw, one PUT at a time, over the same part URLs: a single stream at
    // any moment, with none of the client's machinery (no retries, no progress, no parallelism).
    const plan = planUpload(size);
    if (plan.kind !== 'multipart') throw new Error('study too small for the bench');
    const { uploadId } = await client.uploads.initiateMultipart(orderId, size);
    const { urls } = await client.uploads.getPartUrls(uploadId, { count: plan.partCount }, orderId);
    const statuses = new Set<number>();
    const started = performance.now();
    for (let n = 1; n <= plan.partCount; n++) {
      const { start, end, length } = partRange(plan, n);
      const response = await request(urls.get(n)!, {
        method: 'PUT',
        body: createReadStream(file, { start, end }),
        headers: { 'content-length': String(length), 'content-type': 'application/octet-stream' },
        headersTimeout: 600_000,
        bodyTimeout: 600_000,
      });
      await response.body.dump();
      statuses.add(response.statusCode);
    }
    const seconds = (performance.now() - started) / 1000;
    await client.uploads.abortMultipart(uploadId, orderId).catch(() => undefined);
    print({ mode, status: [...statuses].join(','), bytes: size, seconds });
  } else {
    const uploader = new StudyUploader(client, {
      progress: new InMemoryUploadProgressStore(),
      slots: new InMemoryUploadSlots(100),
      clock: systemClock,
      logger: silentLogger,
    });
    const started = performance.now();
    const result = await uploader.upload(orderId, file);
    const totalSeconds = (performance.now() - started) / 1000;
    const parts = records.filter((r) => r.operation === 'upload-part');
    const firstStart = Math.min(...parts.map((r) => r.endedAt - r.latencyMs));
    const lastEnd = Math.max(...parts.map((r) => r.endedAt));
    print({
      mode,
      bytes: size,
      partCount: result.partCount,
      partSizeBytes: Math.ceil(size / result.partCount),
      partConcurrency: concurrency,
      partRetries: parts.reduce((n, r) => n + r.attempts - 1, 0),
      seconds: (lastEnd - firstStart) / 1000,
      totalSecondsWithApiCalls: totalSeconds,
    });
  }
  await client.close();
}

function print(figures: Record<string, unknown>): void {
  const peakRssBytes = process.resourceUsage().maxRSS * 1024;
  process.stdout.write(`${JSON.stringify({ ...figures, peakRssBytes })}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
