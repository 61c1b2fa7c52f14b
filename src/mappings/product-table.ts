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

/**
 * Other names real senders give the coding systems a product table row names (HL7 table 0396
 * mnemonics): the UMLS abbreviations and spelled-out names in CE-3 (`LNC`, `LOINC`, `CPT4`), and
 * the HL7 OIDs of the terminologies (in CE-3 or as a FHIR `urn:oid:` system, as documents
 * converted from CDA carry them). Compared upper-case, `urn:oid:` stripped. A row's `LN`
 * matched none of them: `24627-2^CT Chest^LNC` was AE 103 "no AI product configured".
 */
export const CODING_SYSTEM_SYNONYMS: Readonly<Record<string, string>> = {
  LNC: 'LN',
  LOINC: 'LN',
  '2.16.840.1.113883.6.1': 'LN',
  SNOMED: 'SCT',
  SNOMEDCT: 'SCT',
  'SNOMED-CT': 'SCT',
  'SNOMED CT': 'SCT',
  '2.16.840.1.113883.6.96': 'SCT',
  CPT: 'C4',
  CPT4: 'C4',
  'CPT-4': 'C4',
  '2.16.840.1.113883.6.12': 'C4',
  '2.16.840.1.113883.6.256': 'RADLEX',
};

export function canonicalSystem(system: string | undefined): string | undefined {
  const s = system
    ?.trim()
    .toUpperCase()
    .replace(/^URN:OID:/, '');
  return s === undefined ? undefined : (CODING_SYSTEM_SYNONYMS[s] ?? s);
}

export function lookupProducts(
  table: readonly ProductTableRow[],
  code: string | undefined,
  system: string | undefined,
): ProductLookup {
  if (code === undefined) return { products: [] };
  const norm = (s: string | undefined): string | undefined => s?.trim().toUpperCase();
  const sent = canonicalSystem(system);
  const row = table.find(
    (r) =>
      norm(r.code) === norm(code) && (r.system === undefined || canonicalSystem(r.system) === sent),
  );
  return row ? { products: row.products, row } : { products: [] };
}

/**
 * The one lineage rule id of the unknown-procedure default, whichever front door applied it
 * (HL7 with an unknown code, HL7 without OBR-4, FHIR with an unknown or no coding).
 */
export const DEFAULT_PRODUCTS_RULE_ID = 'order.products.unknown-procedure-default';

/** `24590-2^LN` — a code as HL7 CE writes it, with its system when the row names one. */
function codeText(code: string, system: string | undefined): string {
  return system ? `${code}^${system}` : code;
}

/** The table row as a lineage rule: `product-table: 24590-2^LN → brain-mr-volumetry`. */
export function productRowRule(row: ProductTableRow): string {
  return `product-table: ${codeText(row.code, row.system)} → ${row.products.join(', ')}`;
}

/** One product the order runs, with the rule that chose it (for the lineage). */
export interface ResolvedProduct {
  product: string;
  /** The table row or the unknown-procedure rule, readable. */
  rule: string;
  /** Set for the unknown-procedure default (one id for both front doors). */
  ruleId?: string;
}

/**
 * The lineage of resolved products, one line per product (`[i]`), each with the rule that
 * chose it and, for the unknown-procedure default, its rule id.
 */
export function productLineage(products: readonly ResolvedProduct[], source: string) {
  return products.map((p, i) => ({
    suffix: `[${i}]`,
    source,
    value: p.product,
    rule: p.rule,
    ...(p.ruleId ? { ruleId: p.ruleId } : {}),
  }));
}

export type ProductResolution =
  | { kind: 'products'; products: ResolvedProduct[]; row?: ProductTableRow }
  /** The unknown-procedure rule refuses: no product can be chosen. */
  | { kind: 'reject'; reason: 'unknown-code' | 'no-code' };

/**
 * The products for a procedure: the first candidate code the table knows, else the site's
 * unknown-procedure rule (reject, or run its default products). Used by the HL7 transform,
 * the HL7 no-procedure case and the FHIR extractor, so the rule and its lineage are one.
 * `candidates` are the codes sent, in preference order (HL7: OBR-4.1 with its system; FHIR:
 * each coding with its system after aliasing); empty when no procedure was sent.
 */
export function resolveProducts(
  table: readonly ProductTableRow[],
  unknown: UnknownProcedureRule,
  candidates: ReadonlyArray<{ code: string | undefined; system: string | undefined }>,
): ProductResolution & { index?: number } {
  for (let i = 0; i < candidates.length; i++) {
    const c = candidates[i]!;
    const hit = lookupProducts(table, c.code, c.system);
    if (hit.row) {
      const rule = productRowRule(hit.row);
      return {
        kind: 'products',
        products: hit.products.map((product) => ({ product, rule })),
        row: hit.row,
        index: i,
      };
    }
  }
  const sent = candidates.filter((c) => c.code !== undefined);
  switch (unknown.kind) {
    case 'reject':
      return { kind: 'reject', reason: sent.length ? 'unknown-code' : 'no-code' };
    case 'default-products': {
      const what = sent.length
        ? `${sent.map((c) => codeText(c.code!, c.system)).join(', ')} not in the product table`
        : 'no procedure code';
      const rule = `unknown-procedure: ${what} → default-products ${unknown.products.join(', ')}`;
      return {
        kind: 'products',
        products: unknown.products.map((product) => ({
          product,
          rule,
          ruleId: DEFAULT_PRODUCTS_RULE_ID,
        })),
      };
    }
    default:
      return unknown satisfies never;
  }
}
