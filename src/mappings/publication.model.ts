import { sha256Hex } from '../common/hash';
import type { OrderRequest } from '../domain/order-request';
import type { OutboundRow } from './outbound-rows';
import type { ResultContent } from './result-content.mapping';

/** The AI product as a device (FHIR Device, HL7 OBR-32, DICOM device observer). */
export interface DeviceInfo {
  name: string;
  manufacturer: string;
  version: string;
  /** UDI device identifier (the upstream's product `UDI`), when assigned. */
  udi?: string;
  /** DICOM Device Observer UID. */
  uid: string;
}

/** Everything one publication needs, read at delivery time from the order and its documents. */
export interface PublicationInput {
  orderId: string;
  row: OutboundRow;
  upstreamStatus: string | null;
  /** When the status was seen (ISO 8601). */
  statusAt: string;
  /** A resend after an upstream correction (FHIR `corrected`, OBR-25 / OBX-11 `C`). */
  correction: boolean;
  /**
   * Which result publication of the order this is: 0 the first, +1 per correction (the
   * revision of dicomUidsFor). Absent: 1 for a correction, else 0.
   */
  revision?: number;
  /** Why a no-result outcome happened (local end reason, failure report reason). */
  reason?: string;
  qcBypass?: { by: string; reason: string | null } | null;
  order: {
    source: string;
    request: OrderRequest;
    accessionNumber: string | null;
    placerOrderNumber: string | null;
    fillerOrderNumber: string | null;
    studyInstanceUid: string | null;
    createdAt: string;
  };
  results?: ResultContent;
  /** The results or failure PDF. */
  pdf?: Buffer;
  /**
   * A PDF above `maxBytes` goes to the EHR and the RIS as a reference (its size, hash and, when
   * the PACS gets it, the WADO-RS URL of its encapsulated PDF instance), not inside: a 30 MB
   * report made the DiagnosticReport and the ORU undeliverable, and with them the result. A QC
   * report above `maxBytes` (as JSON) goes to the EHR as its size and hash too.
   */
  pdfEmbed?: { maxBytes: number; pacsUrl?: string };
  /** The QC report (JSON) of a QC rejection. */
  qcReport?: unknown;
  /** The ServiceRequest the order came from (absolute EHR URL or `ServiceRequest/id`). */
  serviceRequest?: string | null;
  /** The Patient of that ServiceRequest, when known. */
  patientReference?: string | null;
  device: DeviceInfo;
  /** UIDs of the SR and PDF we publish to the PACS (HL7 OBX and FHIR reference them). */
  dicom?: DicomUids;
}

/**
 * A DICOM UID derived from a seed: `2.25.` + a 128-bit number (PS3.5 Annex B.2, UUID-derived
 * UIDs), so the same order and revision always give the same UID and a resend replaces.
 */
export function uidFromSeed(seed: string): string {
  const hex = sha256Hex(seed).slice(0, 32);
  return `2.25.${BigInt(`0x${hex}`).toString(10)}`;
}

export interface DicomUids {
  studyInstanceUid: string;
  srSeriesUid: string;
  srInstanceUid: string;
  pdfSeriesUid: string;
  pdfInstanceUid: string;
  /** The SR this one corrects (PS3.3 C.17.2 Predecessor Documents Sequence), from revision 1 on. */
  previousSrInstanceUid?: string;
}

/** SR / PDF UIDs of an order's publication `revision` (0 the first, +1 per correction). */
export function dicomUidsFor(
  orderId: string,
  revision: number,
  studyInstanceUid: string,
): DicomUids {
  return {
    ...(revision > 0
      ? { previousSrInstanceUid: uidFromSeed(`${orderId}:sr:${revision - 1}`) }
      : {}),
    studyInstanceUid,
    srSeriesUid: uidFromSeed(`${orderId}:sr-series`),
    srInstanceUid: uidFromSeed(`${orderId}:sr:${revision}`),
    pdfSeriesUid: uidFromSeed(`${orderId}:pdf-series`),
    pdfInstanceUid: uidFromSeed(`${orderId}:pdf:${revision}`),
  };
}
