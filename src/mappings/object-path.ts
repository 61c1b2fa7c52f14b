/** Sets `value` at a dotted path (`patient.name`), creating the objects on the way. */
export function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split('.');
  let obj = target;
  for (const key of keys.slice(0, -1)) {
    if (typeof obj[key] !== 'object' || obj[key] === null) obj[key] = {};
    obj = obj[key] as Record<string, unknown>;
  }
  obj[keys[keys.length - 1]!] = value;
}
