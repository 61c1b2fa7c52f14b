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
    return sameFhirContent(
      JSON.parse(resent.toString('utf8')),
      JSON.parse(original.toString('utf8')),
    );
  } catch {
    return false;
  }
}

/**
 * True when two parsed resources hold the same content but for the meta stamps; with
 * `ignoreId`, also but for their ids (a resource as sent beside the one we serve under our id).
 */
export function sameFhirContent(
  a: unknown,
  b: unknown,
  options: { ignoreId?: boolean } = {},
): boolean {
  const strip = (r: unknown) => {
    const out = unstamped(r);
    if (options.ignoreId && out && typeof out === 'object' && !Array.isArray(out)) {
      const { id: _id, ...rest } = out as { id?: unknown };
      return rest;
    }
    return out;
  };
  return canonical(strip(a)) === canonical(strip(b));
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

/**
 * JSON text with every object's keys sorted: equal for equal JSON content whatever the key
 * order, the objects' prototypes (a parser's null-prototype objects, PostgreSQL's jsonb read
 * back) or keys holding `undefined` (absent in JSON). Strings composed (NFC): canonically
 * equivalent text is the same text (Unicode §3.7; docs/hl7.md "Identifiers in one Unicode
 * form"), so a retry an engine decomposed (`É` as `E` + U+0301) is the same content; it was
 * 409 "other content under the placer number", naming a PUT that would change nothing.
 */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    typeof v === 'string'
      ? v.normalize('NFC')
      : v && typeof v === 'object' && !Array.isArray(v)
        ? Object.fromEntries(Object.entries(v).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0)))
        : v,
  );
}
