/**
 * Whether an error means "this machine's disk cannot take the bytes right now": DATA_DIR is
 * full, over its quota or has become read-only. A front door answers it as temporary (HTTP
 * 503 with Retry-After), like a database outage: nothing was kept, the sender retries once an
 * operator has made room.
 */
const STORAGE_CODES = new Set(['ENOSPC', 'EDQUOT', 'EROFS']);

export function isStorageUnavailable(error: unknown, depth = 0): boolean {
  if (!error || typeof error !== 'object' || depth > 4) return false;
  const e = error as { code?: unknown; cause?: unknown };
  if (typeof e.code === 'string' && STORAGE_CODES.has(e.code)) return true;
  return isStorageUnavailable(e.cause, depth + 1);
}
