import { createHash, randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readdir, rename, rm, rmdir, stat, utimes } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { once } from 'node:events';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { type AuditEventInput, writeAuditEvents } from '../persistence/audit-event.repository';
import { checkInstanceFile, FAILURE_REASON, type InstanceHeader } from './dicom-instance.validator';
import {
  baseMediaType,
  boundaryOf,
  mediaTypeParameter,
  readMultipart,
} from './multipart-related.parser';
import { closeQuietly, closeStream } from './file-streams';
import { inflateIfDeflated } from './deflated-instance';
import { StudyError } from './study.error';
import {
  countHeldUnmatched,
  findOrderForInstance,
  instanceHasRow,
  lockInstances,
  retrieveOfStudyUnderWay,
  type PushSource,
  upsertInstance,
} from '../persistence/study-instance.repository';
import type { StudyStoragePaths } from './study-storage.paths';
import { ACQUIRE_STUDY_JOB } from '../domain/study-acquirer.port';
import type { JobQueue } from '../jobs/job-queue';

/**
 * Receives pushed DICOM instances (STOW-RS, PS3.18 §10.5; the C-STORE SCP uses the same
 * intake): each part is streamed to disk, validated, filed under its SOP Instance UID,
 * matched to an order or held, and recorded with its audit events in one transaction that
 * commits before the sender gets its answer.
 */

export interface StowOutcome {
  /** 200 all stored, 202 some stored, 409 none stored (PS3.18 §10.5.3, Table 10.5.3-1). */
  httpStatus: 200 | 202 | 409;
  /** The Store Instances Response Module as DICOM JSON (PS3.18 §10.5.3.1, §F.2). */
  body: Record<string, unknown>;
  stored: number;
  failed: number;
}

export interface ReceivedInstance {
  header: InstanceHeader;
  /** A file under the incoming directory; moved into place by `file()`. */
  tempPath: string;
  sizeBytes: number;
  /** What was tolerated in it (recorded in its `study.received` entry), e.g. meta elements dropped. */
  quirks?: string[];
}

export interface RefusedInstance {
  failureReason: number;
  reason: string;
  sopClassUid?: string;
  sopInstanceUid?: string;
  /** The refused bytes as received, under `refused/` (StudyStoragePaths.refusedFile). */
  keptAs?: string;
  /** What was received, kept or not: an analyst can match it to the sender's copy. */
  sizeBytes?: number;
  sha256?: string;
  /** Why the bytes were not kept (a limit on refused files), when they were not. */
  notKept?: string;
}

/**
 * How many refused files one STOW-RS request or one C-STORE association has kept so far
 * (STOW_MAX_KEPT_REFUSED); one per request or association, held by its caller.
 */
export interface RefusedTally {
  kept: number;
}

export interface StowServiceOptions {
  dataSource: DataSource;
  paths: StudyStoragePaths;
  logger: Logger;
  maxRequestBytes: number;
  /**
   * Most parts one request may hold (STOW_MAX_INSTANCES, default 10,000); one more makes it
   * 413. Each part is a file while it is read and an entry of the answer and the audit.
   */
  maxInstances?: number;
  /**
   * Refused parts one request or association keeps byte for byte (STOW_MAX_KEPT_REFUSED,
   * default 20); the rest are audited by reason, size and SHA-256, their bytes deleted.
   */
  maxKeptRefused?: number;
  /** Refused files under `refused/` at once (STOW_MAX_KEPT_REFUSED_TOTAL, default 1000). */
  maxKeptRefusedTotal?: number;
  /**
   * Unmatched instances held at once per sender (STUDY_MAX_HELD_UNMATCHED_PER_SENDER, default
   * 50,000) and in all (STUDY_MAX_HELD_UNMATCHED_TOTAL, default 200,000); past either, a new
   * one that matches no order is refused (A700). Each held one is a file and a row for the
   * hold: one sender token pushing 10,000 tiny valid instances a request filled both unbounded.
   */
  maxHeldUnmatchedPerSender?: number;
  maxHeldUnmatchedTotal?: number;
  unmatchedHoldMinutes: number;
  /** When given, an order whose instances arrived is told at once (ACQUIRE_STUDY_JOB). */
  jobs?: Pick<JobQueue, 'enqueue' | 'kick'>;
  now?: () => Date;
}

export class StowService {
  private readonly now: () => Date;
  /** Files under `refused/`, counted from the directory once, then kept up to date. */
  private refusedFiles?: Promise<{ count: number }>;

  constructor(private readonly options: StowServiceOptions) {
    this.now = options.now ?? (() => new Date());
  }

  /**
   * Reads a STOW-RS request body. Throws StudyError for a request that cannot be read at all
   * (media type, boundary, size); per-instance problems go into the FailedSOPSequence.
   */
  async receive(input: {
    body: AsyncIterable<Buffer>;
    contentType: string | undefined;
    contentLength?: number;
    targetStudyUid?: string;
    sender: string | null;
  }): Promise<StowOutcome> {
    const contentType = input.contentType ?? '';
    // PS3.18 §10.5.1.2: a multipart/related payload whose root type is application/dicom;
    // the metadata + bulk data forms (dicom+json, dicom+xml) are not supported here.
    if (baseMediaType(contentType) !== 'multipart/related') {
      throw new StudyError(
        'unsupported_media_type',
        'Content-Type must be multipart/related; type="application/dicom"',
      );
    }
    // The root type's own parameters (`type="application/dicom; transfer-syntax=…"`, as some
    // clients quote it) do not change what it is: compared without them.
    const rootType = mediaTypeParameter(contentType, 'type');
    if (rootType !== undefined && baseMediaType(rootType) !== 'application/dicom') {
      throw new StudyError(
        'unsupported_media_type',
        `only type="application/dicom" parts are supported (got ${rootType.slice(0, 40)})`,
      );
    }
    const boundary = boundaryOf(contentType);
    if (!boundary)
      throw new StudyError('bad_multipart', 'the multipart Content-Type has no boundary');
    const limit = this.options.maxRequestBytes;
    if (input.contentLength !== undefined && input.contentLength > limit) {
      throw new StudyError('too_large', `the request body exceeds ${limit} bytes`);
    }

    await mkdir(this.options.paths.incomingDir, { recursive: true, mode: 0o700 });
    const accepted: ReceivedInstance[] = [];
    const refused: RefusedInstance[] = [];
    let tempPath: string | undefined;
    let out: ReturnType<typeof createWriteStream> | undefined;
    let partType = '';
    let parts = 0;
    // What the request's instances may take on disk together, inflated ones as inflated: each
    // deflated part was held to the whole limit on its own, so a few MB of deflate bombs
    // stored gigabytes per part (a 40 MB request of 4 MiB bombs, 40 GiB under the 4 GiB limit).
    let budget = limit;
    const maxParts = this.options.maxInstances ?? 10_000;
    const tally: RefusedTally = { kept: 0 };
    try {
      for await (const event of readMultipart(countBytes(input.body, limit), boundary)) {
        if (event.type === 'part') {
          if (++parts > maxParts)
            throw new StudyError(
              'too_large',
              `the request holds more than ${maxParts} parts (STOW_MAX_INSTANCES): send the study in several requests`,
            );
          partType = baseMediaType(event.headers['content-type']);
          tempPath = join(this.options.paths.incomingDir, `${randomUUID()}.part`);
          out = createWriteStream(tempPath, { mode: 0o600 });
        } else if (event.type === 'data') {
          if (!out!.write(event.chunk)) await once(out!, 'drain');
        } else {
          await closeStream(out!);
          out = undefined;
          const path = tempPath!;
          tempPath = undefined;
          if (partType !== '' && partType !== 'application/dicom') {
            refused.push({
              failureReason: FAILURE_REASON.cannotUnderstand,
              reason: `part is ${partType.slice(0, 40)}, not application/dicom`,
              ...(await this.keepRefused(path, tally)),
            });
            continue;
          }
          // Deflated instances are inflated to explicit VR little endian first (lossless).
          const inflated = await inflateIfDeflated(path, Math.max(0, budget));
          if (inflated.kind === 'refused') {
            const { failureReason, reason } = inflated;
            refused.push({ failureReason, reason, ...(await this.keepRefused(path, tally)) });
            continue;
          }
          const check = await checkInstanceFile(path, { expectedStudyUid: input.targetStudyUid });
          if (!check.ok) {
            refused.push({ ...check, ...(await this.keepRefused(path, tally)) });
            continue;
          }
          budget -= check.sizeBytes;
          accepted.push({ header: check.header, tempPath: path, sizeBytes: check.sizeBytes });
        }
      }
    } catch (error) {
      // Finish (not destroy) the file: destroying it with writes in flight makes fs report
      // them as failed writes after we have moved on.
      if (out) await closeQuietly(out);
      await Promise.all(
        [tempPath, ...accepted.map((a) => a.tempPath)]
          .filter(Boolean)
          .map((p) => rm(p!, { force: true })),
      );
      // Parts refused before the request was are kept under refused/: the audit names them
      // (else they were files no entry led to), and says why the request was refused.
      if (refused.length > 0 && error instanceof StudyError)
        await this.file([], 'stow', input.sender, refused, error.message).catch((e: Error) =>
          this.options.logger.error(
            { err: e.message },
            'audit of a refused STOW-RS request failed',
          ),
        );
      throw error;
    }
    if (accepted.length === 0 && refused.length === 0) {
      throw new StudyError('bad_multipart', 'the request holds no instances');
    }
    const filed = await this.file(accepted, 'stow', input.sender, refused);
    const allRefused = [...refused, ...filed.refused];
    this.options.logger.info(
      {
        stored: filed.stored.length,
        refused: allRefused.length,
        reasons: [...new Set(allRefused.map((r) => r.reason))].slice(0, 5),
      },
      'STOW-RS request processed',
    );
    return buildStoreResponse(filed.stored, allRefused);
  }

  /**
   * Keeps a refused part or C-STORE data set as received (DESIGN.md §5: bad input loses
   * nothing), under a UUID of ours in `refused/`, for STUDY_UNMATCHED_HOLD_MINUTES
   * (expireRefused). It used to be deleted at once: an analyst asked why a modality's
   * instances were refused had only the reason, never the bytes. Returns the UUID (keptAs),
   * and the size and SHA-256 of what was received either way.
   *
   * Bounded: the first STOW_MAX_KEPT_REFUSED of a request or association (`tally`) are kept,
   * and no more than STOW_MAX_KEPT_REFUSED_TOTAL files under `refused/` at once; past either,
   * the bytes are deleted and `notKept` says which limit. Each refused part was a file for
   * 24 h: six 0.8 MB requests of tiny parts left 60,000 files (inodes; the
   * DATA_DIR_MIN_FREE_BYTES check counts bytes), and the directory listing slowed with them.
   */
  async keepRefused(
    path: string,
    tally: RefusedTally,
  ): Promise<Pick<RefusedInstance, 'keptAs' | 'sizeBytes' | 'sha256' | 'notKept'>> {
    const { sizeBytes, sha256 } = await digest(path);
    const perRequest = this.options.maxKeptRefused ?? 20;
    const total = this.options.maxKeptRefusedTotal ?? 1000;
    const files = await this.refusedFileCount();
    const notKept =
      tally.kept >= perRequest
        ? `more than ${perRequest} refused in one request or association (STOW_MAX_KEPT_REFUSED)`
        : files.count >= total
          ? `${total} refused files already kept (STOW_MAX_KEPT_REFUSED_TOTAL)`
          : undefined;
    if (notKept) {
      await rm(path, { force: true });
      return { sizeBytes, sha256, notKept };
    }
    // Counted before the rename: parallel requests cannot all pass the same last slot.
    tally.kept++;
    files.count++;
    const id = randomUUID();
    try {
      await mkdir(this.options.paths.refusedDir, { recursive: true, mode: 0o700 });
      await rename(path, this.options.paths.refusedFile(id));
    } catch (error) {
      files.count--;
      throw error;
    }
    return { keptAs: id, sizeBytes, sha256 };
  }

  /**
   * Whether a DIMSE retrieve of this study is under way (an order's acquisition holds its
   * lease): only then does a refused sub-operation of our C-MOVE need a note for it.
   */
  dimseRetrieveUnderWay(studyInstanceUid: string): Promise<boolean> {
    return retrieveOfStudyUnderWay(this.options.dataSource, studyInstanceUid, 'dimse');
  }

  private refusedFileCount(): Promise<{ count: number }> {
    this.refusedFiles ??= readdir(this.options.paths.refusedDir)
      .catch(() => [] as string[])
      .then((names) => ({ count: names.length }));
    return this.refusedFiles;
  }

  /** Deletes refused files older than the hold (the studies.expire-unmatched job). */
  async expireRefused(): Promise<number> {
    const dir = this.options.paths.refusedDir;
    const oldest = this.now().getTime() - this.options.unmatchedHoldMinutes * 60_000;
    let deleted = 0;
    const files = await this.refusedFileCount();
    const keptBefore = files.count;
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const name of names) {
      const info = await stat(join(dir, name)).catch(() => undefined);
      if (info && info.mtimeMs < oldest) {
        await rm(join(dir, name), { force: true });
        deleted++;
      }
    }
    // Counted again from the listing (another replica sharing DATA_DIR keeps and expires files
    // too), with what this one kept during the sweep.
    files.count = Math.max(0, names.length - deleted + (files.count - keptBefore));
    return deleted;
  }

  /**
   * An association our C-STORE SCP refused or aborted, for the audit log: the calling and
   * called AE titles as sent, the peer address and the reason (no PHI; nothing was stored).
   */
  async recordRefusedAssociation(detail: {
    reason: string;
    callingAe: string;
    calledAe: string;
    peer: string;
    /** Refusals of the same kind from the same peer not written since the last entry. */
    alsoRefused?: number;
  }): Promise<void> {
    await this.options.dataSource.transaction(async (m) => {
      await writeAuditEvents(m, [
        {
          kind: 'study.association-refused',
          severity: 'warning',
          summary: `DICOM association from ${detail.peer} refused: ${detail.reason}`,
          actor: `dicom:${detail.callingAe}`,
          detail: { ...detail },
        },
      ]);
    });
  }

  /**
   * Files validated instances: moves each into place, then one transaction records them,
   * their matches and the audit trail. Shared with the C-STORE SCP. `refused` in the answer:
   * those of `accepted` that matched no order while the held-instance limit was reached
   * (A700, their files removed), to answer as refused; `stored`: the others.
   */
  async file(
    accepted: readonly ReceivedInstance[],
    source: PushSource,
    sender: string | null,
    refused: readonly RefusedInstance[] = [],
    /** Why the whole request was refused (its parts refused so far are recorded). */
    requestRefused?: string,
    /**
     * Those refused at the held-unmatched limit are left out of this audit entry: the caller
     * audits them with others (the C-STORE SCP, one entry per association).
     */
    auditOverLimit = true,
  ): Promise<{ stored: InstanceHeader[]; refused: RefusedInstance[] }> {
    if (accepted.length === 0 && refused.length === 0) return { stored: [], refused: [] };
    const now = this.now();
    const holdUntil = new Date(now.getTime() + this.options.unmatchedHoldMinutes * 60_000);
    const placed: Array<ReceivedInstance & { filePath: string }> = [];
    // Each copy is filed under a name of its own and its row names that file: a resend racing
    // an earlier copy (STOW-RS and C-STORE, or two retries) can never leave one copy's header
    // in the row and the other's bytes on disk, as the shared name did (the later rename won
    // the file, the later commit the row). Until the rows are committed, a placed file is ours
    // alone and is removed if they are not; the copy a committed row replaced is removed after.
    let superseded: string[];
    let overLimit: Array<RefusedInstance & { filePath: string }>;
    try {
      for (const a of accepted) {
        const filePath = this.options.paths.instanceFile(
          a.header.studyInstanceUid,
          a.header.sopInstanceUid,
          randomUUID(),
        );
        await mkdir(dirname(filePath), { recursive: true, mode: 0o700 });
        await rename(a.tempPath, filePath);
        placed.push({ ...a, filePath });
        // placed now: the orphan sweep counts a file's age from here (a part of a slow request
        // was written minutes before)
        const placedAt = new Date();
        await utimes(filePath, placedAt, placedAt);
      }
      ({ superseded, overLimit } = await this.record(
        placed,
        source,
        sender,
        refused,
        now,
        holdUntil,
        requestRefused,
        auditOverLimit,
      ));
    } catch (error) {
      await Promise.all(placed.map((p) => rm(p.filePath, { force: true })));
      await Promise.all(accepted.slice(placed.length).map((a) => rm(a.tempPath, { force: true })));
      throw error;
    }
    await Promise.all(superseded.map((path) => rm(path, { force: true })));
    // Refused at the limit: neither the file nor its study's directory stays (a directory per
    // study is a file slot too, and a flood may name a new study in every instance).
    for (const o of overLimit) {
      await rm(o.filePath, { force: true });
      await rmdir(dirname(o.filePath)).catch(() => undefined); // only when empty
    }
    const refusedFiles = new Set(overLimit.map((o) => o.filePath));
    return {
      stored: placed.filter((p) => !refusedFiles.has(p.filePath)).map((p) => p.header),
      refused: overLimit.map(({ filePath: _, ...r }) => r),
    };
  }

  /**
   * One transaction: the placed instances' rows, their matches to orders, the audit trail and
   * the acquire jobs. Returns the files of the earlier copies they replace (to remove), and the
   * instances refused at the held-unmatched limit (not recorded; their files to remove).
   */
  private async record(
    placed: ReadonlyArray<ReceivedInstance & { filePath: string }>,
    source: PushSource,
    sender: string | null,
    refused: readonly RefusedInstance[],
    now: Date,
    holdUntil: Date,
    requestRefused?: string,
    auditOverLimit = true,
  ): Promise<{
    superseded: string[];
    overLimit: Array<RefusedInstance & { filePath: string }>;
  }> {
    // Files of the earlier copies the placed ones replace.
    const superseded: string[] = [];
    const overLimit: Array<RefusedInstance & { filePath: string }> = [];
    const limits = {
      perSender: this.options.maxHeldUnmatchedPerSender ?? 50_000,
      total: this.options.maxHeldUnmatchedTotal ?? 200_000,
    };
    let matchedOrders = 0;
    await this.options.dataSource.transaction(async (m) => {
      const matches = new Map<
        string,
        { orderId: string; by: string; count: number; studies: Set<string> }
      >();
      const unmatched = new Set<string>();
      // Held (unmatched) instances now, counted when the first placed one matches no order.
      let held: { sender: number; total: number } | undefined;
      // Copies of one SOP Instance are recorded one after the other, so that each reads the
      // file of the copy before it (and removes it) after that one committed.
      await lockInstances(
        m,
        placed.map((p) => p.header.sopInstanceUid),
      );
      for (const p of placed) {
        const match = await findOrderForInstance(
          m,
          p.header.studyInstanceUid,
          p.header.accessionNumber,
        );
        const orderId = match && 'orderId' in match ? match.orderId : null;
        if (!orderId) {
          held ??= await countHeldUnmatched(m, sender, now, limits);
          const full =
            held.sender >= limits.perSender
              ? `${limits.perSender} from this sender (STUDY_MAX_HELD_UNMATCHED_PER_SENDER)`
              : held.total >= limits.total
                ? `${limits.total} from all senders (STUDY_MAX_HELD_UNMATCHED_TOTAL)`
                : undefined;
          // A resend of a held (or earlier matched) instance replaces its row: it adds nothing.
          if (full && !(await instanceHasRow(m, p.header))) {
            overLimit.push({
              failureReason: FAILURE_REASON.outOfResources,
              reason: `held unmatched instances at the limit: ${full}; matches no order`,
              sopClassUid: p.header.sopClassUid,
              sopInstanceUid: p.header.sopInstanceUid,
              filePath: p.filePath,
              ...(await digest(p.filePath)),
              notKept: 'refused at the held unmatched instance limit',
            });
            continue;
          }
        }
        const row = await upsertInstance(m, {
          header: p.header,
          source,
          sender,
          filePath: p.filePath,
          sizeBytes: p.sizeBytes,
          receivedAt: now,
          orderId,
          holdUntil,
        });
        superseded.push(...row.priorPaths.filter((prior) => prior !== p.filePath));
        if (row.orderId) {
          const entry = matches.get(row.orderId) ?? {
            orderId: row.orderId,
            by: match && 'by' in match ? match.by : 'earlier match',
            count: 0,
            studies: new Set<string>(),
          };
          entry.count++;
          entry.studies.add(p.header.studyInstanceUid);
          matches.set(row.orderId, entry);
        } else {
          unmatched.add(p.header.studyInstanceUid);
          if (held && !row.replaced) {
            held.sender++;
            held.total++;
          }
        }
      }
      const refusedFiles = new Set(overLimit.map((o) => o.filePath));
      const stored = placed.filter((p) => !refusedFiles.has(p.filePath));
      const allRefused = auditOverLimit ? [...refused, ...overLimit] : refused;
      const received = stored.length > 0 || allRefused.length > 0 || requestRefused;
      const receivedEvent: AuditEventInput = {
        kind: 'study.received',
        severity: allRefused.length > 0 ? 'warning' : 'info',
        summary: `${stored.length} DICOM instance(s) stored, ${allRefused.length} refused, over ${source === 'stow' ? 'STOW-RS' : 'C-STORE'}${requestRefused ? `; request refused: ${requestRefused}` : ''}`,
        actor: sender,
        detail: {
          source,
          ...(requestRefused ? { requestRefused } : {}),
          stored: stored.length,
          refused: allRefused.map((r) => ({
            failureReason: r.failureReason,
            reason: r.reason,
            sopInstanceUid: r.sopInstanceUid,
            keptAs: r.keptAs,
            sizeBytes: r.sizeBytes,
            sha256: r.sha256,
            notKept: r.notKept,
          })),
          ...(stored.some((p) => p.quirks?.length)
            ? {
                quirks: stored
                  .filter((p) => p.quirks?.length)
                  .map((p) => ({ sopInstanceUid: p.header.sopInstanceUid, quirks: p.quirks })),
              }
            : {}),
          studies: [...new Set(stored.map((p) => p.header.studyInstanceUid))],
          unmatchedStudies: [...unmatched],
          holdUntil: unmatched.size > 0 ? holdUntil.toISOString() : undefined,
        },
      };
      const events: AuditEventInput[] = [
        ...(received ? [receivedEvent] : []),
        ...[...matches.values()].map((x): AuditEventInput => ({
          kind: 'study.matched',
          orderId: x.orderId,
          summary: `${x.count} received instance(s) matched to the order by ${x.by}`,
          actor: sender,
          detail: { source, instances: x.count, studies: [...x.studies], matchedBy: x.by },
        })),
      ];
      await writeAuditEvents(m, events);
      for (const orderId of matches.keys()) {
        await this.options.jobs?.enqueue(
          ACQUIRE_STUDY_JOB,
          { orderId },
          { manager: m, jobKey: `acquire:${orderId}` },
        );
      }
      matchedOrders = matches.size;
    });
    if (matchedOrders > 0) this.options.jobs?.kick();
    return { superseded, overLimit };
  }
}

/** The Store Instances Response (PS3.18 §10.5.3.1) in the DICOM JSON model (PS3.18 §F.2). */
export function buildStoreResponse(
  stored: readonly InstanceHeader[],
  refused: readonly RefusedInstance[],
): StowOutcome {
  const body: Record<string, unknown> = {};
  if (refused.length > 0) {
    body['00081198'] = {
      vr: 'SQ',
      Value: refused.map((r) => ({
        ...(r.sopClassUid ? { '00081150': { vr: 'UI', Value: [r.sopClassUid] } } : {}),
        ...(r.sopInstanceUid ? { '00081155': { vr: 'UI', Value: [r.sopInstanceUid] } } : {}),
        '00081197': { vr: 'US', Value: [r.failureReason] },
      })),
    };
  }
  if (stored.length > 0) {
    body['00081199'] = {
      vr: 'SQ',
      Value: stored.map((s) => ({
        '00081150': { vr: 'UI', Value: [s.sopClassUid] },
        '00081155': { vr: 'UI', Value: [s.sopInstanceUid] },
      })),
    };
  }
  const httpStatus = refused.length === 0 ? 200 : stored.length > 0 ? 202 : 409;
  return { httpStatus, body, stored: stored.length, failed: refused.length };
}

/** The size and SHA-256 (hex) of a file. */
async function digest(path: string): Promise<{ sizeBytes: number; sha256: string }> {
  const hash = createHash('sha256');
  let sizeBytes = 0;
  for await (const chunk of createReadStream(path) as AsyncIterable<Buffer>) {
    hash.update(chunk);
    sizeBytes += chunk.length;
  }
  return { sizeBytes, sha256: hash.digest('hex') };
}

/** Passes the body through, failing once more than `limit` bytes have arrived. */
async function* countBytes(source: AsyncIterable<Buffer>, limit: number): AsyncGenerator<Buffer> {
  let total = 0;
  for await (const chunk of source) {
    total += chunk.length;
    if (total > limit) throw new StudyError('too_large', `the request body exceeds ${limit} bytes`);
    yield chunk;
  }
}
