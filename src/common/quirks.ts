/** Tolerated quirks without repeats (same code and detail), first occurrence kept. */
export function dedupeQuirks<T extends { code: string; detail: string }>(quirks: T[]): T[] {
  const seen = new Set<string>();
  return quirks.filter((q) => {
    const key = `${q.code}|${q.detail}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}
