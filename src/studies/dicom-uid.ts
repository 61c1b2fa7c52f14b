/**
 * A UID as PS3.5 §9.1 allows it: numeric components separated by single dots, at most 64
 * characters. (Components with a leading zero, which §9.1 forbids, are accepted: some
 * devices write them, and they are harmless.) Nothing else — no letters, slashes, empty or
 * dot-only components — so a UID can name a file or a ZIP entry without escaping anything.
 */
export function isDicomUid(value: string | undefined | null): value is string {
  return typeof value === 'string' && value.length <= 64 && /^[0-9]+(\.[0-9]+)*$/.test(value);
}
