/**
 * Child process of study-package.test.ts: streams a large STOW-RS body from disk through the
 * multipart reader into files, validates each instance and packages them as a ZIP, sampling
 * its own memory. Prints one JSON line: memory before and at peak, instance counts, ZIP size, seconds.
 * Usage: node -r @swc-node/register memory-probe.script.ts <body file> <boundary> <work dir>
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { once } from 'node:events';
import { join } from 'node:path';
import { checkInstanceFile } from '../../src/studies/dicom-instance.validator';
import { readMultipart } from '../../src/studies/multipart-related.parser';
import { writeStudyPackage, type PackageEntry } from '../../src/studies/study-package.writer';

async function main(): Promise<void> {
  const [bodyFile, boundary, workDir] = process.argv.slice(2) as [string, string, string];
  await mkdir(join(workDir, 'parts'), { recursive: true });
  global.gc?.();
  const started = Date.now();
  const baselineRss = process.memoryUsage().rss;
  let peakRss = baselineRss;
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, process.memoryUsage().rss);
  }, 10);

  const entries: PackageEntry[] = [];
  let out: ReturnType<typeof createWriteStream> | undefined;
  let path = '';
  for await (const e of readMultipart(createReadStream(bodyFile), boundary)) {
    if (e.type === 'part') {
      path = join(workDir, 'parts', `${entries.length + 1}.dcm`);
      out = createWriteStream(path);
    } else if (e.type === 'data') {
      if (!out!.write(e.chunk)) await once(out!, 'drain');
    } else {
      out!.end();
      await once(out!, 'close');
      const check = await checkInstanceFile(path);
      if (!check.ok) throw new Error(`instance ${entries.length + 1}: ${check.reason}`);
      entries.push({
        path,
        seriesInstanceUid: check.header.seriesInstanceUid,
        sopInstanceUid: check.header.sopInstanceUid,
      });
    }
  }
  const zip = await writeStudyPackage(join(workDir, 'study.zip'), entries, { probe: true });
  clearInterval(sampler);
  peakRss = Math.max(peakRss, process.memoryUsage().rss);
  process.stdout.write(
    `${JSON.stringify({
      baselineRss,
      peakRss,
      instances: entries.length,
      uniqueInstances: new Set(entries.map((e) => e.sopInstanceUid)).size,
      zipBytes: zip.sizeBytes,
      seconds: (Date.now() - started) / 1000,
    })}\n`,
  );
}

main().catch((error: unknown) => {
  process.stderr.write(`${(error as Error).stack}\n`);
  process.exit(1);
});
