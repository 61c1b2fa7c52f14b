/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const ANY_SURROGATE = /[\uD800-\uDFFF]/;

/** Whether a string holds half a surrogate pair: a code unit that is no Unicode character. */
export function holdsLoneSurrogate(text: string): boolean {
  return ANY_SURROGATE.test(text) && LONE_SURROGATE.test(text);
}

/**
 * Where the first lone surrogate of a parsed JSON value is, in document order: the path of the
 * string value that holds one (`ServiceRequest.code.text`, array items as `[i]`), or of the
 * object whose key holds one. JSON (RFC 8259 §8.2) lets `\ud800` be written alone and
 * JSON.parse keeps it, but such a string is no sequence of Unicode characters: a FHIR string
 * is Unicode (R4 datatypes.html#primitive), and UTF-8, jsonb and every receiver after us
 * cannot carry it. Iterative, so deep nesting cannot overflow the stack. For values read from
 * elsewhere (the EHR's answers, fhir-validator.ts); a FHIR body coming in is checked by scanJson
 * (json-scan.ts), in the same pass over its bytes as its cost, with the same paths.
 */
export function firstLoneSurrogate(root: unknown, rootPath: string): string | undefined {
  const stack: Array<{ value: unknown; path: string }> = [{ value: root, path: rootPath }];
  while (stack.length > 0) {
    const { value, path } = stack.pop()!;
    if (typeof value === 'string') {
      if (holdsLoneSurrogate(value)) return path;
      continue;
    }
    if (value === null || typeof value !== 'object') continue;
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--)
        stack.push({ value: value[i], path: `${path}[${i}]` });
      continue;
    }
    const entries = Object.entries(value);
    if (entries.some(([key]) => holdsLoneSurrogate(key))) return path;
    for (let i = entries.length - 1; i >= 0; i--) {
      const [key, inner] = entries[i]!;
      stack.push({ value: inner, path: path ? `${path}.${key}` : key });
    }
  }
  return undefined;
}

/** What a refusal of a lone surrogate at `path` says (the sender's fix included). */
export function loneSurrogateMessage(path: string): string {
  return `${path} holds a lone surrogate escape (half a UTF-16 pair, such as \\ud800 alone): FHIR strings are Unicode text (R4 datatypes.html#string); send the whole character or leave it out`;
}
