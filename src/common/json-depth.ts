/**
 * The cost of a JSON text before anything parses it: how many values it holds and how deeply
 * its objects and arrays nest, read in one pass without recursion. Values are counted as
 * containers opened and commas outside strings, plus the root (for valid JSON the number of
 * values exactly; an empty {} or [] counts one more). Brackets and commas inside strings do not
 * count (UTF-8 continuation bytes never equal the ASCII marks counted). With limits, the scan stops at the first one passed and names it.
 *
 * JSON.parse reads any depth, but JSON.stringify and every recursive reader after it overflow
 * the stack at a few thousand levels (a QC report of 20,000 nested arrays threw RangeError each
 * time it was stored); parsing costs microseconds per value on the event loop (FHIR bodies).
 */
export function jsonCost(
  input: Buffer,
  limits: { maxValues?: number; maxDepth?: number } = {},
): { values: number; depth: number; exceeded?: 'values' | 'depth' } {
  const maxValues = limits.maxValues ?? Infinity;
  const maxDepth = limits.maxDepth ?? Infinity;
  let values = 1;
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < input.length; i++) {
    const c = input[i]!;
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x2c /* , */) values++;
    else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      values++;
      if (++depth > max) max = depth;
      if (depth > maxDepth) return { values, depth: max, exceeded: 'depth' };
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) depth--;
    if (values > maxValues) return { values, depth: max, exceeded: 'values' };
  }
  return { values, depth: max };
}

/** How deeply the objects and arrays of a JSON text nest (0 for a scalar; off the hot paths). */
export function jsonDepth(text: string): number {
  return jsonCost(Buffer.from(text, 'utf8')).depth;
}
