/** One step of a path into a JSON value: an object's key or an array's index. */
export type JsonPathStep = string | number;

/** What one pass over a JSON text found (scanJson). */
export interface JsonScan {
  /**
   * Values the text holds: containers opened and commas outside strings, plus the root (for
   * valid JSON the number of values exactly; an empty {} or [] counts one more).
   */
  values: number;
  /** How deeply its objects and arrays nest (0 for a scalar). */
  depth: number;
  /** The first limit passed; the scan stopped there and nothing after it was looked at. */
  exceeded?: 'values' | 'depth';
  /** Where the first number a double does not hold as written is (jsonPathText). */
  unfaithfulNumber?: JsonPathStep[];
  /** Where the first lone surrogate is (jsonPathText). */
  loneSurrogate?: JsonPathStep[];
}

const OBJECT = 0;
const ARRAY = 1;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * Reads a JSON text once, byte by byte, without recursion, before anything parses it, and
 * finds in that one pass:
 *
 * - its cost: how many values it holds and how deeply it nests. JSON.parse reads any depth,
 *   but JSON.stringify and every recursive reader after it overflow the stack at a few thousand
 *   levels (a QC report of 20,000 nested arrays threw RangeError each time it was stored);
 *   parsing costs microseconds per value on the event loop (FHIR bodies). With limits, the
 *   scan stops at the first one passed and names it. Brackets and commas inside strings do not
 *   count (UTF-8 continuation bytes never equal the ASCII marks counted);
 * - the first number that a double does not hold as written. JSON.parse reads every number as
 *   an IEEE 754 double without a word: `1e400` becomes Infinity (stored as null), `1e-400`
 *   becomes 0, and `12345678901234567890.123` becomes 12345678901234567000, so the value stored
 *   and served back is one nobody sent (RFC 8259 §6 leaves such numbers to the reader; FHIR
 *   decimals keep their value, R4 datatypes.html#decimal). A number holds when its decimal
 *   value, read as a double and written back, is the same decimal value: trailing zeros
 *   (`1.50`) and the sign of zero do not count;
 * - the first lone surrogate: half a UTF-16 pair, written as a `\ud800` escape alone (RFC 8259
 *   §8.2 lets it be written and JSON.parse keeps it), or an escaped half beside a whole
 *   character of the text. Such a string is no sequence of Unicode characters: a FHIR string
 *   is Unicode (R4 datatypes.html#primitive), and UTF-8, jsonb and every receiver after us
 *   cannot carry it. As firstLoneSurrogate (json-unicode.ts) finds it in a parsed value: the
 *   path of the string value that holds one, or of the object whose key holds one, an object's
 *   keys coming before what it holds.
 *
 * The two findings mean something only for valid JSON (read it with JSON.parse too); on any
 * text the pass stays linear: each byte is looked at once (a number's digits twice), and only
 * a finding builds its path, once.
 */
export function scanJson(
  input: Buffer,
  limits: { maxValues?: number; maxDepth?: number } = {},
): JsonScan {
  const maxValues = limits.maxValues ?? Infinity;
  const maxDepth = limits.maxDepth ?? Infinity;
  // The open containers, innermost last: kind, the index of the array item being read, and
  // where the key being read (its quotes included) lies in the input.
  const kinds: number[] = [];
  const indexes: number[] = [];
  const keyStarts: number[] = [];
  const keyEnds: number[] = [];
  const expectKey: boolean[] = [];
  let values = 1;
  let depth = 0;
  let max = 0;
  let unfaithfulNumber: JsonPathStep[] | undefined;
  let loneSurrogate: JsonPathStep[] | undefined;
  // How many of the open containers held loneSurrogate when it was found: only a key of one of
  // them (closer to the root) can come before it.
  let surrogateDepth = 0;

  /** The path of the value being read in the first `count` open containers. */
  const steps = (count: number): JsonPathStep[] => {
    const out: JsonPathStep[] = [];
    for (let f = 0; f < count; f++)
      out.push(kinds[f] === ARRAY ? indexes[f]! : keyText(input, keyStarts[f]!, keyEnds[f]!));
    return out;
  };

  const n = input.length;
  for (let i = 0; i < n; i++) {
    const c = input[i]!;
    if (c === QUOTE) {
      const top = kinds.length - 1;
      const isKey = top >= 0 && kinds[top] === OBJECT && expectKey[top]!;
      // Once one is found, only a key of a container holding it can still come before it.
      const look = loneSurrogate === undefined || (isKey && top < surrogateDepth);
      const end = look ? scanString(input, i) : skipString(input, i);
      const lone = end < 0;
      const close = lone ? -end : end;
      if (isKey) {
        keyStarts[top] = i;
        keyEnds[top] = close + 1;
        expectKey[top] = false;
        if (lone && loneSurrogate === undefined) {
          loneSurrogate = steps(top);
          surrogateDepth = top;
        } else if (lone && loneSurrogate !== undefined && top < surrogateDepth) {
          // This object holds the one found (it is still open): its path is a start of that one.
          loneSurrogate.length = top;
          surrogateDepth = top;
        }
      } else if (lone && loneSurrogate === undefined) {
        loneSurrogate = steps(kinds.length);
        surrogateDepth = kinds.length;
      }
      i = close;
      if (values > maxValues) return { values, depth: max, exceeded: 'values' };
      continue;
    }
    if (c === 0x2c /* , */) {
      values++;
      const top = kinds.length - 1;
      if (top >= 0) {
        if (kinds[top] === OBJECT) expectKey[top] = true;
        else indexes[top] = indexes[top]! + 1;
      }
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      values++;
      if (++depth > max) max = depth;
      if (depth > maxDepth) return { values, depth: max, exceeded: 'depth' };
      kinds.push(c === 0x7b ? OBJECT : ARRAY);
      indexes.push(0);
      keyStarts.push(0);
      keyEnds.push(0);
      expectKey.push(c === 0x7b);
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      depth--;
      if (kinds.length > 0) {
        kinds.pop();
        indexes.pop();
        keyStarts.pop();
        keyEnds.pop();
        expectKey.pop();
        if (kinds.length < surrogateDepth) surrogateDepth = kinds.length;
      }
    } else if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      let end = i + 1;
      while (end < n && isNumberByte(input[end]!)) end++;
      if (unfaithfulNumber === undefined && !holds(input.toString('latin1', i, end)))
        unfaithfulNumber = steps(kinds.length);
      i = end - 1;
    }
    if (values > maxValues) return { values, depth: max, exceeded: 'values' };
  }
  return {
    values,
    depth: max,
    ...(unfaithfulNumber ? { unfaithfulNumber } : {}),
    ...(loneSurrogate ? { loneSurrogate } : {}),
  };
}

/** How deeply the objects and arrays of a JSON text nest (0 for a scalar; off the hot paths). */
export function jsonDepth(text: string): number {
  return scanJson(Buffer.from(text, 'utf8')).depth;
}

/**
 * A finding's path as the refusals name it (`ServiceRequest.extension[0].valueDecimal`): keys
 * joined with dots after `rootPath`, indexes as `[i]`.
 */
export function jsonPathText(steps: readonly JsonPathStep[], rootPath: string): string {
  let out = rootPath;
  for (const step of steps) {
    if (typeof step === 'number') out = `${out}[${step}]`;
    else out = out ? `${out}.${step}` : step;
  }
  return out;
}

/**
 * The index of the quote closing the string opened at `open` (the input's length when none),
 * negated when the string holds a lone surrogate. Its UTF-16 code units are followed without
 * decoding: an escape `\uXXXX` is one; a character of four UTF-8 bytes is a whole pair; any
 * other character is no surrogate (a surrogate written in UTF-8 is no UTF-8: the strict
 * decoder refuses it). The string ends where a reader skipping one byte after each `\` ends it.
 */
function scanString(input: Buffer, open: number): number {
  const n = input.length;
  let high = false;
  let i = open + 1;
  while (i < n) {
    const c = input[i]!;
    if (c === QUOTE) return high ? -i : i;
    let unit = 0; // no surrogate
    if (c === BACKSLASH) {
      const hex = input[i + 1] === 0x75 /* u */ ? hexUnit(input, i + 2) : -1;
      if (hex >= 0) {
        unit = hex;
        i += 6;
      } else {
        i += 2;
      }
    } else if (c >= 0xf0) {
      // A whole pair: a high half left waiting is lone; the pair itself is not.
      if (high) return -skipString(input, i - 1);
      i += 1;
      continue;
    } else {
      i += 1;
      if (c >= 0x80 && c < 0xc0) continue; // a continuation byte: the same character
    }
    if (unit >= 0xd800 && unit <= 0xdbff) {
      if (high) return -skipString(input, i - 1);
      high = true;
    } else if (unit >= 0xdc00 && unit <= 0xdfff) {
      if (!high) return -skipString(input, i - 1);
      high = false;
    } else if (high) {
      return -skipString(input, i - 1);
    }
  }
  return n;
}

/**
 * The index of the quote closing the string read from `from` (a position inside it, or its
 * opening quote), the input's length when none.
 */
function skipString(input: Buffer, from: number): number {
  const n = input.length;
  for (let i = from + 1; i < n; i++) {
    const c = input[i]!;
    if (c === BACKSLASH) i++;
    else if (c === QUOTE) return i;
  }
  return n;
}

/** The code unit of four hex digits at `at`, or -1 when they are not four hex digits. */
function hexUnit(input: Buffer, at: number): number {
  if (at + 4 > input.length) return -1;
  let unit = 0;
  for (let k = at; k < at + 4; k++) {
    const c = input[k]!;
    const digit =
      c >= 0x30 && c <= 0x39
        ? c - 0x30
        : c >= 0x61 && c <= 0x66
          ? c - 0x57
          : c >= 0x41 && c <= 0x46
            ? c - 0x37
            : -1;
    if (digit < 0) return -1;
    unit = unit * 16 + digit;
  }
  return unit;
}

/** A key as JSON.parse reads it, from its quoted text. */
function keyText(input: Buffer, start: number, end: number): string {
  const raw = input.toString('utf8', start, end);
  if (!raw.includes('\\')) return raw.slice(1, -1);
  try {
    return JSON.parse(raw) as string;
  } catch {
    return raw.slice(1, -1); // not JSON: the finding is not used
  }
}

/** 0-9 e E + - . */
function isNumberByte(c: number): boolean {
  return (
    (c >= 0x30 && c <= 0x39) || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d || c === 0x2e
  );
}

/** Whether a JSON number literal survives a double: same decimal value once read and written. */
function holds(literal: string): boolean {
  // Up to 15 significant digits between 1e-15 and 1e15 always survive (DBL_DIG).
  if (
    /^-?\d{1,15}(\.\d{1,15})?$/.test(literal) &&
    literal.replace(/[-.]/g, '').replace(/^0+/, '').length <= 15
  )
    return true;
  const value = Number(literal);
  if (!Number.isFinite(value)) return false;
  // Written as a double writes itself back (0.30000000000000004): nothing to compare.
  const written = String(value);
  return written === literal || decimalOf(literal) === decimalOf(written);
}

/** A number's decimal value as `digits e exponent` (no leading or trailing zeros; 0 as `0`). */
function decimalOf(text: string): string {
  const m = /^-?(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (!m) return text;
  const whole = m[1] ?? '';
  const fraction = m[2] ?? '';
  let exponent = Number(m[3] ?? 0) - fraction.length;
  let digits = `${whole}${fraction}`.replace(/^0+/, '');
  if (digits === '') return '0';
  const trimmed = digits.replace(/0+$/, '');
  exponent += digits.length - trimmed.length;
  digits = trimmed;
  return `${text.startsWith('-') ? '-' : ''}${digits}e${exponent}`;
}
