import { Hl7Error } from './hl7.error';

/**
 * A position in a message, written as HL7 documentation writes it, all indexes 1-based:
 * `PID-3` (first repetition, first component), `PID-3[2].4` (second repetition, component 4),
 * `OBR-4.1`, `PID-3.4.2` (subcomponent 2), `ORC[2]-1` (second ORC segment of the message).
 * Omitted repetition/component/subcomponent mean 1; `repetition` is undefined when not written,
 * so callers can tell `PID-3` (all repetitions, where that matters) from `PID-3[1]`.
 */
export interface Hl7Location {
  segment: string;
  /** 1-based occurrence of the segment in the message (or group); undefined = first. */
  segmentOrdinal?: number;
  field: number;
  repetition?: number;
  component?: number;
  subcomponent?: number;
}

const LOCATION_PATTERN =
  /^([A-Z][A-Z0-9]{2})(?:\[(\d+)\])?-(\d+)(?:\[(\d+)\])?(?:\.(\d+))?(?:\.(\d+))?$/;

/**
 * Locations already read, frozen: the mapping tables name the same few hundred on every
 * message (bench/mllp-ingest showed the pattern among the adapter's top costs). Bounded: a
 * location built from input text cannot grow it past PARSED_LIMIT.
 */
const parsed = new Map<string, Readonly<Hl7Location>>();
const PARSED_LIMIT = 2048;

export function parseLocation(text: string): Readonly<Hl7Location> {
  const known = parsed.get(text);
  if (known) return known;
  const loc = Object.freeze(readLocation(text));
  if (parsed.size < PARSED_LIMIT) parsed.set(text, loc);
  return loc;
}

function readLocation(text: string): Hl7Location {
  const m = LOCATION_PATTERN.exec(text.trim());
  if (!m) throw new Hl7Error('HL7_BAD_LOCATION', `Not an HL7 location: "${text}"`);
  const num = (s: string | undefined): number | undefined => {
    if (s === undefined) return undefined;
    const n = Number(s);
    if (n < 1) throw new Hl7Error('HL7_BAD_LOCATION', `Indexes are 1-based in "${text}"`);
    return n;
  };
  return {
    segment: m[1],
    segmentOrdinal: num(m[2]),
    field: num(m[3]) ?? 1,
    repetition: num(m[4]),
    component: num(m[5]),
    subcomponent: num(m[6]),
  };
}

/** Formats a location; the segment ordinal and repetition are written only when above 1. */
export function formatLocation(loc: Hl7Location): string {
  let out = loc.segment;
  if (loc.segmentOrdinal !== undefined && loc.segmentOrdinal > 1) out += `[${loc.segmentOrdinal}]`;
  out += `-${loc.field}`;
  if (loc.repetition !== undefined && loc.repetition > 1) out += `[${loc.repetition}]`;
  if (loc.component !== undefined) out += `.${loc.component}`;
  if (loc.subcomponent !== undefined) out += `.${loc.subcomponent}`;
  return out;
}
