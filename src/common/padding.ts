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

/**
 * An identifier's text without the spaces around it: a fixed-width sender pads `ACC-1` to
 * `ACC-1   ` (HL7 ST: trailing blanks are not significant; the DICOM SH/LO the identifier
 * becomes ignores leading and trailing spaces too). Stored padded, an order could not be
 * found by its accession number and went upstream and out in results with the spaces.
 * Only SPACE: any other character is part of the value. Undefined when nothing is left.
 */
export function unpadded(value: string): string | undefined {
  const v = withoutLeading(withoutTrailing(value, ' '), ' ');
  return v === '' ? undefined : v;
}
