/**
 * Which AI products run for which requested procedure. Declarative: one row per procedure code
 * (optionally qualified by its coding system, as sent in CE/CWE component 3). The first matching
 * row wins; a row without `system` matches the code in any system.
 *
 * The defaults below are an example for the sandbox and tests (LOINC / RSNA-Regenstrief
 * Playbook radiology codes, and local RIS codes seen in the fixtures); each site configures its
 * own table.
 */
export interface ProductTableRow {
  code: string;
  system?: string;
  products: readonly string[];
  /** Free text for people reading the table. */
  note?: string;
}

export type UnknownProcedureRule =
  { kind: 'reject' } | { kind: 'default-products'; products: readonly string[] };

export const DEFAULT_PRODUCT_TABLE: readonly ProductTableRow[] = [
  { code: '36643-5', system: 'LN', products: ['chest-xr-triage'], note: 'XR Chest 2 views' },
  { code: '24627-2', system: 'LN', products: ['lung-nodule-ct'], note: 'CT Chest' },
  { code: '24725-4', system: 'LN', products: ['head-ct-hemorrhage'], note: 'CT Head' },
  { code: '24590-2', system: 'LN', products: ['brain-mr-volumetry'], note: 'MR Brain' },
  { code: '24606-6', system: 'LN', products: ['mammo-density'], note: 'MG Breast screening' },
  { code: 'CTTHX', products: ['lung-nodule-ct'], note: 'local RIS code: CT thorax' },
  { code: 'CTSCHAED', products: ['head-ct-hemorrhage'], note: 'local RIS code: CT Schädel' },
  { code: 'MRKOPF', products: ['brain-mr-volumetry'], note: 'local RIS code: MRT Kopf' },
  { code: 'XRCHEST2V', products: ['chest-xr-triage'], note: 'local RIS code: chest PA/LAT' },
  {
    code: 'CTCAP',
    products: ['lung-nodule-ct', 'liver-lesion-ct'],
    note: 'local RIS code: CT chest/abdomen/pelvis',
  },
];

export interface ProductLookup {
  products: readonly string[];
  /** The matching row, or undefined when the code is unknown. */
  row?: ProductTableRow;
}

export function lookupProducts(
  table: readonly ProductTableRow[],
  code: string | undefined,
  system: string | undefined,
): ProductLookup {
  if (code === undefined) return { products: [] };
  const norm = (s: string | undefined): string | undefined => s?.trim().toUpperCase();
  const row = table.find(
    (r) =>
      norm(r.code) === norm(code) && (r.system === undefined || norm(r.system) === norm(system)),
  );
  return row ? { products: row.products, row } : { products: [] };
}
