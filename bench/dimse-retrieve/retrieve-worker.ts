/**
 * Child process of bench/dimse-retrieve: retrieves one study from Orthanc into a directory
 * and prints one JSON line with its time and this process's own peak RSS. BENCH_MODE=cget
 * uses the adapter's DimseClient (C-GET, instances streamed to disk); BENCH_MODE=wado the
 * adapter's DicomWebClient (WADO-RS multipart, streamed to disk).
 */
import { readFileSync, rmSync } from 'node:fs';

async function main(): Promise<void> {
  const mode = process.env.BENCH_MODE === 'wado' ? 'wado' : 'cget';
  const uid = process.env.BENCH_STUDY_UID ?? '';
  const dir = process.env.BENCH_DIR ?? '';
  // Each mode loads only its own client; the RSS before the retrieve is reported too.
  const web = mode === 'wado' ? await import('../../src/studies/dicomweb.client') : undefined;
  const dimse = mode === 'cget' ? await import('../../src/studies/dimse.client') : undefined;
  const rssBeforeBytes = process.memoryUsage().rss;
  const started = process.hrtime.bigint();
  let files: Array<{ sizeBytes: number }>;
  if (web) {
    const client = new web.DicomWebClient({ baseUrl: process.env.BENCH_DICOMWEB_URL ?? '' });
    files = await client.retrieveStudy(uid, dir);
    await client.close();
  } else {
    const client = new dimse!.DimseClient({
      host: '127.0.0.1',
      port: Number(process.env.BENCH_DICOM_PORT),
      calledAeTitle: process.env.BENCH_AET ?? 'ORTHANC',
      callingAeTitle: 'IMAGING-ADAPTER',
      timeoutMs: 60_000,
      retrieveTimeoutMs: 60 * 60_000,
      maxBytes: 8 * 1024 ** 3,
    });
    const { outcome, files: got } = await client.getStudy(uid, dir);
    if (outcome.status !== 0 || outcome.failed > 0) throw new Error(JSON.stringify(outcome));
    files = got;
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const bytes = files.reduce((n, f) => n + f.sizeBytes, 0);
  rmSync(dir, { recursive: true, force: true });
  process.stdout.write(
    `${JSON.stringify({
      mode,
      seconds,
      instances: files.length,
      bytes,
      rssBeforeBytes,
      peakRssBytes: peakRss(),
    })}\n`,
  );
}

/**
 * This process's own peak RSS: VmHWM belongs to the address space exec() created, whereas
 * getrusage's ru_maxrss carries the high-water mark of the forking parent across exec (the
 * bench's parent holds the whole study in memory while it stores it into Orthanc).
 */
function peakRss(): number {
  try {
    const line = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'latin1'));
    if (line) return Number(line[1]) * 1024;
  } catch {
    // not Linux
  }
  return process.resourceUsage().maxRSS * 1024;
}

main().catch((error: unknown) => {
  process.stderr.write(
    `${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
