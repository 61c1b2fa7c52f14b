/**
 * bench/upload: multipart upload throughput of the adapter's StudyUploader against the
 * sandbox's object storage, compared with the same bytes streamed raw to the same storage in
 * the same run, plus the uploading process's peak RSS. The storage enforces the contract's
 * object limits (100 MB per part), so "one raw streamed PUT" of a 1 GB study is impossible:
 * the raw ceiling is one streamed PUT at a time over the same parts (see upload-worker.ts). The sandbox and each upload
 * run in their own processes, so each RSS is the uploader's own. Prints JSON.
 * Usage: `node -r @swc-node/register bench/upload/upload.bench.ts`
 * (BENCH_UPLOAD_MB=1024 size in MiB, BENCH_PART_CONCURRENCY=4, BENCH_ROUNDS=3).
 * Targets: ratio ≥ 0.8 of the raw stream, peak RSS < 200 MB.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compileToPlainJs, freePort, report, round } from '../bench-utils';
import { writeSyntheticStudy } from './synthetic-study';

const MIB = 1024 * 1024;
const SIZE_MIB = Number(process.env.BENCH_UPLOAD_MB ?? 1024);
const CONCURRENCY = Number(process.env.BENCH_PART_CONCURRENCY ?? 4);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const ROOT = join(__dirname, '..', '..');

/**
 * The upload worker runs as plain JavaScript, compiled here once: under @swc-node/register
 * the compiler itself would add ~120 MB to the RSS we mean to measure as the client's.
 */
function compileWorker(): { dir: string; script: string } {
  return compileToPlainJs('bench/upload/upload-worker.ts');
}

function node(script: string, env: Record<string, string>, register = true) {
  return spawn(process.execPath, [...(register ? ['-r', '@swc-node/register'] : []), script], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

async function runWorker(
  script: string,
  env: Record<string, string>,
): Promise<Record<string, number | string>> {
  const child = node(script, env, false);
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (err += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  if (code !== 0) throw new Error(`upload worker (${env.BENCH_MODE}) failed: ${err.trim()}`);
  return JSON.parse(out.trim().split('\n').pop() ?? '{}') as Record<string, number | string>;
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'bench-upload-'));
  const sandboxDir = join(work, 'sandbox');
  const studyPath = join(work, 'study.zip');
  const port = await freePort();
  const worker = compileWorker();
  const sandbox = node(join(ROOT, 'src/sandbox/main.ts'), {
    SANDBOX_PORT: String(port),
    SANDBOX_DATA_DIR: sandboxDir,
    SANDBOX_LOG_REQUESTS: 'false',
  });
  sandbox.stdout.resume();
  sandbox.stderr.resume();
  try {
    const baseUrl = `http://127.0.0.1:${port}/v1`;
    const { studyUid, bytes } = await writeSyntheticStudy(studyPath, SIZE_MIB * MIB);
    await waitForSandbox(baseUrl);
    const env = {
      BENCH_BASE_URL: baseUrl,
      BENCH_FILE: studyPath,
      BENCH_STUDY_UID: studyUid,
      BENCH_PART_CONCURRENCY: String(CONCURRENCY),
    };
    // Rounds of raw then client, interleaved so both see the same machine load (the box is
    // shared); each side is reported by its best and its median round, the ratio by the best.
    const raws: Array<Record<string, number | string>> = [];
    const clients: Array<Record<string, number | string>> = [];
    for (let round = 0; round < ROUNDS; round++) {
      raws.push(await runWorker(worker.script, { ...env, BENCH_MODE: 'raw' }));
      clients.push(await runWorker(worker.script, { ...env, BENCH_MODE: 'client' }));
    }
    const seconds = (runs: Array<Record<string, number | string>>) =>
      runs.map((r) => Number(r.seconds));
    const best = (values: number[]) => Math.min(...values);
    const median = (values: number[]) =>
      [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
    const rawSeconds = best(seconds(raws));
    const clientSeconds = best(seconds(clients));
    const bestClient = clients[seconds(clients).indexOf(clientSeconds)];
    const peakRss = Math.max(...clients.map((c) => Number(c.peakRssBytes)));
    const mbps = (s: number) => round(bytes / MIB / s, 1);
    report('upload', {
      studyBytes: bytes,
      rounds: ROUNDS,
      multipart: {
        mibPerSecond: mbps(clientSeconds),
        medianMibPerSecond: mbps(median(seconds(clients))),
        seconds: round(clientSeconds, 2),
        runs: seconds(clients).map((v) => round(v, 2)),
        secondsIncludingApiCalls: round(Number(bestClient.totalSecondsWithApiCalls), 2),
        partCount: bestClient.partCount,
        partSizeBytes: bestClient.partSizeBytes,
        partConcurrency: bestClient.partConcurrency,
        partRetries: clients.reduce((n, c) => n + Number(c.partRetries), 0),
        peakRssMiB: round(peakRss / MIB, 1),
      },
      rawStreamedPuts: {
        note: 'same bytes and part URLs, one raw undici request() PUT at a time, no client logic',
        mibPerSecond: mbps(rawSeconds),
        medianMibPerSecond: mbps(median(seconds(raws))),
        seconds: round(rawSeconds, 2),
        runs: seconds(raws).map((v) => round(v, 2)),
        status: [...new Set(raws.map((r) => r.status))],
        peakRssMiB: round(Math.max(...raws.map((r) => Number(r.peakRssBytes))) / MIB, 1),
      },
      ratioToRaw: round(rawSeconds / clientSeconds, 3),
      medianRatioToRaw: round(median(seconds(raws)) / median(seconds(clients)), 3),
      targets: { ratioToRaw: 0.8, peakRssMiB: 200 },
      meets: { ratio: rawSeconds / clientSeconds >= 0.8, rss: peakRss / MIB < 200 },
    });
  } finally {
    sandbox.kill('SIGTERM');
    await new Promise((resolve) => sandbox.on('exit', resolve));
    rmSync(work, { recursive: true, force: true });
    rmSync(worker.dir, { recursive: true, force: true });
  }
}

async function waitForSandbox(baseUrl: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    try {
      const response = await fetch(`${baseUrl}/products`);
      await response.arrayBuffer();
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
  throw new Error('sandbox did not start');
}

main().catch((error: unknown) => {
  process.stderr.write(
    `${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
