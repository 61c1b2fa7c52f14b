import { DEFAULT_DELIMITERS, escapeValue, Hl7Delimiters } from './hl7-escape';

/**
 * A field value for the builder: a plain string (one component), an array of components, or
 * repetitions of those. Components may hold subcomponents as string arrays. Every leaf is
 * escaped (HL7 v2.5.1 section 2.7, escape sequences), so callers never write delimiters by hand.
 */
export type Hl7Component = string | undefined | readonly (string | undefined)[];
export type Hl7FieldValue =
  | string
  | undefined
  | readonly Hl7Component[]
  | { readonly repetitions: readonly (string | readonly Hl7Component[])[] }
  /** Field text already encoded with the message's delimiters, written as it is (an echo). */
  | { readonly encoded: string };

export interface Hl7SegmentSpec {
  id: string;
  /** fields[0] is field 1. For MSH, fields[0] is MSH-3 (MSH-1 and MSH-2 come from delimiters). */
  fields: readonly Hl7FieldValue[];
}

function encodeComponent(c: Hl7Component, d: Hl7Delimiters): string {
  if (c === undefined) return '';
  if (typeof c === 'string') return escapeValue(c, d);
  return trimEmpty(c.map((s) => (s === undefined ? '' : escapeValue(s, d)))).join(d.subcomponent);
}

function encodeRepetition(r: string | readonly Hl7Component[], d: Hl7Delimiters): string {
  if (typeof r === 'string') return escapeValue(r, d);
  return trimEmpty(r.map((c) => encodeComponent(c, d))).join(d.component);
}

/** Trailing empty components/fields carry nothing (v2.5.1 chapter 2 encoding rules); drop them. */
function trimEmpty(parts: string[]): string[] {
  let end = parts.length;
  while (end > 0 && parts[end - 1] === '') end -= 1;
  return parts.slice(0, end);
}

export function encodeField(value: Hl7FieldValue, d: Hl7Delimiters = DEFAULT_DELIMITERS): string {
  if (value === undefined) return '';
  if (typeof value === 'string') return escapeValue(value, d);
  if ('encoded' in value) return value.encoded;
  if ('repetitions' in value) {
    return value.repetitions.map((r) => encodeRepetition(r, d)).join(d.repetition);
  }
  return encodeRepetition(value as readonly Hl7Component[], d);
}

export function encodeSegment(spec: Hl7SegmentSpec, d: Hl7Delimiters = DEFAULT_DELIMITERS): string {
  const fields = trimEmpty(spec.fields.map((f) => encodeField(f, d)));
  if (spec.id === 'MSH') {
    const enc = d.component + d.repetition + d.escape + d.subcomponent + (d.truncation ?? '');
    return ['MSH', enc, ...fields].join(d.field);
  }
  return [spec.id, ...fields].join(d.field);
}

/** Encodes segments with CR separators (the HL7 segment terminator), the last one CR-terminated too. */
export function encodeMessage(
  segments: readonly Hl7SegmentSpec[],
  d: Hl7Delimiters = DEFAULT_DELIMITERS,
): string {
  return segments.map((s) => encodeSegment(s, d)).join('\r') + '\r';
}

/** HL7 DTM (chapter 2A) in UTC with explicit offset: YYYYMMDDHHMMSS+0000. */
export function formatHl7Timestamp(date: Date): string {
  const p = (n: number, w = 2): string => String(n).padStart(w, '0');
  return (
    `${p(date.getUTCFullYear(), 4)}${p(date.getUTCMonth() + 1)}${p(date.getUTCDate())}` +
    `${p(date.getUTCHours())}${p(date.getUTCMinutes())}${p(date.getUTCSeconds())}+0000`
  );
}

/**
 * An ISO 8601 / FHIR date or dateTime (`2026`, `2026-11`, `2026-11-25`,
 * `2026-11-25T10:30:00.5+01:00`) as an HL7 DTM of the same precision and offset (chapter 2A,
 * `YYYY[MM[DD[HHMM[SS]]]][+/-ZZZZ]`), without going through a Date: a partial date stays
 * partial (`202611`, not `20261101000000+0000`), and a leap second (`23:59:60`, valid in FHIR,
 * an Invalid Date in JavaScript) is written `59`, the last second DTM has. The fraction is
 * dropped (seconds, as every other timestamp we write). Undefined for anything else, e.g. the
 * six-digit year `+010000-01-01T…` of a Date past 9999.
 */
export function isoToHl7Dtm(value: string): string | undefined {
  const m =
    /^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?)?)?$/.exec(
      value,
    );
  if (!m) return undefined;
  const [, year, month = '', day = '', hour = '', minute = '', second = '', zone] = m;
  const seconds = second === '60' ? '59' : second;
  const offset = zone === undefined ? '' : zone === 'Z' ? '+0000' : zone.replace(':', '');
  return `${year}${month}${day}${hour}${minute}${seconds}${hour ? offset : ''}`;
}
