/**
 * The path of the first number in a JSON text that a double does not hold as written
 * (`ServiceRequest.extension[0].valueDecimal`), or undefined. JSON.parse reads every number
 * as an IEEE 754 double without a word: `1e400` becomes Infinity (stored as null), `1e-400`
 * becomes 0, and `12345678901234567890.123` becomes 12345678901234567000, so the value stored
 * and served back is one nobody sent (RFC 8259 §6 leaves such numbers to the reader; FHIR
 * decimals keep their value, R4 datatypes.html#decimal). A number holds when its decimal
 * value, read as a double and written back, is the same decimal value: trailing zeros
 * (`1.50`) and the sign of zero do not count.
 *
 * The text must already be valid JSON (run after JSON.parse). One pass with an explicit stack.
 */
export function firstUnfaithfulNumber(text: string, rootPath = ''): string | undefined {
  interface Frame {
    kind: 'object' | 'array';
    at: string;
    index: number;
    expectKey: boolean;
  }
  const stack: Frame[] = [];
  const path = (): string => {
    let out = rootPath;
    for (const f of stack) out = join(out, f.at);
    return out;
  };
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    const top = stack[stack.length - 1];
    if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (top?.kind === 'array') top.at = `[${top.index}]`;
      stack.push(
        c === 0x7b
          ? { kind: 'object', at: '', index: 0, expectKey: true }
          : { kind: 'array', at: '[0]', index: 0, expectKey: false },
      );
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    } else if (c === 0x2c /* , */) {
      if (top?.kind === 'object') top.expectKey = true;
      else if (top) top.at = `[${++top.index}]`;
    } else if (c === 0x22 /* " */) {
      let end = i + 1;
      while (end < n && text.charCodeAt(end) !== 0x22) end += text.charCodeAt(end) === 0x5c ? 2 : 1;
      if (top?.kind === 'object' && top.expectKey) {
        const raw = text.slice(i, end + 1);
        top.at = raw.includes('\\') ? (JSON.parse(raw) as string) : raw.slice(1, -1);
        top.expectKey = false;
      }
      i = end;
    } else if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      let end = i + 1;
      while (end < n && /[0-9eE+\-.]/.test(text[end]!)) end++;
      const literal = text.slice(i, end);
      if (!holds(literal)) {
        if (top?.kind === 'array') top.at = `[${top.index}]`;
        return path();
      }
      i = end - 1;
    }
  }
  return undefined;
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
  return decimalOf(literal) === decimalOf(String(value));
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

function join(path: string, segment: string): string {
  if (!segment) return path;
  if (segment.startsWith('[')) return `${path}${segment}`;
  return path ? `${path}.${segment}` : segment;
}
