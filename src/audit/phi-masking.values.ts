/** The masking rules and how each hides a value (used by every masker of phi-masking.ts). */

export type MaskRule = 'name' | 'date' | 'id' | 'full';

export const HIDDEN = '***';

/** "SCHMIDT" → "S***"; "Anna Maria" → "A*** M***". */
export function maskName(value: string): string {
  return value
    .split(/(\s+)/)
    .map((part) => (/^\s*$/.test(part) ? part : `${[...part][0]}${HIDDEN}`))
    .join('');
}

/** Keeps the year: "1956-02-14" → "1956-**-**", HL7 "19560214" → "1956****". */
export function maskDate(value: string): string {
  const year = /^\d{4}/.exec(value)?.[0];
  if (!year) return HIDDEN;
  return year + value.slice(4).replace(/\d/g, '*');
}

/** Keeps the last two characters of identifiers long enough to stay unguessable. */
export function maskIdentifier(value: string): string {
  if (value.length < 6) return HIDDEN;
  return `${HIDDEN}${value.slice(-2)}`;
}

export function maskValue(rule: MaskRule, value: string): string {
  if (value === '') return value;
  switch (rule) {
    case 'name':
      return maskName(value);
    case 'date':
      return maskDate(value);
    case 'id':
      return maskIdentifier(value);
    case 'full':
      return HIDDEN;
    default:
      return rule satisfies never;
  }
}

/** Identifier(s): the value is hidden, the system and type (which say what it is) kept. */
export function maskIdentifiers(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(maskIdentifiers);
  if (typeof v === 'string') return maskIdentifier(v);
  if (v === null || typeof v !== 'object') return v;
  const obj = v as Record<string, unknown>;
  return {
    ...obj,
    ...(typeof obj.value === 'string' ? { value: maskIdentifier(obj.value) } : {}),
  };
}

/** Applies `rule` to every string leaf, except under the keys in `keep` (codes such as `use`). */
export function maskLeaves(v: unknown, rule: MaskRule, keep: readonly string[] = []): unknown {
  if (typeof v === 'string') return maskValue(rule, v);
  if (Array.isArray(v)) return v.map((x) => maskLeaves(x, rule, keep));
  if (v === null || typeof v !== 'object') return v;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(v as Record<string, unknown>)) {
    out[key] = keep.includes(key) ? inner : maskLeaves(inner, rule, keep);
  }
  return out;
}
