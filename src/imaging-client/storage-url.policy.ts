import { ImagingClientError } from './imaging-client.error';

/**
 * Presigned object-storage URLs come from the upstream's answers and carry PHI-bearing DICOM
 * once we PUT to them, so they are checked like any URL taken from an input (DESIGN.md §5):
 * `https:` only (unless the upstream base itself is `http:`, as for the local sandbox), no
 * user information, no control characters, not this machine or a link-local address (a
 * cloud metadata service) unless the site allows it, and — when the site lists them in
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
  const listed = hosts.some((allowed) => hostMatches(parsed, allowed));
  if (hosts.length > 0 && !listed)
    throw refuse(`host ${parsed.hostname} is not in IMAGING_UPLOAD_HOSTS`);
  // Without a list, any storage host is taken, but not this machine or a cloud metadata
  // service (a PUT there sends the study to a local port, or reaches the instance's
  // credentials): a loopback host only when the upstream itself is on loopback (the local
  // sandbox), a link-local or unspecified one only when IMAGING_UPLOAD_HOSTS names it.
  const local = localKind(parsed.hostname);
  if (local && !listed && !(local === 'loopback' && localKind(new URL(policy.baseUrl).hostname)))
    throw refuse(`host ${parsed.hostname} is ${local} (name it in IMAGING_UPLOAD_HOSTS to allow)`);
  return parsed.host;
}

/**
 * Whether a URL's host (WHATWG-parsed: IPv4 in dotted decimal whatever form it was written
 * in, IPv6 in brackets, names in lower case) is this machine or a link-local address. Names
 * are not resolved: a name that resolves there is for IMAGING_UPLOAD_HOSTS to keep out.
 * A name written fully qualified (`localhost.`, `metadata.google.internal.`) is the same name
 * to DNS (RFC 1034 §3.1), so its trailing dots are not part of the comparison.
 */
function localKind(host: string): 'loopback' | 'link-local' | 'unspecified' | undefined {
  let end = host.length;
  while (end > 0 && host[end - 1] === '.') end--;
  const hostname = host.slice(0, end);
  if (hostname === 'localhost' || hostname.endsWith('.localhost')) return 'loopback';
  if (hostname === 'metadata.google.internal') return 'link-local';
  const v4 = /^(\d+)\.(\d+)\.\d+\.\d+$/.exec(hostname);
  if (v4) {
    const [a, b] = [Number(v4[1]), Number(v4[2])];
    if (a === 127) return 'loopback';
    if (a === 0) return 'unspecified';
    if (a === 169 && b === 254) return 'link-local';
    return undefined;
  }
  if (!hostname.startsWith('[')) return undefined;
  const v6 = hostname.slice(1, -1);
  if (v6 === '::1') return 'loopback';
  if (v6 === '::') return 'unspecified';
  if (/^fe[89ab][0-9a-f]:/.test(v6)) return 'link-local';
  if (v6.startsWith('fd00:ec2::')) return 'link-local'; // the AWS metadata service over IPv6
  // IPv4-mapped (`::ffff:7f00:1`): the IPv4 rule on the embedded address.
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(v6);
  if (mapped) {
    const high = parseInt(mapped[1]!, 16);
    const low = parseInt(mapped[2]!, 16);
    return localKind(`${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`);
  }
  return undefined;
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
