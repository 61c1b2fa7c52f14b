import { randomUUID } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { QidoStudy, RetrievedFile } from './dicomweb.client';
import type { DimseClient } from './dimse.client';
import { checkRetrieveOutcome } from './dimse-status';
import type { PacsSource } from './pacs-pull';
import { StudyError } from './study.error';
import type { StudyStoragePaths } from './study-storage.paths';

/**
 * A PACS reached over DIMSE, as the pull sees it (pacs-pull.ts): C-FIND to find and count,
 * then C-GET (instances on our association, straight into the order's directory) or C-MOVE
 * (instances to our C-STORE SCP, which files our own move's sub-operations under
 * `studies/moved/<study>/`, on whichever replica the PACS reached; collected from there once
 * the PACS reports the move complete). Either way the study is complete or not used at all.
 */
export interface DimsePacsOptions {
  client: DimseClient;
  retrieve: 'move' | 'get';
  paths: StudyStoragePaths;
  maxInstances: number;
  maxBytes: number;
}

export class DimsePacs implements PacsSource {
  readonly name = 'dimse' as const;

  constructor(private readonly options: DimsePacsOptions) {}

  get maxInstances(): number {
    return this.options.maxInstances;
  }

  findStudies(query: {
    studyInstanceUid?: string | null;
    accessionNumber?: string | null;
  }): Promise<QidoStudy[]> {
    return this.options.client.findStudies(query);
  }

  async retrieveStudy(
    studyInstanceUid: string,
    dir: string,
  ): Promise<{ files: RetrievedFile[]; detail: Record<string, unknown> }> {
    if (this.options.retrieve === 'get') {
      const { outcome, files } = await this.options.client.getStudy(studyInstanceUid, dir);
      try {
        checkRetrieveOutcome('C-GET', outcome);
        if (files.length !== outcome.completed) {
          throw new StudyError(
            'pacs_unavailable',
            `C-GET reported ${outcome.completed} instance(s) sent but ${files.length} arrived`,
          );
        }
      } catch (error) {
        await rm(dir, { recursive: true, force: true });
        throw error;
      }
      return { files, detail: { retrieve: 'C-GET', completed: outcome.completed } };
    }
    return this.move(studyInstanceUid, dir);
  }

  private async move(
    studyInstanceUid: string,
    dir: string,
  ): Promise<{ files: RetrievedFile[]; detail: Record<string, unknown> }> {
    const { paths } = this.options;
    const movedDir = paths.movedDir(studyInstanceUid);
    // Files of an earlier, broken-off move of this study are not ours to use.
    const startedAt = Date.now() - 1000;
    // The instances arrive at an SCP (maybe another replica's): their bytes are watched here,
    // and the association aborted once the study passes PACS_DIMSE_MAX_BYTES.
    const stop = new AbortController();
    const watch = setInterval(() => {
      void bytesSince(movedDir, startedAt).then((n) => {
        if (n > this.options.maxBytes)
          stop.abort(
            new StudyError(
              'too_large',
              `the study is larger than ${this.options.maxBytes} bytes (PACS_DIMSE_MAX_BYTES)`,
            ),
          );
      });
    }, 1000);
    let outcome;
    try {
      outcome = await this.options.client.moveStudy(studyInstanceUid, stop.signal);
      // An instance our SCP refused is not valid DICOM, as a retrieved one C-GET or WADO-RS
      // brings: the order fails naming it. The PACS only reports a failed sub-operation
      // (B000, or C000 from a PACS that stops at the first), which reads as worth waiting for:
      // the order moved the study again every 30 s until its deadline, never saying why.
      const refused = await refusalsSince(movedDir, startedAt);
      if (refused.length > 0)
        throw new StudyError(
          'invalid_study',
          `C-MOVE: our SCP refused ${refused.length}${refused.length >= MAX_REFUSAL_NOTES_PER_STUDY ? ' or more' : ''} instance(s) the PACS sent as not valid DICOM: ${refused.slice(0, 3).join('; ')}${refused.length > 3 ? '; …' : ''}`,
        );
      checkRetrieveOutcome('C-MOVE', outcome);
    } catch (error) {
      // A partial move is never packaged: what did arrive goes, including an instance our SCP
      // was still filing when the association broke (a second pass a moment later).
      await removeSince(movedDir, startedAt);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      await removeSince(movedDir, startedAt);
      throw error;
    } finally {
      clearInterval(watch);
    }
    // The PACS sends its final response after the last sub-operation's C-STORE response, and
    // our SCP answers only once the instance is on disk: everything is there now.
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const files: RetrievedFile[] = [];
    let bytes = 0;
    for (const name of await readdir(movedDir).catch(() => [] as string[])) {
      if (!name.endsWith('.dcm')) continue;
      const from = join(movedDir, name);
      const info = await stat(from).catch(() => undefined);
      if (!info || info.mtimeMs < startedAt) continue;
      const path = join(dir, `${String(files.length + 1).padStart(6, '0')}.dcm`);
      // Taken, not copied: the same move for another order finds fewer and tries again.
      const taken = await rename(from, path).then(
        () => true,
        () => false,
      );
      if (!taken) continue;
      files.push({ path, sizeBytes: info.size, contentType: 'application/dicom' });
      bytes += info.size;
    }
    if (files.length !== outcome.completed || bytes > this.options.maxBytes) {
      await rm(dir, { recursive: true, force: true });
      if (bytes > this.options.maxBytes)
        throw new StudyError(
          'too_large',
          `the study is larger than ${this.options.maxBytes} bytes (PACS_DIMSE_MAX_BYTES)`,
        );
      throw new StudyError(
        'pacs_unavailable',
        `C-MOVE reported ${outcome.completed} instance(s) sent but ${files.length} reached the shared study store (is DATA_DIR shared between replicas? does the PACS send our AE title as Move Originator?)`,
      );
    }
    return { files, detail: { retrieve: 'C-MOVE', completed: outcome.completed } };
  }
}

/**
 * Refusal notes kept for one study's move: the retrieve fails on the first and names three.
 * Past it a refusal is audited (study.received) but not noted again.
 */
export const MAX_REFUSAL_NOTES_PER_STUDY = 20;

/**
 * Notes that our SCP refused a sub-operation of a move of `studyInstanceUid`, for the retrieve
 * that asked for it (whichever replica it runs on: the note is under the shared DATA_DIR). At
 * most MAX_REFUSAL_NOTES_PER_STUDY a study (concurrent refusals may pass it by a few).
 */
export async function noteRefusedSubOperation(
  paths: StudyStoragePaths,
  studyInstanceUid: string,
  refusal: { reason: string; failureReason: number; keptAs?: string },
): Promise<void> {
  const dir = paths.movedDir(studyInstanceUid);
  const names = await readdir(dir).catch(() => [] as string[]);
  if (names.filter((n) => n.endsWith('.refused')).length >= MAX_REFUSAL_NOTES_PER_STUDY) return;
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await writeFile(paths.movedRefusalFile(studyInstanceUid, randomUUID()), JSON.stringify(refusal), {
    mode: 0o600,
  });
}

/** The reasons of the refusals noted in `dir` since `fromMs`. */
async function refusalsSince(dir: string, fromMs: number): Promise<string[]> {
  const reasons: string[] = [];
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    if (!name.endsWith('.refused')) continue;
    const path = join(dir, name);
    const info = await stat(path).catch(() => undefined);
    if (!info || info.mtimeMs < fromMs) continue;
    const note = await readFile(path, 'utf8').catch(() => '{}');
    const reason = (JSON.parse(note) as { reason?: unknown }).reason;
    reasons.push(typeof reason === 'string' ? reason : 'refused');
  }
  return reasons;
}

/**
 * Deletes what moves that broke off left under moved/: a study's files once none of them is
 * younger than an hour (a move still running keeps adding files). Run with the expiry job.
 */
export async function sweepMoved(paths: StudyStoragePaths, now: Date): Promise<void> {
  for (const study of await readdir(paths.movedRoot).catch(() => [] as string[])) {
    const dir = join(paths.movedRoot, study);
    let newest = 0;
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const info = await stat(join(dir, name)).catch(() => undefined);
      if (info) newest = Math.max(newest, info.mtimeMs);
    }
    if (now.getTime() - newest < 60 * 60_000) continue;
    await removeSince(dir, 0);
    await rmdir(dir).catch(() => undefined); // only when empty
  }
}

async function bytesSince(dir: string, fromMs: number): Promise<number> {
  let total = 0;
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const info = await stat(join(dir, name)).catch(() => undefined);
    if (info && info.mtimeMs >= fromMs) total += info.size;
  }
  return total;
}

async function removeSince(dir: string, fromMs: number, untilMs = Infinity): Promise<void> {
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const path = join(dir, name);
    const info = await stat(path).catch(() => undefined);
    if (info && info.mtimeMs >= fromMs && info.mtimeMs < untilMs) await rm(path, { force: true });
  }
}
