import type { OrderRequest } from '../domain/order-request';
import { DEFAULT_PRODUCT_TABLE, ProductTableRow, UnknownProcedureRule } from './product-table';

/** Order attributes outside the patient that may be minimised, each a key of OrderRequest. */
const TOP_LEVEL_FIELDS = [
  'placerOrderNumber',
  'fillerOrderNumber',
  'accessionNumber',
  'placerGroupNumber',
  'procedure',
  'modality',
  'studyInstanceUid',
  'priority',
  'orderingProvider',
  'reasonForStudy',
  'requestedAt',
  'notes',
] as const satisfies readonly (keyof OrderRequest)[];

const MINIMISABLE_FIELDS = [
  'patient.identifiers',
  'patient.name',
  'patient.birthDate',
  'patient.sex',
  ...TOP_LEVEL_FIELDS,
] as const;

/**
 * OrderRequest fields that may be sent to the upstream (data minimisation, GDPR art. 5(1)(c)).
 * `source`, `action` and `products` are not personal data and always go.
 */
export type MinimisableField = (typeof MINIMISABLE_FIELDS)[number];

export const ALL_MINIMISABLE_FIELDS: readonly MinimisableField[] = MINIMISABLE_FIELDS;

/** Per-site settings of the HL7 → OrderRequest mapping. */
export interface Hl7OrderMappingConfig {
  /** Where the accession number is read, in priority order (IPC-1, OBR-18, ORC-3...). */
  accessionSources: readonly string[];
  productTable: readonly ProductTableRow[];
  unknownProcedure: UnknownProcedureRule;
  /** Offset applied to HL7 timestamps sent without one (DTM allows it), e.g. `+01:00`. */
  senderUtcOffset: string;
  /**
   * The senders' IANA time zone (`Europe/Berlin`), when set: a timestamp without offset is
   * read in it with the offset of its own date (summer time included), before MSH-7's offset
   * (which is that of the message's moment, not of an exam on the other side of a change)
   * and `senderUtcOffset`.
   */
  senderTimeZone?: string;
  /** Fields allowed to leave for the upstream; see applyDataMinimisation. */
  allowedFields: readonly MinimisableField[];
  /**
   * Sources that must agree but do not (ORC-2 vs OBR-2…): `reject` (AE with ERR at the field)
   * or `warn` (accepted with a warning ERR and a quirk). Site setting (CONFIG_FILE).
   */
  fieldConflicts: 'reject' | 'warn';
}

export const DEFAULT_HL7_ORDER_MAPPING_CONFIG: Hl7OrderMappingConfig = {
  // IHE RAD TF-2 RAD-4: IPC-1 in OMI (v2.5.1), OBR-18 in ORM (v2.3.1).
  accessionSources: ['IPC-1', 'OBR-18'],
  productTable: DEFAULT_PRODUCT_TABLE,
  unknownProcedure: { kind: 'reject' },
  senderUtcOffset: '+00:00',
  allowedFields: ALL_MINIMISABLE_FIELDS,
  fieldConflicts: 'reject',
};

/**
 * Returns a copy of the request with every field not in `allowed` removed. Applied to what
 * leaves for the upstream only; the stored request keeps everything.
 */
export function applyDataMinimisation(
  request: OrderRequest,
  allowed: readonly MinimisableField[],
): OrderRequest {
  const keep = new Set(allowed);
  const out: OrderRequest = {
    source: request.source,
    action: request.action,
    products: [...request.products],
    patient: { identifiers: keep.has('patient.identifiers') ? request.patient.identifiers : [] },
  };
  if (keep.has('patient.name') && request.patient.name) out.patient.name = request.patient.name;
  if (keep.has('patient.birthDate') && request.patient.birthDate) {
    out.patient.birthDate = request.patient.birthDate;
  }
  if (keep.has('patient.sex') && request.patient.sex) out.patient.sex = request.patient.sex;
  for (const key of TOP_LEVEL_FIELDS) {
    if (keep.has(key) && request[key] !== undefined) {
      (out as unknown as Record<string, unknown>)[key] = request[key];
    }
  }
  return out;
}
