import { createHash } from 'node:crypto';

/** SHA-256 of bytes (or of a string's UTF-8 bytes), as lowercase hex. */
export function sha256Hex(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/** The longest indexed key stored as it is (512 UTF-16 units: at most 2 kB of UTF-8). */
const KEY_MAX = 512;

/**
 * An indexed key (idempotency key, message control id) as stored: unchanged up to KEY_MAX,
 * else its start and a SHA-256 of the whole. A btree index row holds at most ~2.7 kB, and
 * these keys are built from input (a notification's event numbers, a placer number, an
 * If-None-Exist value). Idempotent.
 */
export function storableKey(key: string): string {
  if (key.length <= KEY_MAX) return key;
  // The start is cut before a surrogate pair it would split (jsonb refuses a lone one).
  const start = key.slice(0, 200).replace(/[\uD800-\uDBFF]$/, '');
  return `${start}…sha256:${sha256Hex(key)}`;
}
