/**
 * What is wrong with a text JSON.parse refused, in words that never repeat the text.
 *
 * V8 quotes the text itself when a character stands where none may (`Unexpected token 'S',
 * ..."family": Shaw,"... is not valid JSON`: up to ten characters either side of the fault, or
 * a short text whole). A FHIR body's refusal is stored and shown to analysts as the message's
 * answer, so that excerpt carried a patient's name or birth date past the masking. Here such a
 * message becomes the fault's position, read from where the excerpt sits in the text; every
 * other message is kept only when it is one of V8's own that name a position and nothing else.
 */
export function describeJsonSyntaxError(error: unknown, text: string): string {
  const message = error instanceof Error ? error.message : '';
  if (message === 'Unexpected end of JSON input') return message;
  if (/^[\w ',{}[\]:-]+ in JSON at position \d+(?: \(line \d+ column \d+\))?$/.test(message))
    return message;
  const position = unexpectedTokenPosition(message, text);
  return position === undefined
    ? 'Unexpected token: a character that starts no JSON value, name or separator (not repeated here)'
    : `Unexpected token in JSON at position ${position} (${lineAndColumn(text, position)})`;
}

/** Characters V8 shows on each side of the fault. */
const CONTEXT = 10;

/** Where the character V8 quotes stands, when its excerpt places it without doubt. */
function unexpectedTokenPosition(message: string, text: string): number | undefined {
  const m = /^Unexpected token '([\s\S]+?)', (\.\.\.)?"([\s\S]*)"(\.\.\.)? is not valid JSON$/.exec(
    message,
  );
  if (!m) return undefined;
  const [, token = '', before, excerpt = '', after] = m;
  let position: number | undefined;
  if (before) {
    const at = text.indexOf(excerpt);
    if (at >= 0 && text.indexOf(excerpt, at + 1) < 0) position = at + CONTEXT;
  } else if (after && text.startsWith(excerpt)) {
    position = excerpt.length - CONTEXT;
  }
  return position !== undefined && position >= 0 && text.startsWith(token, position)
    ? position
    : undefined;
}

/** `line 3 column 14`, as V8 writes it (both from 1). */
function lineAndColumn(text: string, position: number): string {
  let line = 1;
  let lineStart = 0;
  for (let i = text.indexOf('\n'); i >= 0 && i < position; i = text.indexOf('\n', i + 1)) {
    line += 1;
    lineStart = i + 1;
  }
  return `line ${line} column ${position - lineStart + 1}`;
}
