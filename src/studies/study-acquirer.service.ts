import { access, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import {
  describeMismatches,
  IDENTITY_FIELDS,
  identityMismatches,
  type IdentityField,
} from './study-identity';
import type { Logger } from 'pino';
import type { DataSource, EntityManager } from 'typeorm';
import { type AuditEventInput, writeAuditEvents } from '../persistence/audit-event.repository';
import { sha256Hex } from '../common/hash';
import { checkInstanceFile, type InstanceHeader } from './dicom-instance.validator';
import { isDicomUid } from './dicom-uid';
import type { DicomWebClient } from './dicomweb.client';
import { StudyError } from './study.error';
import {
  type AcquisitionRow,
  claimInstances,
  clearLease,
  deleteExpiredUnmatched,
  deleteInstancesOfOrder,
  findAcquisition,
  instancesOfOrder,
  markFailed,
  markReleased,
  packagesOfStudy,
  renewLease,
  takeLease,
  updateAcquisition,
} from '../persistence/study-instance.repository';
import { writeStudyPackage } from './study-package.writer';
import type { StudyStoragePaths } from './study-storage.paths';
import type {
  AcquiredStudy,
  PackagedStudy,
  StudyAcquirer,
  StudyAcquisition,
  StudyAttributes,
  StudyRequest,
} from '../domain/study-acquirer.port';

/**
 * Finds an order's study, waits until it has stopped growing, validates and packages it:
 *
 * 1. Instances pushed to us (STOW-RS, C-STORE) that match the order, claimed from the
 *    unmatched pool if they arrived before the order did. The quiet period runs from the
 *    last instance received.
 * 2. Otherwise, when a PACS is configured: QIDO-RS by Study Instance UID (or accession);
 *    the study is retrieved (WADO-RS, streamed to disk) once its instance count has been the
 *    same for the quiet period. The count and since when it has held are kept in
 *    study_acquisitions, so any replica can continue after a restart.
 *
 * A lease on the order's row keeps two workers from acquiring the same order at once.
 */

export interface StudyAcquirerOptions {
  dataSource: DataSource;
  paths: StudyStoragePaths;
  logger: Logger;
  /** Absent when DICOMWEB_URL is unset: only pushed studies are used. */
  dicomWeb?: DicomWebClient;
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
const NOT_FOUND_RETRY_MS = 60_000;
const BUSY_RETRY_MS = 5_000;
const PACS_DOWN_RETRY_MS = 30_000;

export class DefaultStudyAcquirer implements StudyAcquirer {
  private readonly now: () => Date;
  private readonly quietMs: number;

  constructor(private readonly options: StudyAcquirerOptions) {
    this.now = options.now ?? (() => new Date());
    this.quietMs = options.quietPeriodSeconds * 1000;
  }

  async acquire(request: StudyRequest): Promise<StudyAcquisition> {
    const ds = this.options.dataSource;
    if (!request.studyInstanceUid && !request.accessionNumber) {
      return this.fail(
        request.orderId,
        'the order names neither a Study Instance UID nor an accession number',
      );
    }
    const now = this.now();
    const leaseMs = this.options.leaseMs ?? ACQUISITION_LEASE_MS;
    const leaseUntil = new Date(now.getTime() + leaseMs);
    const row = await ds.transaction((m) => takeLease(m, request.orderId, now, leaseUntil));
    if (!row) return waiting('another worker is acquiring this study', BUSY_RETRY_MS);
    // A retrieve of a very large study may outlast the lease: keep it while we work.
    const renew = setInterval(
      () =>
        void renewLease(ds, request.orderId, new Date(this.now().getTime() + leaseMs)).catch(
          () => undefined,
        ),
      Math.max(1000, leaseMs / 3),
    );
    renew.unref();
    try {
      return await this.acquireLeased(request, row);
    } catch (error) {
      if (error instanceof StudyError) {
        if (error.transient) return waiting(error.message, PACS_DOWN_RETRY_MS);
        return await this.fail(request.orderId, error.message);
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
        await writeAuditEvents(m, [
          {
            kind: 'study.released',
            orderId,
            summary: 'the study package and staged instances were deleted',
            detail: { instances: instances.length, hadPackage: Boolean(row?.package_path) },
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
    const rows = await packagesOfStudy(this.options.dataSource.manager, studyInstanceUid);
    return rows.map((r) => ({
      orderId: r.orderId,
      studyInstanceUid,
      packagedAt: r.packagedAt.toISOString(),
      sizeBytes: r.sizeBytes,
    }));
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
    return expired.length;
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
        return this.fail(
          request.orderId,
          `the received instances belong to ${studies.length} different studies`,
        );
      }
      if (request.studyInstanceUid && studies[0] !== request.studyInstanceUid) {
        // Matched by accession before the order learnt its Study Instance UID, which differs.
        return this.fail(
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
        (await this.packageExists(row))
      ) {
        return {
          status: 'ready',
          study: await this.withOthers(row.study as AcquiredStudy, request.orderId),
        };
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
      const pushedMismatch = await this.identityMismatch(
        request,
        pushed.map((p) => p.header),
        pushed[0]!.source,
      );
      if (pushedMismatch) return pushedMismatch;
      return this.packageAndRecord(
        request,
        pushed.map((p) => ({ path: p.filePath, header: p.header })),
        pushed[0]!.source,
        sidecarHash,
        {},
      );
    }

    // 2. Pull from the PACS.
    const client = this.options.dicomWeb;
    if (!client) {
      return waiting('no instances of this study have been received yet', NOT_FOUND_RETRY_MS);
    }
    if (
      row.state === 'packaged' &&
      row.source === 'dicomweb' &&
      row.sidecar_sha256 === sidecarHash &&
      (await this.packageExists(row))
    ) {
      return {
        status: 'ready',
        study: await this.withOthers(row.study as AcquiredStudy, request.orderId),
      };
    }
    const found = await client.findStudies(request);
    if (found.length === 0) {
      await updateAcquisition(ds.manager, request.orderId, {
        state: 'waiting',
        observed_count: null,
        stable_since: null,
      });
      return waiting(
        'the study is not in the PACS yet',
        Math.max(this.quietMs, NOT_FOUND_RETRY_MS),
      );
    }
    if (found.length > 1) {
      throw new StudyError(
        'ambiguous_study',
        `the accession number matches ${found.length} studies in the PACS`,
      );
    }
    const study = found[0]!;
    if (!isDicomUid(study.studyInstanceUid)) {
      // Never used in a URL or a path: a PACS answer is input like any other.
      throw new StudyError(
        'invalid_study',
        'the PACS answered a Study Instance UID that is not a UID',
      );
    }
    if (request.studyInstanceUid && study.studyInstanceUid !== request.studyInstanceUid) {
      throw new StudyError('ambiguous_study', 'the PACS answered with another Study Instance UID');
    }
    // The PACS's answer is checked before anything is retrieved: a study of another patient
    // or accession is never fetched, let alone uploaded.
    const answerMismatch = await this.identityMismatch(request, [study], 'dicomweb');
    if (answerMismatch) return answerMismatch;
    const count = study.instanceCount ?? -1;
    const stableSince = row.stable_since ? new Date(row.stable_since).getTime() : undefined;
    if (count === 0) {
      return waiting(
        'the study has no instances in the PACS yet',
        Math.max(this.quietMs, BUSY_RETRY_MS),
      );
    }
    if (
      row.observed_count !== count ||
      row.study_instance_uid !== study.studyInstanceUid ||
      stableSince === undefined
    ) {
      // A new or changed count starts the quiet period again (modalities send for minutes).
      await updateAcquisition(ds.manager, request.orderId, {
        state: 'waiting',
        source: 'dicomweb',
        study_instance_uid: study.studyInstanceUid,
        observed_count: count,
        stable_since: now,
      });
      return waiting(
        `${count < 0 ? 'an unknown number of' : count} instance(s) in the PACS; waiting for the count to settle`,
        this.quietMs,
      );
    }
    if (now.getTime() < stableSince + this.quietMs) {
      return waiting(
        `${count} instance(s) in the PACS; waiting for the count to settle`,
        stableSince + this.quietMs - now.getTime(),
      );
    }

    const dir = this.options.paths.pulledDir(request.orderId);
    await rm(dir, { recursive: true, force: true });
    const files = await client.retrieveStudy(study.studyInstanceUid, dir);
    const checked: Array<{ path: string; header: InstanceHeader }> = [];
    const problems: string[] = [];
    for (const [i, f] of files.entries()) {
      const check = await checkInstanceFile(f.path, { expectedStudyUid: study.studyInstanceUid });
      if (check.ok) checked.push({ path: f.path, header: check.header });
      else problems.push(`instance ${i + 1}: ${check.reason}`);
    }
    if (problems.length > 0 || checked.length === 0) {
      await rm(dir, { recursive: true, force: true });
      const reason =
        checked.length === 0 && problems.length === 0
          ? 'the PACS returned no instances'
          : `${problems.length} of ${files.length} retrieved instance(s) are not valid DICOM: ${problems.slice(0, 3).join('; ')}${problems.length > 3 ? '; …' : ''}`;
      throw new StudyError('invalid_study', reason);
    }
    const retrievedMismatch = await this.identityMismatch(
      request,
      checked.map((c) => c.header),
      'dicomweb',
    );
    if (retrievedMismatch) {
      await rm(dir, { recursive: true, force: true });
      return retrievedMismatch;
    }
    return this.packageAndRecord(request, checked, 'dicomweb', sidecarHash, {
      qidoCount: count,
      retrieved: files.length,
    });
  }

  private async packageAndRecord(
    request: StudyRequest,
    files: Array<{ path: string; header: InstanceHeader }>,
    source: AcquiredStudy['source'],
    sidecarHash: string | null,
    extra: Record<string, unknown>,
  ): Promise<StudyAcquisition> {
    const packagedAt = this.now();
    const target = this.options.paths.packageFile(request.orderId);
    const result = await writeStudyPackage(
      target,
      files.map((f) => ({
        path: f.path,
        seriesInstanceUid: f.header.seriesInstanceUid,
        sopInstanceUid: f.header.sopInstanceUid,
      })),
      request.sidecar ?? null,
      packagedAt,
    );
    const headers = files.map((f) => f.header);
    const study: AcquiredStudy = {
      studyInstanceUid: headers[0]!.studyInstanceUid,
      packagePath: result.path,
      sizeBytes: result.sizeBytes,
      instanceCount: headers.length,
      seriesCount: new Set(headers.map((h) => h.seriesInstanceUid)).size,
      instances: headers.map((h) => ({
        sopClassUid: h.sopClassUid,
        sopInstanceUid: h.sopInstanceUid,
        seriesInstanceUid: h.seriesInstanceUid,
      })),
      attributes: attributesOf(headers),
      source,
      packagedAt: packagedAt.toISOString(),
    };
    const others = await this.otherPackages(study.studyInstanceUid, request.orderId);
    // Patient ID domains differ between RIS and PACS, so a different ID is not refused; it is
    // flagged for a human to check (wrong-patient studies must not pass unnoticed).
    const patientIdDiffers =
      Boolean(request.patientId && study.attributes.patientId) &&
      request.patientId!.trim().toUpperCase() !== study.attributes.patientId!.trim().toUpperCase();
    await this.options.dataSource.transaction(async (m) => {
      await updateAcquisition(m, request.orderId, {
        state: 'packaged',
        source,
        study_instance_uid: study.studyInstanceUid,
        observed_count: study.instanceCount,
        package_path: result.path,
        package_size: String(result.sizeBytes),
        packaged_at: packagedAt,
        sidecar_sha256: sidecarHash,
        study,
        failure_reason: null,
      });
      await writeAuditEvents(m, [
        {
          kind: 'study.packaged',
          orderId: request.orderId,
          severity: patientIdDiffers ? 'warning' : 'info',
          summary: `study packaged for upload: ${study.instanceCount} instance(s) in ${study.seriesCount} series, ${result.sizeBytes} bytes (${source})${patientIdDiffers ? "; the Patient ID in the images differs from the order's" : ''}`,
          detail: {
            source,
            studyInstanceUid: study.studyInstanceUid,
            instances: study.instanceCount,
            series: study.seriesCount,
            sizeBytes: result.sizeBytes,
            sidecar: Boolean(request.sidecar),
            patientIdDiffers,
            otherPackages: others.map((o) => ({ orderId: o.orderId, packagedAt: o.packagedAt })),
            ...extra,
          },
        },
      ]);
    });
    return { status: 'ready', study: { ...study, otherPackages: others } };
  }

  /**
   * The first instance (or QIDO answer) whose identifiers differ from the order's, as a failed
   * acquisition with the alert `study-identity-mismatch` and an audit event naming the fields
   * (masked); undefined when everything matches.
   */
  private async identityMismatch(
    request: StudyRequest,
    studies: ReadonlyArray<{ accessionNumber?: string; patientId?: string }>,
    source: string,
  ): Promise<StudyAcquisition | undefined> {
    const required = this.options.identityMatch ?? IDENTITY_FIELDS;
    for (const study of studies) {
      const mismatches = identityMismatches(request, study, required);
      if (mismatches.length === 0) continue;
      const reason = `the study's identifiers do not match the order: ${describeMismatches(mismatches)}`;
      await this.options.dataSource.transaction(async (m) => {
        await writeAuditEvents(m, [
          {
            kind: 'study.identity-mismatch',
            orderId: request.orderId,
            severity: 'error',
            summary: `study not used (${source}): ${mismatches.map((x) => x.field).join(', ')} differ from the order`,
            detail: { source, mismatches, required },
          },
        ]);
      });
      await this.fail(request.orderId, reason);
      return { status: 'failed', reason, alert: 'study-identity-mismatch' };
    }
    return undefined;
  }

  private async fail(orderId: string, reason: string): Promise<StudyAcquisition> {
    await this.options.dataSource.transaction(async (m: EntityManager) => {
      await markFailed(m, orderId, reason);
      const event: AuditEventInput = {
        kind: 'study.failed',
        orderId,
        severity: 'error',
        summary: `the study cannot be used: ${reason}`,
        detail: { reason },
      };
      await writeAuditEvents(m, [event]);
    });
    return { status: 'failed', reason };
  }

  private async packageExists(row: AcquisitionRow): Promise<boolean> {
    if (!row.package_path) return false;
    return access(row.package_path).then(
      () => true,
      () => false,
    );
  }

  private async otherPackages(studyInstanceUid: string, orderId: string): Promise<PackagedStudy[]> {
    return (await this.packagesOfStudy(studyInstanceUid)).filter((p) => p.orderId !== orderId);
  }

  private async withOthers(study: AcquiredStudy, orderId: string): Promise<AcquiredStudy> {
    return { ...study, otherPackages: await this.otherPackages(study.studyInstanceUid, orderId) };
  }
}

function waiting(reason: string, retryAfterMs: number): StudyAcquisition {
  return { status: 'waiting', reason, retryAfterMs: Math.max(1000, Math.ceil(retryAfterMs)) };
}

/** Study-level attributes from the instances (the first that has each one). */
function attributesOf(headers: readonly InstanceHeader[]): StudyAttributes {
  const first = <K extends keyof InstanceHeader>(k: K) =>
    headers.find((h) => h[k])?.[k] as string | undefined;
  return {
    studyInstanceUid: headers[0]!.studyInstanceUid,
    accessionNumber: first('accessionNumber'),
    patientId: first('patientId'),
    patientName: first('patientName'),
    patientBirthDate: first('patientBirthDate'),
    patientSex: first('patientSex'),
    studyDate: first('studyDate'),
    studyTime: first('studyTime'),
    studyId: first('studyId'),
    studyDescription: first('studyDescription'),
    referringPhysicianName: first('referringPhysicianName'),
    modalities: [...new Set(headers.map((h) => h.modality).filter((m): m is string => Boolean(m)))],
  };
}
