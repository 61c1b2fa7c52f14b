import { join, resolve } from 'node:path';
import { safeSegment } from './study-package.writer';

/**
 * Where study files live under `${DATA_DIR}/studies`: every name is built from validated
 * UIDs or our own UUIDs, passed through safeSegment, so no input can escape the directory.
 */
export class StudyStoragePaths {
  readonly root: string;

  constructor(dataDir: string) {
    this.root = resolve(dataDir, 'studies');
  }

  /** Parts being received, before validation. */
  get incomingDir(): string {
    return join(this.root, 'incoming');
  }

  /**
   * A pushed instance, once valid: one file per received copy of a SOP Instance (`copyId` our
   * UUID), so that the row recording a copy always names that copy's bytes; the copy a resend
   * replaces is removed once the resend's row is committed.
   */
  instanceFile(studyInstanceUid: string, sopInstanceUid: string, copyId: string): string {
    return join(
      this.root,
      'instances',
      safeSegment(studyInstanceUid),
      `${safeSegment(sopInstanceUid)}.${safeSegment(copyId)}.dcm`,
    );
  }

  get instancesRoot(): string {
    return join(this.root, 'instances');
  }

  /**
   * Instances our C-STORE SCP received as sub-operations of our own C-MOVE (Move Originator
   * AE Title = ours), by study: collected by the retrieve that asked for them. Under DATA_DIR,
   * so a sub-operation that reached another replica's SCP lands here too (shared volume).
   */
  movedDir(studyInstanceUid: string): string {
    return join(this.movedRoot, safeSegment(studyInstanceUid));
  }

  get movedRoot(): string {
    return join(this.root, 'moved');
  }

  /**
   * Named by series and SOP Instance UID: a study may hold one SOP Instance UID in two series
   * (a PACS keeps both, as C-GET and WADO-RS bring both). Named by the SOP UID alone, the
   * second overwrote the first, the move came up one short of the PACS's count and the order
   * moved the study again every 30 s until its deadline.
   */
  movedFile(studyInstanceUid: string, seriesInstanceUid: string, sopInstanceUid: string): string {
    return join(
      this.movedDir(studyInstanceUid),
      `${safeSegment(seriesInstanceUid)}_${safeSegment(sopInstanceUid)}.dcm`,
    );
  }

  /**
   * A note that our SCP refused a sub-operation of a move of this study (why, and where the
   * bytes are kept), for the retrieve that asked for it (dimse-pull.ts).
   */
  movedRefusalFile(studyInstanceUid: string, id: string): string {
    return join(this.movedDir(studyInstanceUid), `${safeSegment(id)}.refused`);
  }

  /**
   * Pushed parts we refused (not DICOM, truncated, missing UIDs …), kept as received for the
   * audit under our own UUID (the `keptAs` of their study.received entry), then swept.
   */
  get refusedDir(): string {
    return join(this.root, 'refused');
  }

  refusedFile(id: string): string {
    return join(this.refusedDir, `${safeSegment(id)}.dcm`);
  }

  /** Instances pulled from the PACS for one order. */
  pulledDir(orderId: string): string {
    return join(this.root, 'pulled', safeSegment(orderId));
  }

  packageFile(orderId: string): string {
    return join(this.root, 'packages', `${safeSegment(orderId)}.zip`);
  }
}
