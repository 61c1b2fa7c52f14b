import { ImagingClientError } from './imaging-client.error';

/**
 * Presigned object-storage URLs come from the upstream's answers and carry PHI-bearing DICOM
 * once we PUT to them, so they are checked like any URL taken from an input (DESIGN.md §5):
 * `https:` only (unless the upstream base itself is `http:`, as for the local sandbox), no
 * user information, no control characters, and — when the site lists them in
 * IMAGING_UPLOAD_HOSTS — a host on that list. The URL is its own credential (contract,
 * Authentication 4): no bearer token or Basic credential ever goes with it.
 */
export interface StorageUrlPolicy {
  /** The upstream base URL (IMAGING_BASE_URL); its scheme decides whether http is allowed. */
  baseUrl: string;
  /** Allowed storage hosts (`host` or `host:port`, `*.example.com` for subdomains); empty: any. */
  uploadHosts?: readonly string[];
}

/** Returns the storage host (for the audit log) or throws a non-retryable ImagingClientError. */
export function checkStorageUrl(url: string, policy: StorageUrlPolicy, operation: string): string {
  const refuse = (why: string) =>
    new ImagingClientError('invalid_response', operation, `presigned upload URL refused: ${why}`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0020\u007f\\]/.test(url)) throw refuse('control characters or a backslash');
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw refuse('not a URL');
  }
  const baseIsHttp = new URL(policy.baseUrl).protocol === 'http:';
  if (parsed.protocol !== 'https:' && !(baseIsHttp && parsed.protocol === 'http:'))
    throw refuse(`scheme ${parsed.protocol.replace(':', '')} (https required)`);
  if (parsed.username || parsed.password) throw refuse('it carries user information');
  const hosts = policy.uploadHosts ?? [];
  if (hosts.length > 0 && !hosts.some((allowed) => hostMatches(parsed, allowed)))
    throw refuse(`host ${parsed.hostname} is not in IMAGING_UPLOAD_HOSTS`);
  return parsed.host;
}

function hostMatches(url: URL, allowed: string): boolean {
  const entry = allowed.trim().toLowerCase();
  if (entry === '') return false;
  const [name, port] = entry.startsWith('[')
    ? [entry.slice(0, entry.indexOf(']') + 1), entry.slice(entry.indexOf(']') + 2) || undefined]
    : (entry.split(':') as [string, string | undefined]);
  if (port !== undefined && port !== (url.port || defaultPort(url.protocol))) return false;
  if (name.startsWith('*.')) return url.hostname.endsWith(name.slice(1));
  return url.hostname === name;
}

function defaultPort(protocol: string): string {
  return protocol === 'https:' ? '443' : '80';
}

/**
 * Whether a presigned URL's signature covers `Content-Type`, so the PUT must send one. AWS
 * SigV4 names the signed headers in `X-Amz-SignedHeaders`, GCS V4 in `X-Goog-SignedHeaders`
 * (both `;`-separated, lower case). Where the URL names none (our sandbox, SigV2-style URLs
 * signed without a type), a Content-Type the signer did not expect breaks the signature, so
 * none is sent.
 */
export function presignedUrlSignsContentType(url: string): boolean {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return false;
  }
  for (const [name, value] of parsed.searchParams) {
    if (!/^x-(amz|goog)-signedheaders$/i.test(name)) continue;
    if (
      value
        .split(';')
        .map((h) => h.trim().toLowerCase())
        .includes('content-type')
    )
      return true;
  }
  return false;
}
