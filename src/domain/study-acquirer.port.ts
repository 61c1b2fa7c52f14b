/**
 * The boundary between the order lifecycle (src/orders) and study acquisition (src/studies):
 * the lifecycle asks for an order's study; acquisition finds it (PACS pull over DICOMweb or
 * DIMSE, or instances pushed to us), validates it and packages it as one ZIP on disk.
 */

import type { AssigningAuthority } from './order-request';

/** What the lifecycle knows about the order when it asks for its study. */
export interface StudyRequest {
  orderId: string;
  studyInstanceUid?: string | null;
  accessionNumber?: string | null;
  patientId?: string | null;
  /**
   * The assigning authority of the order's patient ID (HL7 CX-4, FHIR Identifier.system):
   * compared with the study's Issuer of Patient ID, when both have one (study-identity.ts).
   */
  patientIdIssuer?: string | null;
  /**
   * Record numbers an ADT^A40 merged into the order's patient (MRG-1), with their assigning
   * authorities: a study acquired under one of them is the order's (study-identity.ts).
   */
  retiredPatientIds?: ReadonlyArray<{ value: string; issuer?: string | null }> | null;
  /**
   * Who issued the order's accession number (HL7 IPC-1 EI components, FHIR the ACSN
   * identifier's system / assigner): compared with the study's Issuer of Accession Number
   * Sequence (0008,0051), when both have one (study-identity.ts).
   */
  accessionIssuer?: AssigningAuthority | null;
  /**
   * Optional JSON sidecar written into the ZIP as `metadata.json` (the upstream reads it as
   * order metadata; DICOM tags and the API win over it). A different sidecar on a later call
   * repackages the study.
   */
  sidecar?: Record<string, unknown> | null;
}

/** Patient and study attributes read from the instances (copied into SR / PDF later). */
export interface StudyAttributes {
  studyInstanceUid: string;
  accessionNumber?: string;
  patientId?: string;
  /** Issuer of Patient ID (0010,0021): the domain the Patient ID belongs to. */
  issuerOfPatientId?: string;
  /** Issuer of Accession Number Sequence (0008,0051), its first item. */
  issuerOfAccessionNumber?: AssigningAuthority;
  patientName?: string;
  patientBirthDate?: string;
  patientSex?: string;
  studyDate?: string;
  studyTime?: string;
  studyId?: string;
  studyDescription?: string;
  referringPhysicianName?: string;
  modalities: string[];
}

export interface AcquiredStudy {
  studyInstanceUid: string;
  /** The ZIP package on disk, ready for upload (DICOM Part 10 files, optional JSON sidecar). */
  packagePath: string;
  sizeBytes: number;
  instanceCount: number;
  seriesCount: number;
  /** SOP Class / Instance UIDs of every instance, for the SR's references. */
  instances: Array<{ sopClassUid: string; sopInstanceUid: string; seriesInstanceUid: string }>;
  attributes: StudyAttributes;
  /** dicomweb: WADO-RS pull; dimse: C-GET / C-MOVE pull; stow / c-store: pushed to us. */
  source: 'dicomweb' | 'dimse' | 'stow' | 'c-store';
  /** When this package was written (ISO 8601). */
  packagedAt?: string;
  /**
   * Other orders whose package of the same Study Instance UID still exists (not released),
   * newest first. The upstream lets a later upload of the same study within 5 minutes
   * overwrite an earlier one: the lifecycle decides (hold, merge, refuse) from this.
   */
  otherPackages?: PackagedStudy[];
}

/** A package on disk that has not been released yet. */
export interface PackagedStudy {
  orderId: string;
  studyInstanceUid: string;
  packagedAt: string;
  sizeBytes: number;
}

export type StudyAcquisition =
  /** Packaged and ready to upload. */
  | { status: 'ready'; study: AcquiredStudy }
  /** Not there yet, or still arriving (instance count not stable for the quiet period). */
  | { status: 'waiting'; reason: string; retryAfterMs: number }
  /** Cannot be used (invalid DICOM, conflicting identifiers…): a clear, PHI-free reason. */
  | {
      status: 'failed';
      reason: string;
      /** Alert code for the operator (default `study-unusable`), e.g. `study-identity-mismatch`. */
      alert?: string;
    };

export interface StudyAcquirer {
  acquire(request: StudyRequest): Promise<StudyAcquisition>;
  /** Deletes the package and staged instances once the upload is complete (or the order ended). */
  release(orderId: string): Promise<void>;
  /** Every unreleased package of this Study Instance UID, newest first (any order). */
  packagesOfStudy?(studyInstanceUid: string): Promise<PackagedStudy[]>;
}

export const STUDY_ACQUIRER = Symbol('STUDY_ACQUIRER');

/**
 * Job the order lifecycle registers to (re)try acquiring an order's study, payload
 * `{ orderId }`, job key `acquire:<orderId>`. Study intake enqueues it when pushed instances
 * match an order, so the order does not wait for its next scheduled try.
 */
export const ACQUIRE_STUDY_JOB = 'order.acquire-study';
