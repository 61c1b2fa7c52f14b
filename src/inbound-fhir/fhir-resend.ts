import { isDeepStrictEqual } from 'node:util';

/**
 * What the sender's own server stamps on each send of one resource (R4 resource.html#Meta):
 * a version and time of ITS copy, and where it came from. The same request sent again after
 * a lost answer carries new ones; they are not part of the order.
 */
const STAMPED_META = ['versionId', 'lastUpdated', 'source'] as const;

/**
 * True when `resent` is the resource `original` sent again: the same bytes, or the same JSON
 * (object keys in any order, as another serialiser writes them) but for the sender's meta
 * stamps. Anything else under the same identifier is other content, not a resend.
 */
export function isFhirResendOf(resent: Buffer, original: Buffer): boolean {
  if (resent.equals(original)) return true;
  try {
    return isDeepStrictEqual(
      unstamped(JSON.parse(resent.toString('utf8'))),
      unstamped(JSON.parse(original.toString('utf8'))),
    );
  } catch {
    return false;
  }
}

function unstamped(resource: unknown): unknown {
  if (typeof resource !== 'object' || resource === null || Array.isArray(resource)) return resource;
  const { meta, ...rest } = resource as { meta?: unknown };
  if (typeof meta !== 'object' || meta === null || Array.isArray(meta)) {
    return meta === undefined ? rest : { ...rest, meta };
  }
  const kept = Object.fromEntries(
    Object.entries(meta).filter(([k]) => !(STAMPED_META as readonly string[]).includes(k)),
  );
  return Object.keys(kept).length > 0 ? { ...rest, meta: kept } : rest;
}
