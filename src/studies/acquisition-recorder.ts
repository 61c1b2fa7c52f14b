import { access, rm } from 'node:fs/promises';
import type { DataSource, EntityManager } from 'typeorm';
import { type AuditEventInput, writeAuditEvents } from '../persistence/audit-event.repository';
import {
  type AcquisitionRow,
  findAcquisition,
  markFailed,
  packagesOfStudy,
  updateAcquisition,
} from '../persistence/study-instance.repository';
import type { InstanceHeader } from './dicom-instance.validator';
import type { AssigningAuthority } from '../domain/order-request';
import {
  describeMismatches,
  IDENTITY_FIELDS,
  identityMismatches,
  type IdentityField,
} from './study-identity';
import { writeStudyPackage } from './study-package.writer';
import type { StudyStoragePaths } from './study-storage.paths';
import type {
  AcquiredStudy,
  PackagedStudy,
  StudyAcquisition,
  StudyAttributes,
  StudyRequest,
} from '../domain/study-acquirer.port';

/**
 * The steps every way of acquiring a study shares (pushed, DICOMweb pull, DIMSE pull): the
 * identity check, packaging with its record and audit event, failing, and noting why an
 * order waits. Written once so the sources cannot drift apart.
 */
export class AcquisitionRecorder {
  constructor(
    private readonly options: {
      dataSource: DataSource;
      paths: StudyStoragePaths;
      identityMatch?: readonly IdentityField[];
      now: () => Date;
    },
  ) {}

  /**
   * The first instance (or query answer) whose identifiers differ from the order's, as a
   * failed acquisition with the alert `study-identity-mismatch` and an audit event naming the
   * fields (masked); undefined when everything matches.
   */
  async identityMismatch(
    request: StudyRequest,
    studies: ReadonlyArray<{
      accessionNumber?: string;
      patientId?: string;
      issuerOfPatientId?: string;
      issuerOfAccessionNumber?: AssigningAuthority;
    }>,
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

  async fail(orderId: string, reason: string): Promise<StudyAcquisition> {
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

  /**
   * A PACS that could not be asked or a retrieve that did not complete: the order waits and
   * tries again. The reason goes on the order's timeline once per distinct reason (not on
   * every retry), so an analyst sees why the study has not come.
   */
  async retrieveProblem(orderId: string, source: string, reason: string): Promise<void> {
    const row = await findAcquisition(this.options.dataSource.manager, orderId);
    if (row?.failure_reason === reason) return;
    await this.options.dataSource.transaction(async (m) => {
      await updateAcquisition(m, orderId, { failure_reason: reason });
      await writeAuditEvents(m, [
        {
          kind: 'study.retrieve-problem',
          orderId,
          severity: 'warning',
          summary: `the study could not be retrieved yet; trying again: ${reason}`,
          detail: { source, reason },
        },
      ]);
    });
  }

  async packageAndRecord(
    request: StudyRequest,
    files: Array<{ path: string; header: InstanceHeader }>,
    source: AcquiredStudy['source'],
    sidecarHash: string | null,
    extra: Record<string, unknown>,
    /**
     * Asked once the ZIP is written, before it is recorded: an answer (waiting) when the files
     * packaged are no longer the study's (a resend replaced some while they were zipped), and
     * the package is removed instead of recorded.
     */
    superseded?: () => Promise<StudyAcquisition | undefined>,
  ): Promise<StudyAcquisition> {
    const packagedAt = this.options.now();
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
    const instead = await superseded?.();
    if (instead) {
      await rm(result.path, { force: true });
      return instead;
    }
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
    // …unless it is a record number a merge retired into the order's patient: said so.
    const mergedRecord =
      patientIdDiffers &&
      (request.retiredPatientIds ?? []).some(
        (r) => r.value.trim().toUpperCase() === study.attributes.patientId!.trim().toUpperCase(),
      );
    const differs = mergedRecord
      ? "; the images carry a record number the patient's merge or identifier change (ADT^A40, A47) retired (acquired before it)"
      : patientIdDiffers
        ? "; the Patient ID in the images differs from the order's"
        : '';
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
          summary: `study packaged for upload: ${study.instanceCount} instance(s) in ${study.seriesCount} series, ${result.sizeBytes} bytes (${source})${differs}`,
          detail: {
            source,
            studyInstanceUid: study.studyInstanceUid,
            instances: study.instanceCount,
            series: study.seriesCount,
            sizeBytes: result.sizeBytes,
            sidecar: Boolean(request.sidecar),
            patientIdDiffers,
            ...(mergedRecord ? { patientIdMergedRecord: true } : {}),
            otherPackages: others.map((o) => ({ orderId: o.orderId, packagedAt: o.packagedAt })),
            ...extra,
          },
        },
      ]);
    });
    return { status: 'ready', study: { ...study, otherPackages: others } };
  }

  async packageExists(row: AcquisitionRow): Promise<boolean> {
    if (!row.package_path) return false;
    return access(row.package_path).then(
      () => true,
      () => false,
    );
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

  async ready(study: AcquiredStudy, orderId: string): Promise<StudyAcquisition> {
    return {
      status: 'ready',
      study: { ...study, otherPackages: await this.otherPackages(study.studyInstanceUid, orderId) },
    };
  }

  private async otherPackages(studyInstanceUid: string, orderId: string): Promise<PackagedStudy[]> {
    return (await this.packagesOfStudy(studyInstanceUid)).filter((p) => p.orderId !== orderId);
  }
}

export function waiting(reason: string, retryAfterMs: number): StudyAcquisition {
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
    issuerOfPatientId: first('issuerOfPatientId'),
    ...(headers.find((h) => h.issuerOfAccessionNumber)
      ? {
          issuerOfAccessionNumber: headers.find((h) => h.issuerOfAccessionNumber)!
            .issuerOfAccessionNumber,
        }
      : {}),
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
