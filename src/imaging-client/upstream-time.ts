/**
 * The contract shows no timestamp format and no time zone (docs/upstream-assumptions.md,
 * "timestamps"). A time the upstream writes is placed on the time line only when it says where:
 * an RFC 3339 date-time with `Z` or a `±hh:mm` offset. One without (`2026-11-28T13:10:00`) is
 * no instant at all: JavaScript reads it as the adapter machine's local time, which a
 * hospital server on Europe/Berlin put an hour before the upstream meant.
 */
const RFC3339_WITH_OFFSET =
  /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})$/;

/** Milliseconds since the epoch, or undefined when `value` names no zone (or is no date-time). */
export function upstreamInstant(value: string | null | undefined): number | undefined {
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  if (!RFC3339_WITH_OFFSET.test(text)) return undefined;
  const ms = Date.parse(text.toUpperCase());
  return Number.isNaN(ms) ? undefined : ms;
}
