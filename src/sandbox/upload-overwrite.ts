import { rm } from 'node:fs/promises';
import { LIMITS } from '../imaging-spec/imaging-spec';
import type { CompletedUpload, SandboxOrder, SandboxState } from './sandbox-state';

// Contract "Limits": identical studies uploaded within 5 minutes overwrite each other; see
// docs/upstream-assumptions.md for what happens to the earlier order.

/** The earlier upload of the same study within the overwrite window, if any. */
export function findOverwritable(
  state: SandboxState,
  order: SandboxOrder,
  studyUid: string | null,
  now: number,
): CompletedUpload | undefined {
  if (studyUid === null) return undefined;
  const windowMs = LIMITS.sameStudyOverwriteWindowSeconds * 1000;
  return [...state.completedUploads]
    .reverse()
    .find(
      (u) =>
        u.organizationId === order.organizationId &&
        u.studyUid === studyUid &&
        now - u.completedAt <= windowMs,
    );
}

/** Forgets a completed upload and deletes its stored objects. */
export async function discardUpload(state: SandboxState, upload: CompletedUpload): Promise<void> {
  const i = state.completedUploads.indexOf(upload);
  if (i >= 0) state.completedUploads.splice(i, 1);
  await Promise.all(upload.objectPaths.map((p) => rm(p, { force: true })));
}
