import { createHmac, timingSafeEqual } from 'node:crypto';
import { SandboxError } from './sandbox.error';

/** Storage paths live outside /v1: presigned URLs point at "object storage", not the API. */
export const STORAGE_PREFIX = '/storage/';
const EXPIRES = 'X-Sandbox-Expires';
const SIGNATURE = 'X-Sandbox-Signature';

/**
 * What a presigned URL grants: one PUT of one object key until `expiresAt` (contract
 * "Authentication" 4: time-limited, single object, write-only, a secret in itself).
 */
export type ObjectKey =
  | { kind: 'single'; orderId: string; nonce: string }
  | { kind: 'instance'; orderId: string; nonce: string }
  | { kind: 'part'; uploadId: string; partNumber: number };

export function encodeObjectKey(key: ObjectKey): string {
  switch (key.kind) {
    case 'single':
    case 'instance':
      return `${key.kind}/${key.orderId}/${key.nonce}`;
    case 'part':
      return `part/${key.uploadId}/${key.partNumber}`;
    default:
      return key satisfies never;
  }
}

export function decodeObjectKey(raw: string): ObjectKey | null {
  const parts = raw.split('/');
  if (parts.length !== 3) return null;
  const [kind, a, b] = parts;
  if (
    (kind === 'single' || kind === 'instance') &&
    /^[0-9a-f-]{36}$/.test(a) &&
    /^[A-Za-z0-9_-]{8,64}$/.test(b)
  ) {
    return { kind, orderId: a, nonce: b };
  }
  if (kind === 'part' && /^[0-9a-f-]{36}$/.test(a) && /^\d{1,3}$/.test(b))
    return { kind, uploadId: a, partNumber: Number(b) };
  return null;
}

export class UrlSigner {
  constructor(private readonly key: Buffer) {}

  private sign(method: string, objectKey: string, expiresAtSec: number): string {
    return createHmac('sha256', this.key)
      .update(`${method}\n${objectKey}\n${expiresAtSec}`)
      .digest('hex');
  }

  presign(origin: string, key: ObjectKey, expiresAtMs: number): string {
    const objectKey = encodeObjectKey(key);
    const expires = Math.floor(expiresAtMs / 1000);
    return `${origin}${STORAGE_PREFIX}${objectKey}?${EXPIRES}=${expires}&${SIGNATURE}=${this.sign('PUT', objectKey, expires)}`;
  }

  /** Verifies signature first (403 signature_mismatch), then expiry (403 url_expired). */
  verify(objectKeyRaw: string, query: URLSearchParams, nowMs: number): ObjectKey {
    const expiresRaw = query.get(EXPIRES);
    const signature = query.get(SIGNATURE);
    if (
      expiresRaw === null ||
      signature === null ||
      !/^\d+$/.test(expiresRaw) ||
      !/^[0-9a-f]{64}$/.test(signature)
    ) {
      throw new SandboxError(
        403,
        'signature_mismatch',
        'the URL is not a valid presigned URL (signature or expiry missing)',
      );
    }
    const expected = Buffer.from(this.sign('PUT', objectKeyRaw, Number(expiresRaw)), 'hex');
    if (!timingSafeEqual(expected, Buffer.from(signature, 'hex'))) {
      throw new SandboxError(
        403,
        'signature_mismatch',
        'the presigned URL signature does not match (URL altered or not issued here)',
      );
    }
    if (Number(expiresRaw) * 1000 <= nowMs) {
      throw new SandboxError(
        403,
        'url_expired',
        'the presigned URL has expired; request a new one',
      );
    }
    const key = decodeObjectKey(objectKeyRaw);
    if (!key)
      throw new SandboxError(403, 'signature_mismatch', 'the presigned URL names no valid object');
    return key;
  }
}
