/**
 * The path of the first key that appears twice in one object of a JSON text (`status`,
 * `code.coding[0].system`), or undefined. JSON.parse keeps the last of two equal keys without
 * a word, so `"status":"active", …, "status":"revoked"` would be read as whichever came last,
 * while another reader may take the first: such a body has no one meaning (RFC 8259 §4: names
 * SHOULD be unique; FHIR JSON allows each property once).
 *
 * The text must already be valid JSON (run after JSON.parse). One pass, an explicit stack (no
 * recursion, so nesting depth cannot overflow), each key decoded once: linear in the text.
 */
export function firstDuplicateKey(text: string, rootPath = ''): string | undefined {
  interface Frame {
    kind: 'object' | 'array';
    keys?: Set<string>;
    /** The key or index of the value being read in this container. */
    at: string;
    index: number;
    expectKey: boolean;
  }
  const stack: Frame[] = [];
  const path = (leaf: string): string => {
    let out = rootPath;
    for (const f of stack.slice(0, -1)) out = join(out, f.at);
    return join(out, leaf);
  };
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    const top = stack[stack.length - 1];
    if (c === 0x7b /* { */) {
      if (top?.kind === 'array') top.at = `[${top.index}]`;
      stack.push({ kind: 'object', keys: new Set(), at: '', index: 0, expectKey: true });
    } else if (c === 0x5b /* [ */) {
      if (top?.kind === 'array') top.at = `[${top.index}]`;
      stack.push({ kind: 'array', at: '[0]', index: 0, expectKey: false });
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    } else if (c === 0x2c /* , */) {
      if (top?.kind === 'object') top.expectKey = true;
      else if (top) top.index++;
    } else if (c === 0x22 /* " */) {
      const end = stringEnd(text, i);
      if (top?.kind === 'object' && top.expectKey) {
        const raw = text.slice(i, end + 1);
        const key = raw.includes('\\') ? (JSON.parse(raw) as string) : raw.slice(1, -1);
        if (top.keys!.has(key)) return path(key);
        top.keys!.add(key);
        top.at = key;
        top.expectKey = false;
      }
      i = end;
    }
  }
  return undefined;
}

/** Index of the quote that closes the JSON string opened at `start` (the text's end if none). */
export function stringEnd(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5c /* \ */) i++;
    else if (c === 0x22) return i;
  }
  return text.length - 1;
}

function join(path: string, segment: string): string {
  if (!segment) return path;
  if (segment.startsWith('[')) return `${path}${segment}`;
  return path ? `${path}.${segment}` : segment;
}
