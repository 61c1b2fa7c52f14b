import { randomBytes } from 'node:crypto';
import { stringEnd } from './json-duplicate-keys';

/**
 * The tokens Python's json module writes for a float that is not finite (`json.dumps` with its
 * default allow_nan=True; so do simplejson and numpy-backed encoders): NaN, Infinity and
 * -Infinity, bare. RFC 8259 §6 has no place for them, so JSON.parse refuses the whole text.
 */
const NON_FINITE: ReadonlyArray<readonly [string, number]> = [
  ['-Infinity', Number.NEGATIVE_INFINITY],
  ['Infinity', Number.POSITIVE_INFINITY],
  ['NaN', Number.NaN],
];

/**
 * JSON.parse, reading the bare NaN, Infinity and -Infinity of a Python-written text as those
 * numbers (which no check takes for a measurement: they are named as not numbers). An upstream
 * report with one `"icv_percent": NaN` was refused whole ("not JSON"), and every other
 * measurement of the result with it. Anything else that is not JSON still throws. Linear in the
 * text: one pass outside strings, then JSON.parse.
 */
export function parseJsonAllowingNonFinite(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    if (!/NaN|Infinity/.test(text)) throw error;
  }
  // each token becomes a string no text holds, turned back into its number once parsed
  let marker = `\u2060nonfinite-${randomBytes(8).toString('hex')}:`;
  while (text.includes(marker)) marker = `\u2060nonfinite-${randomBytes(8).toString('hex')}:`;
  let out = '';
  let from = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      i = stringEnd(text, i);
      continue;
    }
    if (c !== 0x4e /* N */ && c !== 0x49 /* I */ && c !== 0x2d /* - */) continue;
    const token = NON_FINITE.find(([t]) => text.startsWith(t, i));
    if (!token) continue;
    out += `${text.slice(from, i)}"${marker}${token[0]}"`;
    i += token[0].length - 1;
    from = i + 1;
  }
  out += text.slice(from);
  const numbers = new Map(NON_FINITE.map(([t, n]) => [`${marker}${t}`, n]));
  return JSON.parse(out, (_key, value: unknown) =>
    typeof value === 'string' && value.startsWith(marker) ? (numbers.get(value) ?? value) : value,
  );
}
