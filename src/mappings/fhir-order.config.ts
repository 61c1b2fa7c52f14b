import { FHIR_CODE_SYSTEMS_0396 } from './coding-systems.table';
import {
  DEFAULT_PRODUCT_TABLE,
  type ProductTableRow,
  type UnknownProcedureRule,
} from './product-table';

/** Per-site settings of the FHIR ServiceRequest → OrderRequest mapping. */
export interface FhirOrderMappingConfig {
  /** The same product table as the HL7 front door (one table per site). */
  productTable: readonly ProductTableRow[];
  /** What happens when no coding of ServiceRequest.code is in the product table. */
  unknownProcedure: UnknownProcedureRule;
  /**
   * FHIR code system URIs → the HL7 table 0396 names the product table uses, so one row
   * (`system: 'LN'`) matches an HL7 CE `^LN` and a FHIR `http://loinc.org` coding alike.
   */
  systemAliases: Readonly<Record<string, string>>;
  /**
   * ServiceRequest.intent values accepted as orders (R4 value set request-intent). Proposals
   * and plans are not orders: the adapter must not run AI on them.
   */
  acceptedIntents: readonly string[];
}

export const DEFAULT_FHIR_ORDER_MAPPING_CONFIG: FhirOrderMappingConfig = {
  productTable: DEFAULT_PRODUCT_TABLE,
  unknownProcedure: { kind: 'reject' },
  // HL7 v2 table 0396 mnemonics for the FHIR R4 terminology URIs (terminologies.html#4.3.0).
  systemAliases: FHIR_CODE_SYSTEMS_0396,
  acceptedIntents: ['order', 'original-order', 'reflex-order', 'filler-order', 'instance-order'],
};
