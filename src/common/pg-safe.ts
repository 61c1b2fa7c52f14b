/**
 * Values derived from input (never the raw bytes, which are kept as bytea, byte for byte) pass
 * through these before they are stored, and so before anything is built from them (the
 * upstream's metadata, FHIR resources, HL7 and DICOM results):
 * - NUL (U+0000): PostgreSQL text and jsonb cannot hold it;
 * - a lone UTF-16 surrogate: jsonb refuses its `\ud800` escape (a FHIR body can carry one);
 * - every other control character but TAB, LF and CR (C0 and DEL): no text type we write may
 *   hold one (HL7 ST/TX/FT, FHIR string, DICOM LO/PN/ST), and a VT or FS would end an MLLP
 *   frame. A hostile or broken sender can put any of them anywhere (`\X07\` in HL7, `\u001b`
 *   in JSON). Each becomes U+FFFD; the raw message keeps what was sent;
 * - the C1 controls U+0080-U+009F, for the same reason (our DICOM writer drops them too, see
 *   src/outbound/dicom-vr.ts, but FHIR and HL7 outputs carried them). They reached stored values from bytes no reading makes text of: the
 *   five bytes Windows-1252 leaves undefined (0x81 0x8D 0x8F 0x90 0x9D, decoded as U+0081 …)
 *   in a Windows RIS's message read as Windows-1252, and UTF-8 C2 80-C2 9F (a NEL from a
 *   re-encoding engine). Each becomes U+FFFD as a C0 control does.
 */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROLS = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]/g;

/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');

/** Any character that may need replacing: one quick scan before the exact tests. */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const SUSPECT = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F\uD800-\uDFFF]/;
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]/;

function unstorable(value: string): boolean {
  return SUSPECT.test(value) && (CONTROL.test(value) || LONE_SURROGATE.test(value));
}

export function pgText<T extends string | null | undefined>(value: T): T {
  return (
    typeof value === 'string' && unstorable(value)
      ? value.replace(CONTROLS, '\uFFFD').replace(LONE_SURROGATES, '\uFFFD')
      : value
  ) as T;
}

/** JSON.stringify for a jsonb parameter (keys made storable too). */
export function pgJson(value: unknown): string {
  return JSON.stringify(pgSafeDeep(value));
}

/**
 * `value` with every string made storable (Buffers and other binary left as they are): the
 * value itself when no string in it holds a NUL or a lone surrogate (the usual case: nothing
 * is copied), else a copy with them replaced. A message's request and lineage are a few
 * hundred strings, read on every ingest (bench/mllp-ingest), so the check walks without
 * allocating.
 */
export function pgSafeDeep<T>(value: T): T {
  return holdsUnstorable(value) ? replaceUnstorableDeep(value) : value;
}

/** Not walked into: no strings inside (bytes, dates, numbers, functions …). */
function opaque(value: unknown): boolean {
  return (
    value === null || typeof value !== 'object' || Buffer.isBuffer(value) || value instanceof Date
  );
}

function holdsUnstorable(value: unknown): boolean {
  if (typeof value === 'string') return unstorable(value);
  if (opaque(value)) return false;
  if (Array.isArray(value)) {
    for (const v of value) if (holdsUnstorable(v)) return true;
    return false;
  }
  for (const key in value as Record<string, unknown>) {
    if (!Object.prototype.hasOwnProperty.call(value, key)) continue;
    if (unstorable(key) || holdsUnstorable((value as Record<string, unknown>)[key])) return true;
  }
  return false;
}

function replaceUnstorableDeep<T>(value: T): T {
  if (typeof value === 'string') return pgText(value) as T;
  if (opaque(value)) return value;
  if (Array.isArray(value)) return value.map((v: unknown) => replaceUnstorableDeep(v)) as T;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    out[pgText(k)] = typeof v === 'function' ? v : replaceUnstorableDeep(v);
  }
  return out as T;
}
