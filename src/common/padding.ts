/**
 * `value` without the characters of `padding` at its end. A loop, not a regular expression:
 * `/ +$/` retries from every position of a long run of padding that is not at the end, so
 * `x`, 64 KiB of spaces, `x` (a value one DICOM element can hold) took seconds of a blocked
 * event loop, and a QIDO-RS answer or an implicit VR element of a few MiB took hours.
 */
export function withoutTrailing(value: string, padding: string): string {
  let end = value.length;
  while (end > 0 && padding.includes(value[end - 1]!)) end--;
  return end === value.length ? value : value.slice(0, end);
}

/** `value` without the characters of `padding` at its start (linear, as withoutTrailing). */
export function withoutLeading(value: string, padding: string): string {
  let start = 0;
  while (start < value.length && padding.includes(value[start]!)) start++;
  return start === 0 ? value : value.slice(start);
}
