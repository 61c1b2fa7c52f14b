import { access, readdir, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { writeAuditEvents } from '../persistence/audit-event.repository';
import { sha256Hex } from '../common/hash';
import { AcquisitionRecorder, waiting } from './acquisition-recorder';
import type { DicomWebClient } from './dicomweb.client';
import { sweepMoved } from './dimse-pull';
import { BUSY_RETRY_MS, NOT_FOUND_RETRY_MS, type PacsSource, pullFromPacs } from './pacs-pull';
import type { IdentityField } from './study-identity';
import { StudyError } from './study.error';
import { nearMiss, withoutPadding } from '../mappings/dicom-identifiers';
import {
  type AcquisitionRow,
  claimInstances,
  clearLease,
  deleteExpiredUnmatched,
  deleteInstancesOfOrder,
  filesOfInstances,
  findAcquisition,
  heldAccessionsOtherThan,
  identitiesOfStudyOutsideOrder,
  unreleasedAcquisitions,
  instancesOfOrder,
  markReleased,
  renewLease,
  takeLease,
  updateAcquisition,
} from '../persistence/study-instance.repository';
import type { StudyStoragePaths } from './study-storage.paths';
import type {
  AcquiredStudy,
  PackagedStudy,
  StudyAcquirer,
  StudyAcquisition,
  StudyRequest,
} from '../domain/study-acquirer.port';

/**
 * Finds an order's study, waits until it has stopped growing, validates and packages it:
 *
 * 1. Instances pushed to us (STOW-RS, C-STORE) that match the order, claimed from the
 *    unmatched pool if they arrived before the order did. The quiet period runs from the
 *    last instance received.
 * 2. Otherwise, when a PACS is configured (pacs-pull.ts): QIDO-RS or C-FIND by Study
 *    Instance UID (or accession); the study is retrieved (WADO-RS, C-GET or C-MOVE) once its
 *    instance count has been the same for the quiet period. The count and since when it has
 *    held are kept in study_acquisitions, so any replica can continue after a restart.
 *    DICOMweb is asked first when both are configured; DIMSE when DICOMweb lacks the study
 *    or does not answer.
 *
 * A lease on the order's row keeps two workers from acquiring the same order at once.
 */

export interface StudyAcquirerOptions {
  dataSource: DataSource;
  paths: StudyStoragePaths;
  logger: Logger;
  /** Absent when DICOMWEB_URL is unset. */
  dicomWeb?: DicomWebClient;
  /** A DIMSE PACS (PACS_DIMSE_HOST), asked after DICOMweb. Neither: only pushed studies. */
  dimse?: PacsSource;
  quietPeriodSeconds: number;
  /** Identifiers that must match the order's (STUDY_IDENTITY_MATCH); default both. */
  identityMatch?: readonly IdentityField[];
  /**
   * The order's acquisition lease (default ACQUISITION_LEASE_MS), renewed every third of it
   * while acquire() works (a large WADO-RS retrieve takes minutes): a process killed
   * mid-acquisition holds the order for at most this long.
   */
  leaseMs?: number;
  now?: () => Date;
}

/** Short, because it is renewed while the work goes on; what a killed worker leaves lapses soon. */
export const ACQUISITION_LEASE_MS = 60_000;
const PACS_DOWN_RETRY_MS = 30_000;
/** A received file no row names is removed this long after it was placed (and swept as often). */
const ORPHAN_AGE_MS = 60 * 60_000;
const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
/** `packages/<order id>.zip` (or `.zip.partial`), `pulled/<order id>`. */
const ORDER_FILE = new RegExp(`^(${UUID})\\.zip(\\.partial)?$`);
const ORDER_DIR = new RegExp(`^${UUID}$`);
/** The `.<uuid>` of a copy's file name (StudyStoragePaths.instanceFile). */
const COPY_SUFFIX = /\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export class DefaultStudyAcquirer implements StudyAcquirer {
  private readonly now: () => Date;
  private readonly quietMs: number;
  private readonly recorder: AcquisitionRecorder;
  private readonly sources: PacsSource[];
  private lastOrphanSweep = -Infinity;

  constructor(private readonly options: StudyAcquirerOptions) {
    this.now = options.now ?? (() => new Date());
    this.quietMs = options.quietPeriodSeconds * 1000;
    this.recorder = new AcquisitionRecorder({
      dataSource: options.dataSource,
      paths: options.paths,
      identityMatch: options.identityMatch,
      now: this.now,
    });
    const web = options.dicomWeb;
    this.sources = [
      ...(web
        ? [
            {
              name: 'dicomweb' as const,
              findStudies: (q: StudyRequest) => web.findStudies(q),
              retrieveStudy: async (uid: string, dir: string) => ({
                files: await web.retrieveStudy(uid, dir),
              }),
              maxInstances: web.maxInstances,
            },
          ]
        : []),
      ...(options.dimse ? [options.dimse] : []),
    ];
  }

  async acquire(asked: StudyRequest): Promise<StudyAcquisition> {
    const ds = this.options.dataSource;
    // An accession of padding only (`   `, as a fixed-width RIS field sends "none") names no
    // study: queried, it is a universal match (PS3.4 §C.2.2.2.3; Orthanc's C-FIND answers
    // every study), and the identity check, which ignores padding, had nothing to compare, so
    // a PACS holding one study (or one of this patient) had it taken for the order's.
    const request: StudyRequest = {
      ...asked,
      accessionNumber:
        asked.accessionNumber == null
          ? asked.accessionNumber
          : withoutPadding(asked.accessionNumber) || null,
    };
    if (!request.studyInstanceUid && !request.accessionNumber) {
      return this.recorder.fail(
        request.orderId,
        'the order names neither a Study Instance UID nor an accession number',
      );
    }
    const now = this.now();
    const leaseMs = this.options.leaseMs ?? ACQUISITION_LEASE_MS;
    // The lease is on the database's clock, as every other lease: hosts' clocks differ and
    // jump, and one running ahead by more than the lease took a live replica's acquisition.
    const row = await ds.transaction((m) => takeLease(m, request.orderId, now, leaseMs));
    if (!row) return waiting('another worker is acquiring this study', BUSY_RETRY_MS);
    // A retrieve of a very large study may outlast the lease: keep it while we work.
    const renew = setInterval(
      () => void renewLease(ds, request.orderId, leaseMs).catch(() => undefined),
      Math.max(1000, leaseMs / 3),
    );
    renew.unref();
    try {
      return await this.acquireLeased(request, row);
    } catch (error) {
      if (error instanceof StudyError) {
        if (error.transient) {
          await this.recorder.retrieveProblem(request.orderId, row.source ?? 'pacs', error.message);
          return waiting(error.message, PACS_DOWN_RETRY_MS);
        }
        return await this.recorder.fail(request.orderId, error.message);
      }
      throw error;
    } finally {
      clearInterval(renew);
      await clearLease(ds, request.orderId);
    }
  }

  async release(orderId: string): Promise<void> {
    const ds = this.options.dataSource;
    const row = await findAcquisition(ds.manager, orderId);
    const removed = await ds.transaction(async (m) => {
      const instances = await deleteInstancesOfOrder(m, orderId);
      await markReleased(m, orderId);
      if (row || instances.length > 0) {
        const late = lateInstances(row, instances);
        const lateText = [
          late.notInPackage > 0
            ? `${late.notInPackage} instance(s) received after the study was packaged were not in the package`
            : '',
          late.resent > 0
            ? `${late.resent} instance(s) resent after the study was packaged (the package held the earlier copy)`
            : '',
        ]
          .filter(Boolean)
          .join('; ');
        await writeAuditEvents(m, [
          {
            kind: 'study.released',
            orderId,
            severity: lateText ? 'warning' : 'info',
            summary: `the study package and staged instances were deleted${lateText ? `; ${lateText}` : ''}`,
            detail: {
              instances: instances.length,
              hadPackage: Boolean(row?.package_path),
              ...(late.notInPackage > 0 ? { notInPackage: late.notInPackage } : {}),
              ...(late.resent > 0 ? { resentAfterPackaging: late.resent } : {}),
            },
          },
        ]);
      }
      return instances;
    });
    // Files go after the commit: a crash in between leaves files without rows, never rows
    // pointing at missing files.
    await Promise.all([
      ...removed.map((i) => rm(i.filePath, { force: true })),
      rm(this.options.paths.packageFile(orderId), { force: true }),
      rm(this.options.paths.pulledDir(orderId), { recursive: true, force: true }),
    ]);
  }

  async packagesOfStudy(studyInstanceUid: string): Promise<PackagedStudy[]> {
    return this.recorder.packagesOfStudy(studyInstanceUid);
  }

  /**
   * Deletes pushed instances that matched no order within their hold time (the job runs it
   * every minute). Returns how many were deleted.
   */
  async expireUnmatched(): Promise<number> {
    const now = this.now();
    const expired = await this.options.dataSource.transaction(async (m) => {
      const rows = await deleteExpiredUnmatched(m, now);
      if (rows.length > 0) {
        await writeAuditEvents(m, [
          {
            kind: 'study.expired',
            summary: `${rows.length} unmatched DICOM instance(s) deleted after their hold time`,
            detail: {
              instances: rows.length,
              studies: [...new Set(rows.map((r) => r.studyInstanceUid))],
            },
          },
        ]);
      }
      return rows;
    });
    await Promise.all(expired.map((r) => rm(r.filePath, { force: true })));
    await this.sweepIncoming(now);
    await sweepMoved(this.options.paths, now);
    if (now.getTime() - this.lastOrphanSweep >= ORPHAN_AGE_MS) {
      this.lastOrphanSweep = now.getTime();
      await this.sweepOrphanInstances(now);
    }
    return expired.length;
  }

  /**
   * Deletes files under `instances/` that no row names, an hour after they were placed: a copy
   * moved into place by a process killed before its row was committed (the sender had no
   * answer and sends it again), or the replaced copy of a resend, or an instance released,
   * whose removal after the commit a crash cut short. Nothing listed, matched or expired such
   * PHI. Walks the directory at the first run of the job after a start and hourly after that.
   */
  private async sweepOrphanInstances(now: Date): Promise<void> {
    const root = this.options.paths.instancesRoot;
    let removed = 0;
    for (const study of await readdir(root).catch(() => [] as string[])) {
      const dir = join(root, study);
      const names = await readdir(dir).catch(() => [] as string[]);
      if (names.length === 0) continue;
      // `<sop>.<uuid>.dcm` (`<sop>.dcm` before one file per copy, `<sop>.dcm.earlier-<uuid>`)
      const sops = [...new Set(names.map((n) => n.split('.dcm')[0]!.replace(COPY_SUFFIX, '')))];
      // compared as <study>/<file>: a row written where DATA_DIR was mounted elsewhere names
      // the same file by another absolute path, and that file is not an orphan
      const named = new Set(
        [...(await filesOfInstances(this.options.dataSource.manager, sops))].map(
          (f) => `${basename(dirname(f))}/${basename(f)}`,
        ),
      );
      for (const name of names) {
        const path = join(dir, name);
        if (named.has(`${study}/${name}`)) continue;
        const info = await stat(path).catch(() => undefined);
        if (!info?.isFile() || now.getTime() - info.mtimeMs < ORPHAN_AGE_MS) continue;
        await rm(path, { force: true });
        removed++;
      }
    }
    removed += await this.sweepReleasedFiles(now);
    if (removed > 0)
      this.options.logger.warn(
        { removed },
        'removed study files nothing names any more (left by a crash)',
      );
  }

  /**
   * Packages (`packages/<order>.zip`, `.partial`) and pulled instances (`pulled/<order>/`) of
   * an order whose study is released or was never acquired, an hour old: release() commits
   * first and removes the files after, so a process killed in between left the whole study on
   * disk with nothing leading to it. Names that are not an order id are not ours: left alone.
   */
  private async sweepReleasedFiles(now: Date): Promise<number> {
    const root = this.options.paths.root;
    const entries = [
      ...(await readdir(join(root, 'packages')).catch(() => [] as string[])).map((name) => ({
        path: join(root, 'packages', name),
        orderId: ORDER_FILE.exec(name)?.[1],
      })),
      ...(await readdir(join(root, 'pulled')).catch(() => [] as string[])).map((name) => ({
        path: join(root, 'pulled', name),
        orderId: ORDER_DIR.exec(name)?.[0],
      })),
    ].filter((e): e is { path: string; orderId: string } => e.orderId !== undefined);
    if (entries.length === 0) return 0;
    const live = await unreleasedAcquisitions(this.options.dataSource.manager, [
      ...new Set(entries.map((e) => e.orderId)),
    ]);
    let removed = 0;
    for (const e of entries) {
      if (live.has(e.orderId)) continue;
      const info = await stat(e.path).catch(() => undefined);
      if (!info || now.getTime() - info.mtimeMs < ORPHAN_AGE_MS) continue;
      await rm(e.path, { recursive: true, force: true });
      removed++;
    }
    return removed;
  }

  /**
   * For an order found by accession: held instances whose accession differs from the order's
   * only by letter case, white space or leading zeros (a modality keying it in lower case, a
   * system padding it with zeros). They are never claimed (identifiers match exactly, DESIGN.md
   * §5), but the analyst is told they are there rather than "nothing received". No values.
   */
  private async heldNearMiss(request: StudyRequest, now: Date): Promise<string | undefined> {
    const accession = withoutPadding(request.accessionNumber ?? '');
    if (request.studyInstanceUid || !accession) return undefined;
    const groups = (
      await heldAccessionsOtherThan(this.options.dataSource.manager, accession, now)
    ).flatMap((g) => {
      const near = nearMiss(accession, g.accessionNumber);
      return near ? [{ ...g, near }] : [];
    });
    if (groups.length === 0) return undefined;
    const instances = groups.reduce((n, g) => n + g.count, 0);
    const studies = new Set(groups.map((g) => g.studyInstanceUid)).size;
    const how = [...new Set(groups.map((g) => g.near))].join(' or ');
    return `${instances} held instance(s) of ${studies} ${studies === 1 ? 'study' : 'studies'} have an accession number that differs from the order’s only by ${how}: not used, identifiers must match exactly (correct the accession at the sender and send again, or give the order the Study Instance UID)`;
  }

  /**
   * Whether the order's pushed instances changed since `packaged` was read (an instance
   * replaced by a resend, or one more received): then the order waits for the quiet period
   * from the latest receipt, and the study is packaged again as it is then.
   */
  private async resentWhilePackaging(
    orderId: string,
    packaged: ReadonlyArray<{ filePath: string }>,
  ): Promise<StudyAcquisition | undefined> {
    const now = await instancesOfOrder(this.options.dataSource.manager, orderId);
    const before = new Set(packaged.map((p) => p.filePath));
    // none left: released meanwhile, not resent (the error stands)
    if (now.length === 0) return undefined;
    if (now.length === packaged.length && now.every((p) => before.has(p.filePath)))
      return undefined;
    const lastReceived = Math.max(...now.map((p) => p.receivedAt.getTime()));
    return waiting(
      `instances of the study were received again while it was being packaged; packaged once it has been quiet for ${this.quietMs / 1000} s`,
      lastReceived + this.quietMs - this.now().getTime(),
    );
  }

  /**
   * Deletes parts left in the incoming directory by a request or association that broke off
   * mid-instance (a crash, a dropped connection): anything older than an hour.
   */
  private async sweepIncoming(now: Date): Promise<void> {
    const dir = this.options.paths.incomingDir;
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const name of names) {
      if (!name.endsWith('.part')) continue;
      const path = join(dir, name);
      const info = await stat(path).catch(() => undefined);
      if (info && now.getTime() - info.mtimeMs > 60 * 60_000) await rm(path, { force: true });
    }
  }

  private async acquireLeased(
    request: StudyRequest,
    row: AcquisitionRow,
  ): Promise<StudyAcquisition> {
    const ds = this.options.dataSource;
    const now = this.now();
    const sidecarHash = request.sidecar ? sha256Hex(JSON.stringify(request.sidecar)) : null;

    // 1. Instances pushed to us.
    await ds.transaction(async (m) => {
      const claimed = await claimInstances(m, request.orderId, request, now);
      if (claimed.length > 0) {
        const count = claimed.reduce((n, c) => n + c.count, 0);
        await writeAuditEvents(m, [
          {
            kind: 'study.matched',
            orderId: request.orderId,
            summary: `${count} held instance(s) matched to the order by ${request.studyInstanceUid ? 'Study Instance UID' : 'accession'}`,
            detail: { instances: count, studies: claimed.map((c) => c.studyInstanceUid) },
          },
        ]);
      }
    });
    const pushed = await instancesOfOrder(ds.manager, request.orderId);
    if (pushed.length > 0) {
      const studies = [...new Set(pushed.map((p) => p.studyInstanceUid))];
      if (studies.length > 1) {
        return this.recorder.fail(
          request.orderId,
          `the received instances belong to ${studies.length} different studies`,
        );
      }
      if (request.studyInstanceUid && studies[0] !== request.studyInstanceUid) {
        // Matched by accession before the order learnt its Study Instance UID, which differs.
        return this.recorder.fail(
          request.orderId,
          'the received instances belong to another study than the order names',
        );
      }
      if (
        row.state === 'packaged' &&
        (row.study as AcquiredStudy | null)?.instanceCount === pushed.length &&
        // A resent (corrected) instance received after packaging makes the package stale.
        row.packaged_at !== null &&
        pushed.every((p) => p.receivedAt.getTime() <= new Date(row.packaged_at!).getTime()) &&
        row.sidecar_sha256 === sidecarHash &&
        (await this.recorder.packageExists(row))
      ) {
        return this.recorder.ready(row.study as AcquiredStudy, request.orderId);
      }
      const lastReceived = Math.max(...pushed.map((p) => p.receivedAt.getTime()));
      const quietEnd = lastReceived + this.quietMs;
      if (now.getTime() < quietEnd) {
        await updateAcquisition(ds.manager, request.orderId, {
          state: 'waiting',
          source: pushed[0]!.source,
          study_instance_uid: studies[0]!,
          observed_count: pushed.length,
          stable_since: new Date(lastReceived),
        });
        return waiting(
          `${pushed.length} instance(s) received; waiting for the study to be complete`,
          quietEnd - now.getTime(),
        );
      }
      // Pushed instances sit on the disk of the replica that received them: DATA_DIR must be
      // shared between replicas, or this replica cannot package them.
      const missing = (
        await Promise.all(
          pushed.map((p) =>
            access(p.filePath).then(
              () => 0,
              () => 1,
            ),
          ),
        )
      ).reduce<number>((n, x) => n + x, 0);
      if (missing > 0) {
        return waiting(
          `${missing} received instance file(s) are not on this replica's disk (is DATA_DIR shared?)`,
          NOT_FOUND_RETRY_MS,
        );
      }
      // The study is checked whole, as a pull checks every instance the PACS sends: a series
      // of it received under another accession or patient (held, or matched to another order)
      // is refused with it. Before, an order found by accession took only its own series and
      // packaged a part of the study as the whole (the rest went to another order, or waited).
      const elsewhere = await identitiesOfStudyOutsideOrder(
        ds.manager,
        studies[0]!,
        request.orderId,
      );
      const pushedMismatch = await this.recorder.identityMismatch(
        request,
        [...pushed.map((p) => p.header), ...elsewhere],
        pushed[0]!.source,
      );
      if (pushedMismatch) return pushedMismatch;
      // A sender may resend the study while it is zipped (a router retrying on its own
      // timeout): each resent copy replaces a stored file and the earlier copy is removed. The
      // package is then not the study as it now is: it is dropped, and the study packaged once
      // it is quiet again, from the copies received last. Before, the ZIP writer met a removed
      // file and the acquisition threw (retried as a job error for as long as resends came),
      // or a copy replaced after it was read went up with the newer one recorded.
      const resent = () => this.resentWhilePackaging(request.orderId, pushed);
      try {
        return await this.recorder.packageAndRecord(
          request,
          pushed.map((p) => ({ path: p.filePath, header: p.header })),
          pushed[0]!.source,
          sidecarHash,
          {},
          resent,
        );
      } catch (error) {
        const instead = (error as NodeJS.ErrnoException).code === 'ENOENT' && (await resent());
        if (instead) return instead;
        throw error;
      }
    }

    // 2. Pull from the PACS.
    if (this.sources.length === 0) {
      const nearly = await this.heldNearMiss(request, now);
      if (nearly) {
        await this.recorder.retrieveProblem(request.orderId, 'pushed', nearly);
        return waiting(
          `no instances of this study have been received yet; ${nearly}`,
          NOT_FOUND_RETRY_MS,
        );
      }
      return waiting('no instances of this study have been received yet', NOT_FOUND_RETRY_MS);
    }
    return pullFromPacs(
      {
        dataSource: ds,
        paths: this.options.paths,
        recorder: this.recorder,
        sources: this.sources,
        quietMs: this.quietMs,
        now: this.now,
      },
      request,
      row,
      sidecarHash,
    );
  }
}

/**
 * Pushed instances released with an order that its package did not hold as released: received
 * after it was packaged (a late series, matched to the order while it was uploaded), or resent
 * after it (the package held the earlier copy). They were deleted with the rest and the
 * timeline said only "deleted": nobody learnt the study had been analysed without them.
 */
function lateInstances(
  row: AcquisitionRow | undefined,
  released: ReadonlyArray<{ seriesInstanceUid: string; sopInstanceUid: string; receivedAt: Date }>,
): { notInPackage: number; resent: number } {
  const study = row?.study as AcquiredStudy | null | undefined;
  if (!row?.packaged_at || !study?.instances) return { notInPackage: 0, resent: 0 };
  const packagedAt = new Date(row.packaged_at).getTime();
  // by series and SOP UID, as instances are recorded (one SOP UID may be in two series)
  const key = (i: { seriesInstanceUid: string; sopInstanceUid: string }) =>
    `${i.seriesInstanceUid}/${i.sopInstanceUid}`;
  const packaged = new Set(study.instances.map(key));
  let notInPackage = 0;
  let resent = 0;
  for (const i of released) {
    if (!packaged.has(key(i))) notInPackage++;
    else if (i.receivedAt.getTime() > packagedAt) resent++;
  }
  return { notInPackage, resent };
}
