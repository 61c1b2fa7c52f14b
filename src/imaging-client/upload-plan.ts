import { LIMITS } from '../imaging-spec/imaging-spec';
import { ImagingClientError } from './imaging-client.error';

export const MIB = 1024 * 1024;

export type UploadPlan =
  | { kind: 'single'; sizeBytes: number }
  | { kind: 'multipart'; sizeBytes: number; partSizeBytes: number; partCount: number };

/**
 * How a study of `sizeBytes` goes up (contract, Limits; MB read as MiB per
 * docs/upstream-assumptions.md): single PUT under 5 MB, multipart from 5 MB with parts of
 * max(10 MB, ceil(size / 100)) kept within 5–100 MB, so no study needs more than 100 parts.
 *
 * The contract's two ceilings disagree at the top: 100 parts × 100 MiB is 10,000 MiB, a
 * little under its 10 GB maximum study. A study that would need a 101st part cannot be sent
 * without breaking a limit, so it is refused like one over 10 GB — before any call.
 */
export function planUpload(sizeBytes: number, operation = 'upload'): UploadPlan {
  if (!Number.isSafeInteger(sizeBytes) || sizeBytes <= 0) {
    throw new ImagingClientError('invalid_input', operation, 'the study file is empty');
  }
  if (sizeBytes > LIMITS.maxStudyBytes) {
    throw new ImagingClientError(
      'too_large',
      operation,
      `study of ${sizeBytes} bytes exceeds the ${LIMITS.maxStudyBytes}-byte maximum`,
    );
  }
  if (sizeBytes < LIMITS.singlePutMaxBytes) return { kind: 'single', sizeBytes };
  const wanted = Math.max(
    LIMITS.chunkRecommendedBytes,
    Math.ceil(sizeBytes / LIMITS.multipartMaxParts),
  );
  const partSizeBytes = Math.min(LIMITS.chunkMaxBytes, Math.max(LIMITS.chunkMinBytes, wanted));
  const partCount = Math.ceil(sizeBytes / partSizeBytes);
  if (partCount > LIMITS.multipartMaxParts) {
    throw new ImagingClientError(
      'too_large',
      operation,
      `study of ${sizeBytes} bytes needs ${partCount} parts of at most ${LIMITS.chunkMaxBytes} bytes; the limit is ${LIMITS.multipartMaxParts}`,
    );
  }
  return { kind: 'multipart', sizeBytes, partSizeBytes, partCount };
}

/** Byte range of part `partNumber` (1-based); `end` is inclusive, as fs.createReadStream wants. */
export function partRange(
  plan: { sizeBytes: number; partSizeBytes: number },
  partNumber: number,
): { start: number; end: number; length: number } {
  const start = (partNumber - 1) * plan.partSizeBytes;
  const length = Math.min(plan.partSizeBytes, plan.sizeBytes - start);
  return { start, end: start + length - 1, length };
}
