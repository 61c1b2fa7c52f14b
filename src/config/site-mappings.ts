import {
  DEFAULT_HL7_ORDER_MAPPING_CONFIG,
  type Hl7OrderMappingConfig,
} from '../mappings/hl7-order.config';
import type { AppConfig } from './app-config';

/**
 * The HL7 order mapping in effect at this site: CONFIG_FILE `mappings.hl7` over the defaults
 * (shallow: each key replaces the default). Read by the MLLP front door and shown on the
 * audit page's mapping tables.
 */
export function siteHl7Mapping(config: AppConfig): Hl7OrderMappingConfig {
  const overrides = (config.site.mappings?.hl7 ?? {}) as Partial<Hl7OrderMappingConfig>;
  return { ...DEFAULT_HL7_ORDER_MAPPING_CONFIG, ...overrides };
}
