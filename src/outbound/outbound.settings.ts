import type { AppConfig } from '../config/app-config';
import type { Hl7ResultSettings } from '../mappings/hl7-result.mapping';
import { parseStatusOverrides, type StatusOverrides } from '../mappings/outbound-rows';
import { uidFromSeed, type DeviceInfo } from '../mappings/publication.model';

/**
 * The destinations (outbox.destination): three for results, one for alerts to a person, and
 * the upstream itself for the effects on it that must not be lost (a multipart upload aborted).
 */
export const DESTINATIONS = {
  fhir: 'ehr-fhir',
  hl7: 'ris-hl7',
  dicom: 'pacs-dicomweb',
  alert: 'alert-webhook',
  upstream: 'imaging-upstream',
} as const;
export type Destination = (typeof DESTINATIONS)[keyof typeof DESTINATIONS];

/** The settings that make a destination configured (the upstream's rows always are). */
export const DESTINATION_SETTINGS: Record<Destination, string> = {
  [DESTINATIONS.fhir]: 'FHIR_SERVER_URL',
  [DESTINATIONS.hl7]: 'RIS_MLLP_HOST and RIS_MLLP_PORT',
  [DESTINATIONS.dicom]: 'DICOMWEB_URL',
  [DESTINATIONS.alert]: 'ALERT_WEBHOOK_URL',
  [DESTINATIONS.upstream]: 'IMAGING_BASE_URL',
};

/** The destinations whose rows a worker of this configuration delivers. */
export function deliverableDestinations(config: AppConfig): Destination[] {
  return [...outboundSettings(config).destinations, DESTINATIONS.upstream];
}

export interface OutboundSettings {
  /** Destinations configured (a row is written only for these). */
  destinations: Destination[];
  overrides: StatusOverrides;
  ormStatusMessages: boolean;
  hl7: Hl7ResultSettings;
  maxAttempts: number;
  /** ALERT_COALESCE_SECONDS in ms: the window of a destination's and reason's dead-letter alerts. */
  alertCoalesceMs: number;
  /** A PDF larger than this is referenced in the DiagnosticReport and the ORU, not embedded. */
  pdfEmbedMaxBytes: number;
  /** DICOMWEB_URL, where the encapsulated PDF is stored (its WADO-RS URL is the reference). */
  pacsBaseUrl?: string;
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** Per-product device data from the site config (`mappings.devices`). */
  devices: Record<string, Partial<Omit<DeviceInfo, 'uid'>>>;
  deviceDefaults: { manufacturer: string; version: string };
}

export function outboundSettings(config: AppConfig): OutboundSettings {
  const mappings = (config.site.mappings ?? {}) as Record<string, unknown>;
  const destinations: Destination[] = [];
  if (config.FHIR_SERVER_URL) destinations.push(DESTINATIONS.fhir);
  if (config.RIS_MLLP_HOST && config.RIS_MLLP_PORT) destinations.push(DESTINATIONS.hl7);
  if (config.DICOMWEB_URL) destinations.push(DESTINATIONS.dicom);
  if (config.ALERT_WEBHOOK_URL) destinations.push(DESTINATIONS.alert);
  return {
    destinations,
    overrides: parseStatusOverrides(mappings.status),
    ormStatusMessages: config.RIS_ORM_STATUS_MESSAGES,
    hl7: {
      sendingApplication: config.RIS_SENDING_APPLICATION,
      sendingFacility: config.RIS_SENDING_FACILITY,
      defaultVersion: config.RIS_HL7_VERSION ?? '2.5.1',
      forceVersion: config.RIS_HL7_VERSION,
      textType: config.RIS_REPORT_TEXT_TYPE,
    },
    maxAttempts: config.OUTBOUND_MAX_ATTEMPTS,
    alertCoalesceMs: config.ALERT_COALESCE_SECONDS * 1000,
    pdfEmbedMaxBytes: config.OUTBOUND_PDF_EMBED_MAX_BYTES,
    ...(config.DICOMWEB_URL ? { pacsBaseUrl: config.DICOMWEB_URL.replace(/\/+$/, '') } : {}),
    backoffBaseMs: config.OUTBOUND_BACKOFF_BASE_MS,
    backoffMaxMs: config.OUTBOUND_BACKOFF_MAX_MS,
    devices: (mappings.devices ?? {}) as OutboundSettings['devices'],
    deviceDefaults: {
      manufacturer: config.AI_DEVICE_MANUFACTURER,
      version: config.AI_DEVICE_VERSION,
    },
  };
}

/** The AI product of an order as a device (site config first, then the defaults). */
export function deviceFor(settings: OutboundSettings, products: readonly string[]): DeviceInfo {
  const name = products.join('+') || 'imaging-ai';
  const site = settings.devices[products[0] ?? ''] ?? {};
  return {
    name: site.name ?? name,
    manufacturer: site.manufacturer ?? settings.deviceDefaults.manufacturer,
    version: site.version ?? settings.deviceDefaults.version,
    ...(site.udi ? { udi: site.udi } : {}),
    uid: uidFromSeed(`device:${name}`),
  };
}

/**
 * Exponential backoff with jitter: base·2^(attempt−1), capped, then a random point in the
 * upper half ("equal jitter"), so retries of many rows spread out yet never come early.
 */
export function backoffMs(
  settings: Pick<OutboundSettings, 'backoffBaseMs' | 'backoffMaxMs'>,
  attempt: number,
  random = Math.random,
): number {
  const ceiling = Math.min(
    settings.backoffMaxMs,
    settings.backoffBaseMs * 2 ** Math.max(0, attempt - 1),
  );
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}
