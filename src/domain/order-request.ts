/**
 * The one source-neutral order model. HL7v2 (ORM^O01 / OMI^O23) and FHIR R4
 * (ServiceRequest) both map into it; everything after ingest works on it only.
 */

export type OrderSource = 'hl7v2' | 'fhir' | 'api';

/** What the inbound message asks us to do with the order. */
export type OrderAction =
  | 'create' // ORC-1 NW, FHIR create
  | 'cancel' // ORC-1 CA/DC/OD, FHIR status revoked/entered-in-error
  | 'update' // ORC-1 XO, FHIR update with other changes
  | 'status'; // ORC-1 SC: recorded only

export type AdministrativeSex = 'male' | 'female' | 'other' | 'unknown';
export type OrderPriority = 'routine' | 'urgent' | 'asap' | 'stat';

export interface Identifier {
  value: string;
  /** Assigning authority (HL7 CX-4) or FHIR Identifier.system. */
  system?: string;
  /** Identifier type code (HL7 table 0203: MR, PI, AN…; FHIR Identifier.type). */
  type?: string;
}

/**
 * The authority that issued an identifier, by its parts: HL7 HD / EI components (namespace ID,
 * universal ID, universal ID type) and DICOM's Issuer of Accession Number Sequence item
 * (0040,0031) Local Namespace Entity ID, (0040,0032) Universal Entity ID, (0040,0033) its type.
 */
export interface AssigningAuthority {
  namespace?: string;
  universalId?: string;
  universalIdType?: string;
}

export interface PersonName {
  family?: string;
  given?: string[];
  prefix?: string;
  suffix?: string;
}

export interface CodedConcept {
  code?: string;
  system?: string;
  display?: string;
}

export interface Practitioner {
  identifier?: Identifier;
  name?: PersonName;
}

export interface PatientInfo {
  identifiers: Identifier[];
  name?: PersonName;
  /** ISO 8601 date (YYYY-MM-DD) or partial date (YYYY, YYYY-MM). */
  birthDate?: string;
  sex?: AdministrativeSex;
}

export interface OrderRequest {
  source: OrderSource;
  action: OrderAction;
  patient: PatientInfo;
  placerOrderNumber?: Identifier;
  fillerOrderNumber?: Identifier;
  accessionNumber?: string;
  /**
   * Who issued the accession number (HL7 IPC-1 EI components 2-4; FHIR the ACSN identifier's
   * system): compared with a study's Issuer of Accession Number Sequence (0008,0051).
   */
  accessionIssuer?: AssigningAuthority;
  /** Placer group number (ORC-4) or FHIR requisition: becomes an upstream batch. */
  placerGroupNumber?: Identifier;
  procedure?: CodedConcept;
  modality?: string;
  studyInstanceUid?: string;
  priority?: OrderPriority;
  orderingProvider?: Practitioner;
  reasonForStudy?: CodedConcept[];
  /** AI products to run, from the procedure code through the product table. */
  products: string[];
  /** When the order was placed / should occur (ISO 8601 instant). */
  requestedAt?: string;
  /** Free-form notes that travel with the order (NTE, ServiceRequest.note). */
  notes?: string[];
}

/** One line of field-level lineage: which input location became which output field, by which rule. */
export interface MappedField {
  /** Dotted path in OrderRequest, e.g. `patient.identifiers[0].value`. */
  target: string;
  /** Source location, e.g. `PID-3[1].1` or `ServiceRequest.identifier[1].value`. */
  source: string;
  /** The value as stored in the OrderRequest (not the source text when a rule converted it). */
  value: string;
  ruleId: string;
  /**
   * How the value was produced when it is not the source text as is: the table row of a
   * lookup (`product-table: 24590-2^LN → brain-mr-volumetry`, `table 0001: F → female`).
   */
  rule?: string;
}

/** A tolerated quirk of an input (recorded for the audit log). */
export interface ToleratedQuirk {
  code: string;
  detail: string;
}
