import { LIMITS } from '../imaging-spec/imaging-spec';
import { ImagingClientError } from './imaging-client.error';

export const MIB = 1024 * 1024;

export type UploadPlan =
  | { kind: 'single'; sizeBytes: number }
  | { kind: 'multipart'; sizeBytes: number; partSizeBytes: number; partCount: number };

/**
 * How a study of `sizeBytes` goes up (contract, Limits, read safely under both MB readings;
 * see LIMITS): a single PUT under 5,000,000 bytes; otherwise multipart in equal parts —
 * as many 10 MiB parts as the size needs, fewer and larger when that would pass 100 parts —
 * so that every part, the last one included (it is at most a few bytes shorter), lies within
 * 5 MiB and 100,000,000 bytes. A study of 5,000,000 bytes up to 5 MiB goes as one (last)
 * part. 100 parts of 100,000,000 bytes reach the 10,000,000,000-byte maximum exactly.
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
  const byRecommended = Math.ceil(sizeBytes / LIMITS.chunkRecommendedBytes);
  const partCount =
    byRecommended <= LIMITS.multipartMaxParts
      ? byRecommended
      : Math.ceil(sizeBytes / LIMITS.chunkMaxBytes);
  const partSizeBytes = Math.ceil(sizeBytes / partCount);
  if (partCount > LIMITS.multipartMaxParts || partSizeBytes > LIMITS.chunkMaxBytes) {
    throw new ImagingClientError(
      'too_large',
      operation,
      `study of ${sizeBytes} bytes needs ${partCount} parts of ${partSizeBytes} bytes; the limits are ${LIMITS.multipartMaxParts} parts of ${LIMITS.chunkMaxBytes} bytes`,
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

/** The part numbers 1..count (none when count is 0). */
export function partNumbers(count: number): number[] {
  return Array.from({ length: Math.max(0, count) }, (_, i) => i + 1);
}
