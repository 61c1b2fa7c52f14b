import { createWriteStream } from 'node:fs';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ZipFile } from 'yazl';

/**
 * Writes a study as one ZIP on disk, streaming every instance from its staged file (yazl
 * reads each file only while it writes that entry), so memory does not grow with the study.
 *
 * Entries are stored, not deflated: DICOM pixel data is often already compressed, deflate
 * would cost the shared CPU for little, and an almost uniform image deflated past 100:1
 * would look like a zip bomb to the upstream's ZIP checks (docs/upstream-assumptions.md).
 */

export interface PackageEntry {
  /** The staged Part 10 file. */
  path: string;
  seriesInstanceUid: string;
  sopInstanceUid: string;
}

export interface PackageResult {
  path: string;
  sizeBytes: number;
  entryNames: string[];
}

export const SIDECAR_NAME = 'metadata.json';

/**
 * A safe ZIP entry name segment: only UID-like characters; anything else becomes `_`, and
 * the result can never be `.` or `..` nor contain a separator.
 */
export function safeSegment(value: string): string {
  const cleaned = value.replace(/[^0-9A-Za-z._-]/g, '_').slice(0, 100);
  return /^\.*$/.test(cleaned) ? `_${cleaned.length}` : cleaned;
}

/** `DICOM/<series UID>/<SOP instance UID>.dcm`: relative, no `..`, forward slashes only. */
export function entryNameOf(
  entry: Pick<PackageEntry, 'seriesInstanceUid' | 'sopInstanceUid'>,
): string {
  return `DICOM/${safeSegment(entry.seriesInstanceUid)}/${safeSegment(entry.sopInstanceUid)}.dcm`;
}

/**
 * Writes the ZIP to `<target>.partial` and renames it into place once complete, so a crash
 * never leaves a half-written package under the final name.
 */
export async function writeStudyPackage(
  target: string,
  entries: readonly PackageEntry[],
  sidecar?: Record<string, unknown> | null,
  mtime: Date = new Date(),
): Promise<PackageResult> {
  await mkdir(dirname(target), { recursive: true, mode: 0o700 });
  const partial = `${target}.partial`;
  const zip = new ZipFile();
  const names = new Set<string>();
  const entryNames: string[] = [];
  for (const entry of entries) {
    let name = entryNameOf(entry);
    // Two files of one SOP Instance UID cannot both be kept; a numbered name keeps both visible.
    for (let n = 2; names.has(name); n++) name = entryNameOf(entry).replace(/\.dcm$/, `-${n}.dcm`);
    names.add(name);
    entryNames.push(name);
    zip.addFile(entry.path, name, { compress: false, mtime, mode: 0o100644 });
  }
  if (sidecar) {
    zip.addBuffer(Buffer.from(JSON.stringify(sidecar, null, 2)), SIDECAR_NAME, {
      compress: false,
      mtime,
      mode: 0o100644,
    });
    entryNames.push(SIDECAR_NAME);
  }
  // yazl reports a file it cannot read on the ZipFile, not on its output stream.
  zip.on('error', (error: Error) => (zip.outputStream as Readable).destroy(error));
  zip.end();
  try {
    await pipeline(zip.outputStream, createWriteStream(partial, { mode: 0o600 }));
    await rename(partial, target);
  } catch (error) {
    await rm(partial, { force: true });
    throw error;
  }
  const { size } = await stat(target);
  return { path: target, sizeBytes: size, entryNames };
}
