import type { OrderRequest, PersonName } from '../domain/order-request';
import { HIDDEN, maskIdentifier, maskName } from './phi-masking.values';

/**
 * The values of one order that a text written elsewhere (the upstream's error messages, which
 * may echo the metadata we sent, in any form) can quote: the patient's name parts,
 * identifiers and birth date in the notations people write. (The orderer's name is not
 * masked on the audit page either.) Patterns alone
 * (`FAMILY^Given`, ISO dates, long digit runs) miss "Erika Mustermann", "PAT-4711" or
 * "12.08.1964"; the order's own values do not. Pure: no database, no Nest.
 */
export interface KnownPhi {
  /** Name parts (masked to their initial). */
  names: string[];
  /** Identifiers (masked as maskIdentifier does). */
  ids: string[];
  /** The birth date in notations the date pattern does not know (hidden). */
  dates: string[];
}

/** At most this many values per order (a name of 40 given names is not 40 needles). */
const MAX_VALUES = 48;
/** Shorter values are not matched: a one-letter initial would mask every such letter. */
const MIN_LENGTH = 2;
const MAX_LENGTH = 200;

export const NO_KNOWN_PHI: KnownPhi = { names: [], ids: [], dates: [] };

/** The values of `request` that identify its patient. */
export function knownPhiOf(
  request: Partial<Pick<OrderRequest, 'patient'>> | null | undefined,
  /**
   * Record numbers a merge (ADT^A40/A47) retired from the order's patient: the upstream knows
   * them from the create and repeats them in its answers.
   */
  retired: ReadonlyArray<{ value?: string }> | null = null,
): KnownPhi {
  if (!request) return NO_KNOWN_PHI;
  const names = nameParts(request.patient?.name);
  const ids = [...(request.patient?.identifiers ?? []), ...(retired ?? [])].map((i) => i?.value);
  return {
    names: usable(names),
    ids: usable(ids),
    dates: usable(birthDateForms(request.patient?.birthDate)),
  };
}

/** `text` with every whole-word occurrence of a known value masked (case-insensitive). */
export function maskKnownValues(text: string, known: KnownPhi): string {
  const byValue = new Map<string, 'name' | 'id' | 'date'>();
  for (const v of known.dates) byValue.set(v.toLowerCase(), 'date');
  for (const v of known.ids) if (!byValue.has(v.toLowerCase())) byValue.set(v.toLowerCase(), 'id');
  for (const v of known.names)
    if (!byValue.has(v.toLowerCase())) byValue.set(v.toLowerCase(), 'name');
  if (byValue.size === 0 || text === '') return text;
  // Longest first, so "Anna-Lena" is masked whole before "Anna".
  const needles = [...byValue.keys()].sort((a, b) => b.length - a.length).map(escapeRegExp);
  const pattern = new RegExp(
    `(?<![\\p{L}\\p{N}])(?:${needles.join('|')})(?![\\p{L}\\p{N}])`,
    'giu',
  );
  return text.replace(pattern, (found) => {
    const kind = byValue.get(found.toLowerCase());
    if (kind === 'name') return maskName(found);
    return kind === 'id' && found.length >= 6 ? maskIdentifier(found) : HIDDEN;
  });
}

function nameParts(name: PersonName | undefined): string[] {
  if (!name) return [];
  const whole = [name.family, ...(name.given ?? [])].filter((p): p is string => !!p);
  // The whole part and its words: "van der Berg" and "Berg"; "Anna-Lena" and "Lena".
  return whole.flatMap((p) => [p, ...p.split(/[\s\-']+/u)]);
}

/**
 * 1964-08-12 as people write it where the date pattern (YYYY-MM-DD, YYYYMMDD, which keep their
 * year) does not reach: 12.08.1964, 12/08/1964, 08/12/1964; a partial date as it is.
 */
function birthDateForms(date: string | undefined): string[] {
  const m = date ? /^(\d{4})-(\d{2})-(\d{2})$/.exec(date) : null;
  if (!m) return date && !/^\d{4}$/.test(date) ? [date] : [];
  const [, y, mo, d] = m;
  return [`${d}.${mo}.${y}`, `${d}/${mo}/${y}`, `${mo}/${d}/${y}`];
}

function usable(values: Array<string | undefined>): string[] {
  const out = new Set<string>();
  for (const raw of values) {
    const v = raw?.trim();
    if (!v || [...v].length < MIN_LENGTH || v.length > MAX_LENGTH) continue;
    out.add(v);
    if (out.size >= MAX_VALUES) break;
  }
  return [...out];
}

function escapeRegExp(text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&');
}
