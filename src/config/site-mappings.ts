import {
  DEFAULT_HL7_ORDER_MAPPING_CONFIG,
  type Hl7OrderMappingConfig,
} from '../mappings/hl7-order.config';
import { DEFAULT_PRODUCT_TABLE, type ProductTableRow } from '../mappings/product-table';
import type { AppConfig } from './app-config';

export type ProductTableMode = 'replace' | 'extend';

/**
 * The product table in effect for one front door. CONFIG_FILE rows come from
 * `mappings.productTable` (both front doors) or, for HL7 only and as before,
 * `mappings.hl7.productTable`. `mappings.productTableMode` says what they do to the built-in
 * table: `replace` (the default: only the site's rows) or `extend` (the site's rows first,
 * then the built-in ones; the first matching row wins, so a site row overrides a built-in row
 * for the same code). Without site rows the built-in table applies.
 */
export function siteProductTable(
  config: AppConfig,
  frontDoor: 'hl7' | 'fhir',
): readonly ProductTableRow[] {
  const mappings = (config.site.mappings ?? {}) as Record<string, unknown>;
  const hl7 = (mappings.hl7 ?? {}) as { productTable?: ProductTableRow[] };
  const rows =
    (mappings.productTable as ProductTableRow[] | undefined) ??
    (frontDoor === 'hl7' ? hl7.productTable : undefined);
  if (!rows) return DEFAULT_PRODUCT_TABLE;
  return productTableMode(config) === 'extend' ? [...rows, ...DEFAULT_PRODUCT_TABLE] : rows;
}

export function productTableMode(config: AppConfig): ProductTableMode {
  const mode = (config.site.mappings as Record<string, unknown> | undefined)?.productTableMode;
  return mode === 'extend' ? 'extend' : 'replace';
}

/**
 * The HL7 order mapping in effect at this site: CONFIG_FILE `mappings.hl7` over the defaults
 * (shallow: each key replaces the default), the product table as above. Read by the MLLP
 * front door and shown on the audit page's mapping tables.
 */
export function siteHl7Mapping(config: AppConfig): Hl7OrderMappingConfig {
  const overrides = (config.site.mappings?.hl7 ?? {}) as Partial<Hl7OrderMappingConfig>;
  return {
    ...DEFAULT_HL7_ORDER_MAPPING_CONFIG,
    ...overrides,
    productTable: siteProductTable(config, 'hl7'),
  };
}
