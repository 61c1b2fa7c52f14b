/**
 * What we accept of a report the upstream hands us for one of our orders, before it is stored
 * (and so before anything is published from it). The contract names the report types (PDF,
 * JSON, …) but not their content (imaging-service-api.md, Reports); the JSON reports the
 * sandbox and the vendor's samples write name the order and the study they are about
 * (`order_id`, `study_uid`; docs/upstream-assumptions.md). So:
 *
 * - a JSON report (results, failure, QC) must be a JSON object, and when it names an order, a
 *   study, a patient (`patient_id`) or an accession (`accession_number`), they must be ours: a
 *   report about another order, study, patient or exam is another patient's outcome, and one
 *   such document refuses every document fetched with it (they came from the same answer set;
 *   a PDF cannot be checked on its own). The sandbox's results report, as the vendor's samples,
 *   repeats the metadata we sent: an upstream that mixed two orders' reports up could keep our
 *   order_id and study_uid and carry another patient's ID and accession;
 * - a PDF must be one: its header `%PDF-` (ISO 32000-1 §7.5.2) within the first 1024 bytes,
 *   where readers look for it. An HTML error page answered 200 as the "PDF" was encapsulated
 *   as application/pdf for the PACS, the EHR and the RIS;
 * - a results or failure report that says it is another kind of report (`report_kind`, as the
 *   sandbox and the vendor's samples write it: `results`, `failure`, `qc`) than asked for is not
 *   taken for it, and refuses the documents fetched with it too: a failure report answered by
 *   GET /results went out as the final result ("See the attached report.", OBR-25 F);
 * - a results report's values that no measurement can take are named (`notes`): they are left
 *   out of what is published (result-content.mapping.ts), and the analyst reads which and why.
 */

import { firstDuplicateKey } from '../common/json-duplicate-keys';
import { parseJsonAllowingNonFinite } from '../common/json-non-finite';
import { parseResultContent } from './result-content.mapping';

export interface ExpectedIdentity {
  /** The upstream order id we asked about. */
  upstreamOrderId: string;
  /** Our Study Instance UIDs of the order (the order's, the acquired study's). */
  studyUids: readonly string[];
  /** The values of the order's patient identifiers (the one sent upstream among them). */
  patientIds?: readonly string[];
  /** The order's accession number, as sent upstream. */
  accessionNumber?: string;
}

export interface FetchedReport {
  kind: 'results' | 'failure' | 'qc';
  reportType: string;
  body: Buffer;
}

export type ReportCheck =
  /** `notes`: what of an accepted report is not published, and why (results: values left out). */
  | { accepted: true; notes?: string[] }
  /**
   * `foreign`: the report is about another order or study, or is another kind of report than
   * the one asked for (refuses the documents fetched with it).
   */
  | { accepted: false; foreign: boolean; reason: string };

const PDF_HEADER = Buffer.from('%PDF-');
/** Values left out that are named one by one on the timeline; the rest are counted. */
const MAX_NOTES = 20;
const PDF_HEADER_WITHIN = 1024;
/** Where a report names the order and the study it is about (a QC report: under `report`). */
const IDENTITY_KEYS = new Set([
  'order_id',
  'study_uid',
  'patient_id',
  'accession_number',
  'report.order_id',
  'report.study_uid',
  'report.patient_id',
  'report.accession_number',
]);
/** The kinds a report may say it is (`report_kind`). */
const REPORT_KINDS: ReadonlySet<string> = new Set(['results', 'failure', 'qc']);

/**
 * The upstream's order id is a UUID, the same in either case (RFC 9562 §4): `3F1B…` named our
 * `3f1b…` and was refused as another order's, so the result never came.
 */
function sameOrderId(said: unknown, ours: string): boolean {
  return typeof said === 'string' && said.trim().toLowerCase() === ours.toLowerCase();
}

/**
 * A UID as a DICOM header holds it may end with the NUL (or space) that pads it to an even
 * length (PS3.5 §9.1, §6.2): it is the same UID. Compared as written, the study was another's.
 */
function unpadded(uid: string): string {
  return uid.replace(/^[\s\0]+|[\s\0]+$/g, '');
}

/**
 * A patient ID or accession the report names, as compared: text (a number as written), white
 * space and DICOM padding around it aside; `undefined` when it names none (absent, null, empty).
 */
function namedValue(value: unknown): string | undefined {
  if (typeof value !== 'string' && typeof value !== 'number') return undefined;
  const text = unpadded(String(value));
  return text === '' ? undefined : text;
}

export function checkUpstreamReport(doc: FetchedReport, expected: ExpectedIdentity): ReportCheck {
  if (doc.reportType === 'PDF') {
    const at = doc.body.subarray(0, PDF_HEADER_WITHIN + PDF_HEADER.length).indexOf(PDF_HEADER);
    return at >= 0 && at <= PDF_HEADER_WITHIN
      ? { accepted: true }
      : {
          accepted: false,
          foreign: false,
          reason: `not a PDF (no %PDF- header in its first ${PDF_HEADER_WITHIN} bytes)`,
        };
  }
  if (doc.kind !== 'qc' && doc.reportType !== 'JSON') return { accepted: true };
  let parsed: unknown;
  try {
    // Python's bare NaN / Infinity are values that are not numbers, not a text that is not JSON
    parsed = parseJsonAllowingNonFinite(doc.body.toString('utf8'));
  } catch {
    return { accepted: false, foreign: false, reason: 'not JSON' };
  }
  // `"order_id":"theirs", …, "order_id":"ours"` is read as ours by JSON.parse (the last wins)
  // and as theirs by a reader that keeps the first (RFC 8259 §4): no one meaning. A duplicated
  // order or study identity makes the report another patient's as far as we can tell.
  const duplicate = firstDuplicateKey(doc.body.toString('utf8'));
  if (duplicate !== undefined) {
    return {
      accepted: false,
      foreign: IDENTITY_KEYS.has(duplicate),
      reason: `names ${duplicate} twice in one object (no one meaning)`,
    };
  }
  // A QC report is stored as { round, report } (fetch-documents): the upstream's is `report`.
  const report = doc.kind === 'qc' ? (parsed as { report?: unknown } | null)?.report : parsed;
  if (!report || typeof report !== 'object' || Array.isArray(report)) {
    return { accepted: false, foreign: false, reason: 'not a JSON object' };
  }
  const {
    order_id: orderId,
    study_uid: studyUid,
    patient_id: patientId,
    accession_number: accessionNumber,
    report_kind: reportKind,
  } = report as Record<string, unknown>;
  const said = typeof reportKind === 'string' ? reportKind.trim().toLowerCase() : undefined;
  // (not a QC report: its own report_type is `results`, QC findings, which it may well repeat)
  if (doc.kind !== 'qc' && said && REPORT_KINDS.has(said) && said !== doc.kind) {
    return {
      accepted: false,
      foreign: true,
      reason: `is a ${said === 'qc' ? 'QC' : said} report (its report_kind), not the ${doc.kind === 'failure' ? 'failure report' : 'results'} asked for`,
    };
  }
  if (
    orderId !== undefined &&
    orderId !== null &&
    !sameOrderId(orderId, expected.upstreamOrderId)
  ) {
    return {
      accepted: false,
      foreign: true,
      reason: 'names another order (its order_id is not the one asked for)',
    };
  }
  if (
    studyUid !== undefined &&
    studyUid !== null &&
    expected.studyUids.length > 0 &&
    !expected.studyUids.includes(unpadded(String(studyUid)))
  ) {
    return {
      accepted: false,
      foreign: true,
      reason: "names another study (its study_uid is not the order's study)",
    };
  }
  const ourPatientIds = (expected.patientIds ?? []).map(unpadded).filter(Boolean);
  const reportPatientId = namedValue(patientId);
  if (
    reportPatientId !== undefined &&
    ourPatientIds.length > 0 &&
    !ourPatientIds.includes(reportPatientId)
  ) {
    return {
      accepted: false,
      foreign: true,
      reason: "names another patient (its patient_id is not the order's)",
    };
  }
  const ourAccession = expected.accessionNumber ? unpadded(expected.accessionNumber) : '';
  const reportAccession = namedValue(accessionNumber);
  if (reportAccession !== undefined && ourAccession !== '' && reportAccession !== ourAccession) {
    return {
      accepted: false,
      foreign: true,
      reason: "names another accession (its accession_number is not the order's)",
    };
  }
  if (doc.kind === 'results') {
    const { leftOut } = parseResultContent(doc.body);
    if (leftOut.length > MAX_NOTES) {
      return {
        accepted: true,
        notes: [...leftOut.slice(0, MAX_NOTES), `and ${leftOut.length - MAX_NOTES} more`],
      };
    }
    if (leftOut.length > 0) return { accepted: true, notes: leftOut };
  }
  return { accepted: true };
}
