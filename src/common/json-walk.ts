/** What a visitor of walkJsonKeys answers for one key: go on, leave its value out, or stop. */
export type WalkAnswer = 'skip' | 'stop' | void;

/**
 * Visits every key of every object in a parsed JSON value, depth first, with the key's path
 * (`Bundle.entry[0].resource.id`, array items as `[i]`) and the path of the object holding it.
 * The visitor answers `skip` to not descend into that key's value, `stop` to end the walk.
 * Iterative, so deep nesting cannot overflow the stack.
 */
export function walkJsonKeys(
  root: unknown,
  rootPath: string,
  visit: (key: string, value: unknown, path: string, parentPath: string) => WalkAnswer,
): void {
  const stack: Array<{ value: unknown; path: string }> = [{ value: root, path: rootPath }];
  while (stack.length > 0) {
    const { value, path } = stack.pop()!;
    if (value === null || typeof value !== 'object') continue;
    if (Array.isArray(value)) {
      value.forEach((v, i) => stack.push({ value: v, path: `${path}[${i}]` }));
      continue;
    }
    for (const [key, inner] of Object.entries(value)) {
      const at = path ? `${path}.${key}` : key;
      const answer = visit(key, inner, at, path);
      if (answer === 'stop') return;
      if (answer !== 'skip') stack.push({ value: inner, path: at });
    }
  }
}
