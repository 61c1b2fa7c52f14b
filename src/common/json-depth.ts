/**
 * How deeply the objects and arrays of a JSON text nest (0 for a scalar), read in one pass
 * without recursion. JSON.parse reads any depth, but JSON.stringify and every recursive reader
 * after it overflow the stack at a few thousand levels (a QC report of 20,000 nested arrays
 * threw RangeError each time the report was stored). Brackets inside strings do not count.
 */
export function jsonDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      depth++;
      if (depth > max) max = depth;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      depth--;
    }
  }
  return max;
}
