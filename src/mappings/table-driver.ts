import type { MappedField } from '../domain/order-request';

/** Sets `value` at a dotted path (`patient.name`), creating the objects on the way. */
function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split('.');
  let obj = target;
  for (const key of keys.slice(0, -1)) {
    if (typeof obj[key] !== 'object' || obj[key] === null) obj[key] = {};
    obj = obj[key] as Record<string, unknown>;
  }
  obj[keys[keys.length - 1]!] = value;
}

/** One lineage line of a mapped value: where a part of it was read and what it was. */
export interface LineageLine {
  /** Appended to the row's target, e.g. `[0].value`. */
  suffix: string;
  source: string;
  /** The value as stored in the OrderRequest. */
  value: string;
  /** Overrides the row's rule id (the unknown-procedure default has one id everywhere). */
  ruleId?: string;
  /** The table row or conversion that produced `value` from the source (MappedField.rule). */
  rule?: string;
}

/**
 * One table row's value written into the order being built, and where each part came from
 * appended to the lineage (target + suffix, source, value, the row's rule ID).
 */
export function applyRow(
  values: Record<string, unknown>,
  lineage: MappedField[],
  row: { readonly target: string; readonly ruleId: string },
  value: unknown,
  lines: readonly LineageLine[],
): void {
  setPath(values, row.target, value);
  for (const line of lines) {
    lineage.push({
      target: `${row.target}${line.suffix}`,
      source: line.source,
      value: line.value,
      ruleId: line.ruleId ?? row.ruleId,
      ...(line.rule !== undefined ? { rule: line.rule } : {}),
    });
  }
}
