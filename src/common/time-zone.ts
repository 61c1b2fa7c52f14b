/**
 * UTC offsets of an IANA time zone (`Europe/Berlin`) for a local wall-clock time, from the
 * platform's time zone database (Intl): the offset changes with summer time, which a fixed
 * `+01:00` cannot follow.
 */

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(zone: string): Intl.DateTimeFormat {
  let f = formatters.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: zone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    if (formatters.size < 64) formatters.set(zone, f);
  }
  return f;
}

/** Whether the platform knows `zone` as an IANA time zone name. */
export function isTimeZone(zone: unknown): zone is string {
  if (typeof zone !== 'string' || !/^[A-Za-z][A-Za-z0-9_+\-/]{1,63}$/.test(zone)) return false;
  try {
    formatter(zone);
    return true;
  } catch {
    return false;
  }
}

/** Minutes east of UTC that `zone` is at the instant `utcMs`. */
function offsetMinutesAt(zone: string, utcMs: number): number {
  const parts: Record<string, number> = {};
  for (const p of formatter(zone).formatToParts(new Date(utcMs)))
    if (p.type !== 'literal') parts[p.type] = Number(p.value);
  const wall = Date.UTC(
    parts.year!,
    parts.month! - 1,
    parts.day!,
    parts.hour!,
    parts.minute!,
    parts.second!,
  );
  return Math.round((wall - Math.floor(utcMs / 1000) * 1000) / 60_000);
}

/**
 * The offset (`+02:00`) of a local wall-clock time in `zone`. A time the clocks skip (spring
 * forward) takes the offset before the change, so it lands after it, as a clock that was not
 * changed would read; a time that happens twice (fall back) takes the first (summer) one.
 */
export function offsetInZone(
  zone: string,
  year: number,
  month: number,
  day: number,
  hour: number,
  minute: number,
  second: number,
): string {
  const at = new Date(Date.UTC(2000, month - 1, day, hour, minute, second));
  at.setUTCFullYear(year); // Date.UTC reads years 0–99 as 1900–1999
  const wall = at.getTime();
  // the two candidate offsets: a day either side covers every rule change in the database
  const before = offsetMinutesAt(zone, wall - 86_400_000);
  const after = offsetMinutesAt(zone, wall + 86_400_000);
  const fits = (offset: number) => offsetMinutesAt(zone, wall - offset * 60_000) === offset;
  const candidates = [...new Set([Math.max(before, after), Math.min(before, after)])];
  const minutes = candidates.find(fits) ?? before;
  const sign = minutes < 0 ? '-' : '+';
  const abs = Math.abs(minutes);
  return `${sign}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
}
