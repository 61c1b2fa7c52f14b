/** The three HTTP-date forms a recipient accepts (RFC 9110 §5.6.7): IMF-fixdate, RFC 850, asctime. */
const HTTP_DATE = [
  /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/,
  /^[A-Z][a-z]{5,8}, \d{2}-[A-Z][a-z]{2}-\d{2} \d{2}:\d{2}:\d{2} GMT$/,
  /^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}$/,
];

/**
 * A peer's `Retry-After` (RFC 9110 §10.2.3): delta-seconds or an HTTP-date, as milliseconds
 * from `nowMs`. Anything else, or a value no peer means (more than 9 digits of seconds), is
 * ignored rather than trusted. Callers bound what they do with it (a retry's own ceiling).
 */
export function parseRetryAfter(
  value: string | string[] | null | undefined,
  nowMs: number,
): number | undefined {
  const raw = Array.isArray(value) ? value[0] : value;
  if (raw === undefined || raw === null) return undefined;
  const trimmed = raw.trim();
  if (/^\d{1,9}$/.test(trimmed)) return Number(trimmed) * 1000;
  if (!HTTP_DATE.some((form) => form.test(trimmed))) return undefined;
  const date = Date.parse(trimmed);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - nowMs);
}
