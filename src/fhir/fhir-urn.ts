/**
 * A Bundle-local name (`urn:uuid:`, `urn:oid:`) in its one spelling, for comparing a reference
 * with an entry's fullUrl: the URN scheme and namespace are case-insensitive (RFC 8141 §3.1)
 * and so are a UUID's hex digits (RFC 4122 §3, "case insensitive on input"), so
 * `URN:UUID:5CBC121B-…` and `urn:uuid:5cbc121b-…` are one entry. Anything else is returned as
 * it is (a URL's path is case-sensitive).
 */
export function bundleLocalName(reference: string): string {
  const m = /^urn:(uuid|oid):(.*)$/i.exec(reference);
  if (!m) return reference;
  const namespace = m[1]!.toLowerCase();
  return `urn:${namespace}:${namespace === 'uuid' ? m[2]!.toLowerCase() : m[2]!}`;
}

/** True when `a` and `b` name the same entry of a Bundle (a fullUrl and a reference). */
export function sameBundleName(a: string | undefined, b: string | undefined): boolean {
  return a !== undefined && b !== undefined && bundleLocalName(a) === bundleLocalName(b);
}
