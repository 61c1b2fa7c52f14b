import { quotedCode } from '../hl7/hl7-quoted';
import { EMPTY, refused, type TransformFn } from './hl7-value.kit';
import { productLineage, resolveProducts, type ProductTableRow } from './product-table';

/**
 * Where an OBR carries a requested procedure code, in the order the product table is asked:
 * OBR-4 (universal service ID, CE/CWE) with its identifier/coding system in components 1/3
 * and its alternate identifier/system in components 4/6, then OBR-44 (procedure code, CE,
 * v2.3+) likewise. Real senders fill every one of them: IHE Scheduled Workflow (RAD-4 v2.3.1)
 * puts the requested procedure code in OBR-4 components 4-6 and leaves 1-3 empty
 * (`^^^P1^Procedure 1^ERL_MESA`); EHRs send a local code first and LOINC or CPT as the
 * alternate (`CT100^CT THORAX^L^24627-2^CT Chest^LN`), or a local OBR-4 and CPT in OBR-44.
 */
export const OBR_PROCEDURE_CODE_PLACES = [
  { field: 4, code: 1, system: 3 },
  { field: 4, code: 4, system: 6 },
  { field: 44, code: 1, system: 3 },
  { field: 44, code: 4, system: 6 },
] as const;

/**
 * Products from the requested procedure through the product table (product-table.ts
 * resolveProducts): the first code of OBR_PROCEDURE_CODE_PLACES the table knows. When none
 * is known, the configured unknown-procedure rule; cancel and status messages need no products
 * and never fail here. Each lineage line carries the product stored, the place of the code
 * that chose it and the table row (or unknown-procedure rule).
 */
export const productTable: TransformFn = (input) => {
  const seg = input.segment;
  const places = OBR_PROCEDURE_CODE_PLACES.map((p) => ({
    code: seg.value(p.field, 1, p.code),
    system: seg.value(p.field, 1, p.system),
    at: seg.locationOf(p.field, undefined, p.code),
  })).filter((c) => c.code !== undefined);
  if (places.length === 0) return EMPTY;
  const action = input.partial.action;
  const resolved = resolveProducts(
    input.config.productTable,
    input.config.unknownProcedure,
    places,
  );
  if (
    resolved.kind === 'products' &&
    (resolved.row || (action !== 'cancel' && action !== 'status'))
  ) {
    const source = places[resolved.index ?? 0]!.at;
    const value = resolved.products.map((p) => p.product);
    return { kind: 'value', value, lines: productLineage(resolved.products, source) };
  }
  if (action === 'cancel' || action === 'status') return { kind: 'value', value: [], lines: [] };
  // One code: as before (`Procedure code USABD …`); several: each with where it was found.
  const sent =
    places.length === 1
      ? quotedCode(places[0]!.code ?? '')
      : places.map((c) => `${quotedCode(c.code ?? '')} (${c.at})`).join(', ');
  const verb = places.length === 1 ? 'code' : 'codes';
  const has = places.length === 1 ? 'has' : 'have';
  const other = otherSystem(input.config.productTable, places);
  const hint = other
    ? ` (the product table lists ${other.row.code} for coding system ${other.row.system}; ${other.at} came with ${other.system ? `coding system ${other.system}` : 'no coding system'})`
    : '';
  return refused(
    places[0]!.at,
    103,
    `Procedure ${verb} ${sent} ${has} no AI product configured${hint}`,
    // MSA-3 (80, v2.1-2.4): the fix when there is one the sender can make, else the codes
    other
      ? `Send ${other.row.code} with coding system ${other.row.system} (${other.at}): no AI product as sent`
      : `No AI product configured for procedure ${verb} ${places.map((c) => quotedCode(c.code ?? '')).join(', ')}`,
  );
};

/**
 * When a code sent is in the table under another coding system (most often: the sender left
 * CE-3 empty and the row says `LN`), the refusal says so; `24627-2 has no AI product` while the
 * table shows 24627-2 sends the analyst looking in the wrong place. Not matched leniently: a
 * local code may equal a code of another system.
 */
function otherSystem(
  table: readonly ProductTableRow[],
  places: ReadonlyArray<{ code?: string; system?: string; at: string }>,
): { row: ProductTableRow; system?: string; at: string } | undefined {
  const norm = (v: string | undefined) => v?.trim().toUpperCase();
  for (const c of places) {
    const row = table.find(
      (r) =>
        norm(r.code) === norm(c.code) &&
        r.system !== undefined &&
        norm(r.system) !== norm(c.system),
    );
    if (row) return { row, system: c.system, at: c.at };
  }
  return undefined;
}
