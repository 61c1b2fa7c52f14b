import { EMPTY, refused, type TransformFn } from './hl7-value.kit';
import { productLineage, resolveProducts } from './product-table';

/**
 * Products from the requested procedure code through the product table (product-table.ts
 * resolveProducts). Unknown codes follow the configured rule; cancel and status messages need
 * no products and never fail here. Each lineage line carries the product stored and the
 * table row (or unknown-procedure rule) that chose it.
 */
export const productTable: TransformFn = (input) => {
  const code = input.segment.value(input.loc.field, 1, 1);
  const system = input.segment.value(input.loc.field, 1, 3);
  if (code === undefined) return EMPTY;
  const source = input.segment.locationOf(input.loc.field, undefined, 1);
  const action = input.partial.action;
  const resolved = resolveProducts(input.config.productTable, input.config.unknownProcedure, [
    { code, system },
  ]);
  if (
    resolved.kind === 'products' &&
    (resolved.row || (action !== 'cancel' && action !== 'status'))
  ) {
    const value = resolved.products.map((p) => p.product);
    return { kind: 'value', value, lines: productLineage(resolved.products, source) };
  }
  if (action === 'cancel' || action === 'status') return { kind: 'value', value: [], lines: [] };
  return refused(source, 103, `Procedure code ${code} has no AI product configured`);
};
