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

/** A copy of `value` with every string made storable (Buffers and other binary left as they are). */
export function pgSafeDeep<T>(value: T): T {
  if (typeof value === 'string') return pgText(value) as T;
  if (
    value === null ||
    typeof value !== 'object' ||
    Buffer.isBuffer(value) ||
    value instanceof Date
  )
    return value;
  if (Array.isArray(value)) return value.map((v: unknown) => pgSafeDeep(v)) as T;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    out[k] = typeof v === 'function' ? v : pgSafeDeep(v);
  }
  return out as T;
}
