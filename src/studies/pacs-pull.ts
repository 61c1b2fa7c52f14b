import { rm } from 'node:fs/promises';
import type { DataSource } from 'typeorm';
import { type AcquisitionRow, updateAcquisition } from '../persistence/study-instance.repository';
import { type AcquisitionRecorder, waiting } from './acquisition-recorder';
import { inflateIfDeflated } from './deflated-instance';
import { checkInstanceFile, type InstanceHeader } from './dicom-instance.validator';
import { isDicomUid } from './dicom-uid';
import type { QidoStudy, RetrievedFile } from './dicomweb.client';
import { StudyError } from './study.error';
import { authorityMismatch, identityMismatches } from './study-identity';
import type { StudyStoragePaths } from './study-storage.paths';
import type { StudyAcquisition, StudyRequest } from '../domain/study-acquirer.port';

/**
 * Pulling an order's study from a PACS, whatever it speaks: find the study (QIDO-RS or
 * C-FIND), check its identifiers, wait until its instance count has held for the quiet
 * period, retrieve it (WADO-RS, C-GET or C-MOVE) into the order's pulled directory, validate
 * and check every instance, package. The protocol lives behind PacsSource.
 */

/** One PACS, as the pull sees it. */
export interface PacsSource {
  /** Recorded as the acquisition's source ('dicomweb' or 'dimse'). */
  readonly name: 'dicomweb' | 'dimse';
  findStudies(query: {
    studyInstanceUid?: string | null;
    accessionNumber?: string | null;
  }): Promise<QidoStudy[]>;
  /**
   * Every instance of the study as files under `dir`, complete or not at all: a partial
   * retrieve throws (StudyError) and leaves nothing behind.
   */
  retrieveStudy(
    studyInstanceUid: string,
    dir: string,
  ): Promise<{ files: RetrievedFile[]; detail?: Record<string, unknown> }>;
  /** A study with more instances than this is not retrieved (the count is known first). */
  readonly maxInstances?: number;
}

export interface PullContext {
  dataSource: DataSource;
  paths: StudyStoragePaths;
  recorder: AcquisitionRecorder;
  /** In order of preference: the first that has the study is used. */
  sources: readonly PacsSource[];
  quietMs: number;
  now: () => Date;
  /**
   * The most a study's instances may take once deflated ones are inflated (default 4 GiB, as
   * DICOMWEB_MAX_BYTES): a small deflate bomb in a PACS cannot fill the disk.
   */
  maxStudyBytes?: number;
}

const DEFAULT_MAX_STUDY_BYTES = 4 * 1024 * 1024 * 1024;

export const NOT_FOUND_RETRY_MS = 60_000;
export const BUSY_RETRY_MS = 5_000;

export async function pullFromPacs(
  ctx: PullContext,
  request: StudyRequest,
  row: AcquisitionRow,
  sidecarHash: string | null,
): Promise<StudyAcquisition> {
  const { dataSource: ds, recorder, quietMs } = ctx;
  const now = ctx.now();
  if (
    row.state === 'packaged' &&
    ctx.sources.some((s) => s.name === row.source) &&
    row.sidecar_sha256 === sidecarHash &&
    (await recorder.packageExists(row))
  ) {
    return recorder.ready(row.study as never, request.orderId);
  }
  const { source, found, loose, otherIssuer } = await findInSources(ctx.sources, request);
  if (!source || found.length === 0) {
    await updateAcquisition(ds.manager, request.orderId, {
      state: 'waiting',
      observed_count: null,
      stable_since: null,
    });
    if (otherIssuer > 0 && source) {
      await recorder.retrieveProblem(
        request.orderId,
        source.name,
        `the PACS answered ${otherIssuer} study(ies) with the order's accession number issued by another authority (Issuer of Accession Number); not used`,
      );
    } else if (loose > 0 && source) {
      // On the timeline once: an analyst sees why a study the PACS "has" is not taken.
      await recorder.retrieveProblem(
        request.orderId,
        source.name,
        request.studyInstanceUid
          ? `the PACS answered ${loose} study(ies) for the Study Instance UID whose Study Instance UID is not the order's; not used`
          : `the PACS answered ${loose} study(ies) for the accession number whose Accession Number is not the order's (matched loosely, e.g. without letter case); not used`,
      );
    }
    return waiting('the study is not in the PACS yet', Math.max(quietMs, NOT_FOUND_RETRY_MS));
  }
  const study = oneStudy(found);
  if (!isDicomUid(study.studyInstanceUid)) {
    // Never used in a URL, a query or a path: a PACS answer is input like any other.
    throw new StudyError(
      'invalid_study',
      'the PACS answered a Study Instance UID that is not a UID',
    );
  }
  // The PACS's answer is checked before anything is retrieved: a study of another patient
  // or accession is never fetched, let alone uploaded.
  const answerMismatch = await recorder.identityMismatch(request, [study], source.name);
  if (answerMismatch) return answerMismatch;
  const count = study.instanceCount ?? -1;
  if (source.maxInstances !== undefined && count > source.maxInstances) {
    throw new StudyError(
      'too_large',
      `the study has ${count} instances in the PACS, more than the limit of ${source.maxInstances}`,
    );
  }
  const stableSince = row.stable_since ? new Date(row.stable_since).getTime() : undefined;
  if (count === 0) {
    return waiting('the study has no instances in the PACS yet', Math.max(quietMs, BUSY_RETRY_MS));
  }
  if (
    row.observed_count !== count ||
    row.study_instance_uid !== study.studyInstanceUid ||
    row.source !== source.name ||
    stableSince === undefined
  ) {
    // A new or changed count starts the quiet period again (modalities send for minutes).
    await updateAcquisition(ds.manager, request.orderId, {
      state: 'waiting',
      source: source.name,
      study_instance_uid: study.studyInstanceUid,
      observed_count: count,
      stable_since: now,
    });
    return waiting(
      `${count < 0 ? 'an unknown number of' : count} instance(s) in the PACS; waiting for the count to settle`,
      quietMs,
    );
  }
  if (now.getTime() < stableSince + quietMs) {
    return waiting(
      `${count} instance(s) in the PACS; waiting for the count to settle`,
      stableSince + quietMs - now.getTime(),
    );
  }

  const dir = ctx.paths.pulledDir(request.orderId);
  await rm(dir, { recursive: true, force: true });
  const { files, detail } = await source
    .retrieveStudy(study.studyInstanceUid, dir)
    .catch(async (error: unknown) => {
      // Nothing of a retrieve that broke off is kept (the source removes its files too).
      await rm(dir, { recursive: true, force: true });
      throw error;
    });
  if (count >= 0 && files.length !== count) {
    // The PACS counted one number and sent another: a partial answer (instances it could not
    // send now) or a study still growing. Never packaged: the quiet period runs again on the
    // PACS's next count. Before, whatever arrived was packaged and uploaded as the study.
    await rm(dir, { recursive: true, force: true });
    await updateAcquisition(ds.manager, request.orderId, {
      state: 'waiting',
      observed_count: null,
      stable_since: null,
    });
    const reason = `the PACS counts ${count} instance(s) but sent ${files.length}; asked again after the quiet period`;
    await recorder.retrieveProblem(request.orderId, source.name, reason);
    return waiting(reason, Math.max(quietMs, BUSY_RETRY_MS));
  }
  const checked: Array<{ path: string; header: InstanceHeader }> = [];
  const problems: string[] = [];
  let budget = ctx.maxStudyBytes ?? DEFAULT_MAX_STUDY_BYTES;
  for (const [i, f] of files.entries()) {
    // A PACS may keep (and send) an instance in Deflated Explicit VR Little Endian, a legal
    // transfer syntax it was refused for here while the same instance pushed by STOW-RS was
    // taken: inflated losslessly first, the same way (src/studies/deflated-instance.ts).
    const inflated = await inflateIfDeflated(f.path, Math.max(0, budget));
    if (inflated.kind === 'refused') {
      problems.push(`instance ${i + 1}: ${inflated.reason}`);
      continue;
    }
    // A C-GET sub-operation's data set must be the instance its C-STORE request named, as our
    // SCP requires of a C-STORE (A900): the request's UIDs are in the File Meta Information.
    const check = await checkInstanceFile(f.path, {
      expectedStudyUid: study.studyInstanceUid,
      ...(f.sop ? { expectedSop: f.sop } : {}),
    });
    if (check.ok) {
      checked.push({ path: f.path, header: check.header });
      budget -= check.sizeBytes;
    } else problems.push(`instance ${i + 1}: ${check.reason}`);
  }
  if (problems.length > 0 || checked.length === 0) {
    await rm(dir, { recursive: true, force: true });
    const reason =
      checked.length === 0 && problems.length === 0
        ? 'the PACS returned no instances'
        : `${problems.length} of ${files.length} retrieved instance(s) are not valid DICOM: ${problems.slice(0, 3).join('; ')}${problems.length > 3 ? '; …' : ''}`;
    throw new StudyError('invalid_study', reason);
  }
  const retrievedMismatch = await recorder.identityMismatch(
    request,
    checked.map((c) => c.header),
    source.name,
  );
  if (retrievedMismatch) {
    await rm(dir, { recursive: true, force: true });
    return retrievedMismatch;
  }
  return recorder.packageAndRecord(request, checked, source.name, sidecarHash, {
    qidoCount: count,
    retrieved: files.length,
    ...detail,
  });
}

/**
 * Asks each PACS in turn; the first that has the study wins. One that cannot be asked is
 * skipped when another follows, and its error thrown only when no later one has the study.
 *
 * Asked by accession number, a PACS may match more loosely than DICOM's exact matching:
 * Orthanc matches AccessionNumber without letter case over QIDO-RS (its C-FIND does not), so the
 * order `CASE-ABC` found another patient's `CASE-abc`. Such an answer is no candidate: it is
 * left out (`loose` counts it) before the ambiguity and identity checks. Before, it failed the
 * order at once (identity mismatch, or "matches 2 studies" once the order's own study came),
 * though the order's study was in the PACS or still on its way. Asked by Study Instance UID
 * likewise: a PACS that does not match on the UID (answering every study of the patient or
 * the accession) had the order fail as "the accession number matches 3 studies", its own
 * study among them; an answer of another UID alone failed it for good.
 */
async function findInSources(
  sources: readonly PacsSource[],
  request: StudyRequest,
): Promise<{ source?: PacsSource; found: QidoStudy[]; loose: number; otherIssuer: number }> {
  let unavailable: StudyError | undefined;
  let loose = 0;
  let otherIssuers = 0;
  let looseSource: PacsSource | undefined;
  for (const source of sources) {
    let answered: QidoStudy[];
    try {
      answered = await source.findStudies(request);
    } catch (error) {
      if (error instanceof StudyError && error.transient) {
        unavailable ??= error;
        continue;
      }
      throw error;
    }
    // the same number issued by another authority (a PACS shared by two RIS) is another
    // exam: no candidate, so the order's own study is not taken as ambiguous with it
    const otherIssuer = (s: QidoStudy) =>
      !request.studyInstanceUid &&
      authorityMismatch(request.accessionIssuer, s.issuerOfAccessionNumber) !== undefined;
    const found = answered.filter((s) =>
      request.studyInstanceUid
        ? s.studyInstanceUid === request.studyInstanceUid
        : sameAccession(request.accessionNumber, s.accessionNumber) && !otherIssuer(s),
    );
    if (found.length > 0) return { source, found, loose: 0, otherIssuer: 0 };
    if (answered.length > 0) {
      const issued = answered.filter(otherIssuer).length;
      otherIssuers += issued;
      loose += answered.length - issued;
      looseSource ??= source;
    }
  }
  if (unavailable) throw unavailable;
  return { source: looseSource ?? sources[0], found: [], loose, otherIssuer: otherIssuers };
}

/**
 * The one study the answers name. A study answered twice with the same identifiers and count
 * is one study: a PACS with two archives behind it, or one answering at series level, repeats
 * it (before: "the accession number matches 2 studies", failed, though one study matched).
 * Answers of one study that disagree are ambiguous, as several studies are.
 */
function oneStudy(found: readonly QidoStudy[]): QidoStudy {
  const uids = new Set(found.map((s) => s.studyInstanceUid));
  if (uids.size > 1)
    throw new StudyError(
      'ambiguous_study',
      `the accession number matches ${uids.size} studies in the PACS`,
    );
  const described = new Set(
    found.map((s) =>
      JSON.stringify([
        s.accessionNumber,
        s.patientId,
        s.issuerOfPatientId,
        s.issuerOfAccessionNumber,
        s.instanceCount,
      ]),
    ),
  );
  if (described.size > 1)
    throw new StudyError(
      'ambiguous_study',
      `the PACS answered the study ${found.length} times, with different identifiers or instance counts`,
    );
  return found[0]!;
}

/** The accession numbers are the same by the identity check's rule (padding aside, exact). */
function sameAccession(order: string | null | undefined, study: string | undefined): boolean {
  return (
    identityMismatches({ accessionNumber: order }, { accessionNumber: study }, ['accession-number'])
      .length === 0
  );
}
