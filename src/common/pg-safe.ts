/**
 * PostgreSQL text and jsonb cannot hold the NUL character (U+0000), and a hostile or broken
 * sender can put one anywhere. Values derived from input (never the raw bytes, which are kept
 * as bytea, byte for byte) pass through these before they are stored, NUL becoming U+FFFD.
 */
// eslint-disable-next-line no-control-regex -- matching NUL is the point
const NUL = /\u0000/g;

export function pgText<T extends string | null | undefined>(value: T): T {
  return (
    typeof value === 'string' && value.includes('\u0000') ? value.replace(NUL, '\uFFFD') : value
  ) as T;
}

/** JSON.stringify for a jsonb parameter. */
export function pgJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === 'string' ? pgText(v) : v));
}

/**
 * `value` with every string made storable (Buffers and other binary left as they are): the
 * value itself when no string in it holds a NUL (the usual case: nothing is copied), else a
 * copy with NUL replaced. A message's request and lineage are a few hundred strings, read on
 * every ingest (bench/mllp-ingest), so the check walks without allocating.
 */
export function pgSafeDeep<T>(value: T): T {
  return holdsNul(value) ? replaceNulDeep(value) : value;
}

/** Not walked into: no strings inside (bytes, dates, numbers, functions …). */
function opaque(value: unknown): boolean {
  return (
    value === null || typeof value !== 'object' || Buffer.isBuffer(value) || value instanceof Date
  );
}

function holdsNul(value: unknown): boolean {
  if (typeof value === 'string') return value.includes('\u0000');
  if (opaque(value)) return false;
  if (Array.isArray(value)) {
    for (const v of value) if (holdsNul(v)) return true;
    return false;
  }
  for (const key in value as Record<string, unknown>) {
    if (!Object.prototype.hasOwnProperty.call(value, key)) continue;
    if (key.includes('\u0000') || holdsNul((value as Record<string, unknown>)[key])) return true;
  }
  return false;
}

function replaceNulDeep<T>(value: T): T {
  if (typeof value === 'string') return pgText(value) as T;
  if (opaque(value)) return value;
  if (Array.isArray(value)) return value.map((v: unknown) => replaceNulDeep(v)) as T;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    out[pgText(k)] = typeof v === 'function' ? v : replaceNulDeep(v);
  }
  return out as T;
}
