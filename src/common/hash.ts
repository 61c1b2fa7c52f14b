import { createHash } from 'node:crypto';

/** SHA-256 of bytes (or of a string's UTF-8 bytes), as lowercase hex. */
export function sha256Hex(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}
