/**
 * bench/dimse-retrieve: retrieving one study from the same Orthanc by C-GET (the adapter's
 * DimseClient) and by WADO-RS (its DicomWebClient), both streamed to disk: time, throughput
 * and the retrieving process's own peak RSS (each retrieve runs in a child process compiled
 * to plain JavaScript, so the figure is the client's, not a TypeScript compiler's).
 * Usage: `node -r @swc-node/register bench/dimse-retrieve/dimse-retrieve.bench.ts`
 * (BENCH_DIMSE_MB=150 study size in MiB, up to 1024; 2 MiB instances; BENCH_ROUNDS=3).
 * Prints JSON.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createMrBrainStudy, replicateInstance } from '../../test/helpers/dicom-factory';
import { startOrthanc } from '../../test/helpers/orthanc';
import { compileToPlainJs, report, round } from '../bench-utils';

const MIB = 1024 * 1024;
const SIZE_MIB = Math.min(1024, Number(process.env.BENCH_DIMSE_MB ?? 150));
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const ROOT = join(__dirname, '..', '..');

/** The worker and what it loads, as plain JavaScript (see bench/upload for why). */
function compileWorker(): { dir: string; script: string } {
  return compileToPlainJs('bench/dimse-retrieve/retrieve-worker.ts');
}

async function runWorker(
  script: string,
  env: Record<string, string>,
): Promise<Record<string, number | string>> {
  const child = spawn(process.execPath, [script], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (err += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  if (code !== 0) throw new Error(`retrieve worker (${env.BENCH_MODE}) failed: ${err.trim()}`);
  return JSON.parse(out.trim().split('\n').pop() ?? '{}') as Record<string, number | string>;
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'bench-dimse-'));
  const worker = compileWorker();
  const orthanc = await startOrthanc();
  try {
    // One 1024×1024 16-bit MR slice (2 MiB), copied with new SOP Instance UIDs.
    const [slice] = createMrBrainStudy({
      study: { accessionNumber: 'BENCH-DIMSE-1' },
      series: [{ slices: 1, rows: 1024, columns: 1024 }],
    });
    const count = Math.max(1, Math.round((SIZE_MIB * MIB) / slice!.bytes.length));
    let bytes = 0;
    // In batches, so this process never holds the whole study.
    for (let from = 0; from < count; from += 16) {
      const batch = replicateInstance(slice!, Math.min(16, count - from), from);
      for (const i of batch) {
        await orthanc.store(i.bytes);
        bytes += i.bytes.length;
      }
    }
    const env = {
      BENCH_STUDY_UID: slice!.studyInstanceUid,
      BENCH_DICOMWEB_URL: orthanc.dicomWebUrl,
      BENCH_DICOM_PORT: String(orthanc.dicomPort),
      BENCH_AET: orthanc.aet,
    };
    // Interleaved rounds, so both see the same machine load (the box is shared).
    const runs: Record<'cget' | 'wado', Array<Record<string, number | string>>> = {
      cget: [],
      wado: [],
    };
    for (let r = 0; r < ROUNDS; r++) {
      for (const mode of ['wado', 'cget'] as const) {
        runs[mode].push(
          await runWorker(worker.script, {
            ...env,
            BENCH_MODE: mode,
            BENCH_DIR: join(work, `${mode}-${r}`),
          }),
        );
      }
    }
    const summary = (list: Array<Record<string, number | string>>) => {
      const seconds = list.map((x) => Number(x.seconds));
      const best = Math.min(...seconds);
      const median = [...seconds].sort((a, b) => a - b)[Math.floor(seconds.length / 2)]!;
      return {
        seconds: round(best, 2),
        medianSeconds: round(median, 2),
        mibPerSecond: round(bytes / MIB / best, 1),
        runs: seconds.map((v) => round(v, 2)),
        instances: list[0]!.instances,
        bytesRetrieved: list[0]!.bytes,
        peakRssMiB: round(Math.max(...list.map((x) => Number(x.peakRssBytes))) / MIB, 1),
        rssBeforeRetrieveMiB: round(
          Math.max(...list.map((x) => Number(x.rssBeforeBytes))) / MIB,
          1,
        ),
      };
    };
    const cget = summary(runs.cget);
    const wado = summary(runs.wado);
    report('dimse-retrieve', {
      studyBytes: bytes,
      instances: count,
      instanceBytes: slice!.bytes.length,
      rounds: ROUNDS,
      pacs: 'Orthanc (Debian package) on loopback, DICOMweb plugin and DICOM port, same storage',
      cget,
      wadoRs: wado,
      cgetSecondsPerWadoSecond: round(cget.seconds / wado.seconds, 2),
    });
  } finally {
    await orthanc.stop();
    rmSync(work, { recursive: true, force: true });
    rmSync(worker.dir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  process.stderr.write(
    `${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
