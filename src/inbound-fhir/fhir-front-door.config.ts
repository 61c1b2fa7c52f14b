import type { AppConfig } from '../config/app-config';
import { siteProductTable } from '../config/site-mappings';
import {
  DEFAULT_FHIR_ORDER_MAPPING_CONFIG,
  type FhirOrderMappingConfig,
} from '../mappings/fhir-order.config';
import type { UnknownProcedureRule } from '../mappings/product-table';

/** The FHIR front door's settings, read once from the validated app config. */
export interface FhirFrontDoorConfig {
  mapping: FhirOrderMappingConfig;
  /**
   * This server's FHIR base as clients reach it (FHIR_PUBLIC_BASE_URL, no trailing `/`); unset:
   * the address each connection reached. Never the Host header (any sender writes that).
   */
  publicBaseUrl?: string;
  maxBodyBytes: number;
  /** Most JSON values in one body (FHIR_MAX_JSON_VALUES); 413 too-costly above. */
  maxJsonValues: number;
  /**
   * Most events (and resource entries) in one Subscription notification
   * (FHIR_MAX_NOTIFICATION_EVENTS): each may be a read of the EHR and an order within the
   * EHR's one request; 413 too-costly above, before any of it.
   */
  maxNotificationEvents: number;
  /** Extra search parameters for catch-up searches on the EHR (e.g. `category=363679005`). */
  catchUpSearch: Record<string, string>;
  /**
   * The sender token the EHR sends with its notifications (FHIR_SUBSCRIPTION_TOKEN): the one
   * sender that reads the orders of the EHR's Subscription channel. Unset: any sender token
   * may post notifications, so any may read them.
   */
  subscriptionToken?: string;
  subscription?: {
    topic: string;
    endpoint: string;
    payload: 'empty' | 'id-only' | 'full-resource';
    filter?: string;
    header?: string;
  };
}

export function parseUnknownProcedureRule(value: string): UnknownProcedureRule {
  if (value === 'reject') return { kind: 'reject' };
  const products = value
    .slice('default-products:'.length)
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
  return { kind: 'default-products', products };
}

export function fhirFrontDoorConfig(config: AppConfig): FhirFrontDoorConfig {
  return {
    mapping: {
      ...DEFAULT_FHIR_ORDER_MAPPING_CONFIG,
      productTable: siteProductTable(config, 'fhir'),
      unknownProcedure: parseUnknownProcedureRule(config.FHIR_UNKNOWN_PROCEDURE),
    },
    publicBaseUrl: config.FHIR_PUBLIC_BASE_URL,
    maxBodyBytes: config.FHIR_MAX_BODY_BYTES,
    maxJsonValues: config.FHIR_MAX_JSON_VALUES,
    maxNotificationEvents: config.FHIR_MAX_NOTIFICATION_EVENTS,
    subscriptionToken: config.FHIR_SUBSCRIPTION_TOKEN,
    catchUpSearch: Object.fromEntries(new URLSearchParams(config.FHIR_CATCHUP_SEARCH).entries()),
    subscription:
      config.FHIR_SUBSCRIPTION_CREATE &&
      config.FHIR_SUBSCRIPTION_TOPIC &&
      config.FHIR_SUBSCRIPTION_ENDPOINT
        ? {
            topic: config.FHIR_SUBSCRIPTION_TOPIC,
            endpoint: config.FHIR_SUBSCRIPTION_ENDPOINT,
            payload: config.FHIR_SUBSCRIPTION_PAYLOAD,
            filter: config.FHIR_SUBSCRIPTION_FILTER,
            header: config.FHIR_SUBSCRIPTION_TOKEN
              ? `Authorization: Bearer ${config.FHIR_SUBSCRIPTION_TOKEN}`
              : undefined,
          }
        : undefined,
  };
}
