import { HIDDEN, maskValue, type MaskRule } from './phi-masking.values';

/**
 * DICOM elements shown as they are in a tag dump of what we sent (SR, encapsulated PDF):
 * UIDs, codes, the structure of the SR tree, the device, dates of the study and content.
 * The patient module is masked by rule; everything else (TextValue, NumericValue, names of
 * people, unknown or private elements) is hidden. PS3.6 keywords.
 */
const DICOM_VISIBLE = new Set([
  'FileMetaInformationGroupLength',
  'FileMetaInformationVersion',
  'MediaStorageSOPClassUID',
  'MediaStorageSOPInstanceUID',
  'TransferSyntaxUID',
  'ImplementationClassUID',
  'ImplementationVersionName',
  'SpecificCharacterSet',
  'SOPClassUID',
  'SOPInstanceUID',
  'StudyInstanceUID',
  'SeriesInstanceUID',
  'AccessionNumber',
  'Modality',
  'StudyDate',
  'StudyTime',
  'SeriesDate',
  'SeriesTime',
  'ContentDate',
  'ContentTime',
  'InstanceCreationDate',
  'InstanceCreationTime',
  'SeriesNumber',
  'InstanceNumber',
  'Manufacturer',
  'ManufacturerModelName',
  'SoftwareVersions',
  'DeviceSerialNumber',
  'CompletionFlag',
  'VerificationFlag',
  'ValueType',
  'RelationshipType',
  'ContinuityOfContent',
  'ConceptNameCodeSequence',
  'ConceptCodeSequence',
  'MeasurementUnitsCodeSequence',
  'MeasuredValueSequence',
  'ContentSequence',
  'ContentTemplateSequence',
  'TemplateIdentifier',
  'MappingResource',
  'CodeValue',
  'CodingSchemeDesignator',
  'CodeMeaning',
  'UID',
  'ReferencedSOPSequence',
  'ReferencedSOPClassUID',
  'ReferencedSOPInstanceUID',
  'ReferencedSeriesSequence',
  'CurrentRequestedProcedureEvidenceSequence',
  'MIMETypeOfEncapsulatedDocument',
  'EncapsulatedDocument',
  'BurnedInAnnotation',
  'DocumentTitle',
]);

const DICOM_PHI_RULES: Readonly<Record<string, MaskRule>> = {
  PatientName: 'name',
  PatientID: 'id',
  PatientBirthDate: 'date',
  OtherPatientIDs: 'id',
};

/** One tag dump line's value, masked by keyword (allow-list). */
export function maskDicomValue(keyword: string, value: string): string {
  if (DICOM_VISIBLE.has(keyword) || value === '') return value;
  const rule = DICOM_PHI_RULES[keyword];
  if (keyword === 'PatientSex') return value;
  return rule ? maskValue(rule, value) : HIDDEN;
}

/**
 * Keys of the upstream's own reports (results, failure, QC report JSON; imaging-service-api.md)
 * shown as they are: what the report is about, its status, step, reason and times. Patient
 * data the upstream echoes, measurements and every key not listed are hidden (allow-list).
 */
const UPSTREAM_REPORT_VISIBLE = new Set([
  'report_kind',
  'order_id',
  'study_uid',
  'status',
  'failed_step',
  'step',
  'reason',
  'failed_at',
  'reported_at',
  'created_at',
  'updated_at',
  'products',
  'product',
  'qc_bypassed',
  'qc_status',
  'checks',
  'check',
  'code',
  'severity',
  'passed',
  'result',
  'kind',
  'structure',
  'flag',
  'institution_name',
  'disclaimer',
  'agent_report',
]);

/**
 * How deep the masked view of an upstream report follows its structure. The results fetch
 * keeps a report nested deeper (a hostile or broken finding), and following it all the way
 * ran out of stack, so its masked view said the JSON was not valid.
 */
const UPSTREAM_REPORT_MAX_DEPTH = 64;

/** An upstream report (JSON) masked by UPSTREAM_REPORT_VISIBLE, structure kept. */
export function maskUpstreamReport(value: unknown, visible = true, depth = 0): unknown {
  if (value !== null && typeof value === 'object' && depth >= UPSTREAM_REPORT_MAX_DEPTH) {
    return `${HIDDEN} (nested deeper than ${UPSTREAM_REPORT_MAX_DEPTH} levels)`;
  }
  if (Array.isArray(value)) return value.map((v) => maskUpstreamReport(v, visible, depth + 1));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
      out[key] = maskUpstreamReport(v, visible && UPSTREAM_REPORT_VISIBLE.has(key), depth + 1);
    }
    return out;
  }
  if (visible || value === null || typeof value === 'boolean') return value;
  return HIDDEN;
}
