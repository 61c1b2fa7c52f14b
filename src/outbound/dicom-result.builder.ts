import { uidFromSeed, type PublicationInput } from '../mappings/publication.model';
import {
  onlyInThePdf,
  SEE_ATTACHED_REPORT,
  type ResultContent,
} from '../mappings/result-content.mapping';
import type { StudyAttributes } from '../domain/study-acquirer.port';
import type { AssigningAuthority } from '../domain/order-request';
import { isImageSopClass } from '../mappings/dicom-sop-classes.table';
import { identifierAsItStands, prefersLatin1, sanitizeDataset, validForVr } from './dicom-vr';

/**
 * The two DICOM objects published to the PACS, in the source study as new series:
 * - a Comprehensive 3D SR (PS3.3 A.35.13) with TID 1500 Measurement Report content
 *   (PS3.16): language, device observer (TID 1004), procedure reported, image library
 *   (TID 1600), one measurement group per structure (TID 1501: tracking identifier and UID,
 *   finding, algorithm name/version per TID 4019, NUM measurements with UCUM units,
 *   qualitative evaluation), the impression; Verification Flag UNVERIFIED, since no person
 *   verified an AI output; the order referenced in the Referenced Request Sequence;
 * - an Encapsulated PDF (PS3.3 A.45.1) of the report, padded to even length (PS3.5 7.1.1).
 * Patient and study attributes are copied from the source study (Type 2 attributes are
 * present, empty when unknown).
 */
interface DcmjsWrite {
  data: {
    DicomDict: new (meta: unknown) => { dict: unknown; write(): ArrayBuffer };
    DicomMetaDictionary: {
      denaturalizeDataset(d: unknown): unknown;
      nameMap: Record<string, { vr?: string } | undefined>;
    };
  };
}
// eslint-disable-next-line @typescript-eslint/no-require-imports
const dcmjs = require('dcmjs') as DcmjsWrite;
fasterBufferLookup();

/**
 * dcmjs writes every element into a stream grown in 256-byte buffers and finds the buffer of
 * each write by scanning them all from the first (SplitDataView.findStart), so writing a
 * sequence costs the square of its length: the SR of a 5,000-instance study (its Image Library
 * and evidence list every instance) took 1.2 s to write, of 20,000 instances 15 s, of 50,000
 * more than the 60 s the SR worker allows, so such a study's SR was never delivered. The same
 * lookup, made by looking at the last buffer first (writes append) and else by bisection of
 * the ascending offsets, gives the same answer in constant or logarithmic time. Left as it is
 * when dcmjs no longer has this shape.
 */
function fasterBufferLookup(): void {
  const stream = new (
    dcmjs.data as unknown as { WriteBufferStream: new (size: number) => unknown }
  ).WriteBufferStream(16) as { view?: object };
  const proto = stream.view ? (Object.getPrototypeOf(stream.view) as Record<string, unknown>) : {};
  const view = stream.view as { offsets?: unknown; lengths?: unknown } | undefined;
  if (
    typeof proto.findStart !== 'function' ||
    !Array.isArray(view?.offsets) ||
    !Array.isArray(view?.lengths) ||
    proto.findStart.name === 'findStartBisecting'
  )
    return;
  proto.findStart = function findStartBisecting(
    this: { offsets: number[]; lengths: number[]; buffers: unknown[] },
    start = 0,
  ): number | undefined {
    const { offsets, lengths } = this;
    const count = this.buffers.length;
    const last = count - 1;
    if (last < 0) return undefined;
    if (start >= offsets[last]! && start < offsets[last]! + lengths[last]!) return last;
    let low = 0;
    let high = last;
    while (low <= high) {
      const mid = (low + high) >> 1;
      if (start < offsets[mid]!) high = mid - 1;
      else if (start >= offsets[mid]! + lengths[mid]!) low = mid + 1;
      else return mid;
    }
    return undefined;
  };
}

export const COMPREHENSIVE_3D_SR = '1.2.840.10008.5.1.4.1.1.88.34';
export const ENCAPSULATED_PDF = '1.2.840.10008.5.1.4.1.1.104.1';
const EXPLICIT_VR_LE = '1.2.840.10008.1.2.1';
export const IMPLEMENTATION_CLASS_UID = '2.25.236774193245113915118045127352190245331';

export interface SourceStudy {
  attributes: StudyAttributes;
  instances: Array<{ sopClassUid: string; sopInstanceUid: string; seriesInstanceUid: string }>;
}

type Code = Record<string, string>;
/**
 * Code Value is SH (16 bytes as written, see dicom-vr.ts); longer values go in Long Code
 * Value (PS3.3 8.8) rather than being cut into another code. Code Meaning (LO) is cut by
 * sanitizeDataset, never inside a character.
 */
const code = (value: string, scheme: string, meaning: string): Code => ({
  ...(Buffer.byteLength(value, 'utf8') > 16 ? { LongCodeValue: value } : { CodeValue: value }),
  CodingSchemeDesignator: scheme,
  // Type 1: a meaning with nothing printable falls back to the code itself.
  CodeMeaning: validForVr('LO', meaning) || value,
});
type Item = Record<string, unknown>;

function container(rel: string | undefined, name: Code, children: Item[], template?: string): Item {
  return {
    ...(rel ? { RelationshipType: rel } : {}),
    ValueType: 'CONTAINER',
    ConceptNameCodeSequence: [name],
    ContinuityOfContent: 'SEPARATE',
    ...(template
      ? { ContentTemplateSequence: [{ MappingResource: 'DCMR', TemplateIdentifier: template }] }
      : {}),
    // Type 1C, "required if the content item has one or more children" (PS3.3 Table C.17-6):
    // an empty one is invalid. A result without findings wrote an empty Imaging Measurements
    // container (dciodvfy: "Empty attribute (no value) Type 1C ContentSequence").
    ...(children.length > 0 ? { ContentSequence: children } : {}),
  };
}
/**
 * What of `value` a Text Value (UT) keeps: control characters go (dicom-vr.ts), and so does
 * white space at the ends. An upstream structure or impression of control characters only
 * (`"\u0007"`) became an empty Text Value, which Type 1 forbids (dciodvfy: "Empty attribute
 * (no value) Type 1C TextValue").
 */
const textOf = (value: string | undefined): string => validForVr('UT', value ?? '').trim();
/** A TEXT content item; a value with nothing printable is written `unknown` (Type 1). */
const text = (rel: string, name: Code, value: string): Item => ({
  RelationshipType: rel,
  ValueType: 'TEXT',
  ConceptNameCodeSequence: [name],
  TextValue: textOf(value) || 'unknown',
});
const codeItem = (rel: string, name: Code, value: Code): Item => ({
  RelationshipType: rel,
  ValueType: 'CODE',
  ConceptNameCodeSequence: [name],
  ConceptCodeSequence: [value],
});
const uidref = (rel: string, name: Code, value: string): Item => ({
  RelationshipType: rel,
  ValueType: 'UIDREF',
  ConceptNameCodeSequence: [name],
  UID: value,
});
/** `value` a decimal string of at most 16 characters (DS), as `Measurement.text`. */
const num = (name: Code, value: string, unit: Code, children: Item[] = []): Item => ({
  RelationshipType: 'CONTAINS',
  ValueType: 'NUM',
  ConceptNameCodeSequence: [name],
  MeasuredValueSequence: [{ NumericValue: value, MeasurementUnitsCodeSequence: [unit] }],
  ...(children.length > 0 ? { ContentSequence: children } : {}),
});

/** Local coding scheme (PS3.16 8.2: private schemes start with 99). */
const LOCAL = '99IAA';

function dicomNow(date: Date): { date: string; time: string } {
  const iso = date.toISOString();
  return { date: iso.slice(0, 10).replace(/-/g, ''), time: iso.slice(11, 19).replace(/:/g, '') };
}

/**
 * The patient and study attributes of the source study, the identifiers included: the PACS
 * files the SR and PDF with their study by them, so they are the study's own, empty (Type 2)
 * when the study has none. The order's were written in their place: Orthanc keys a study by
 * Patient ID and Study Instance UID, so the SR of a study without a Patient ID (an emergency
 * or unidentified patient, accepted since the identity check compares IDs only when both
 * sides have one) was filed as another study. The order's accession stays where it belongs,
 * in the Referenced Request Sequence.
 */
function patientAndStudy(source: SourceStudy): Item {
  const a = source.attributes;
  return {
    PatientName: a.patientName ?? '',
    PatientID: a.patientId ?? '',
    PatientBirthDate: a.patientBirthDate ?? '',
    PatientSex: a.patientSex ?? '',
    StudyInstanceUID: a.studyInstanceUid,
    StudyDate: a.studyDate ?? '',
    StudyTime: a.studyTime ?? '',
    ReferringPhysicianName: a.referringPhysicianName ?? '',
    StudyID: a.studyId ?? '',
    AccessionNumber: a.accessionNumber ?? '',
    ...(a.studyDescription ? { StudyDescription: a.studyDescription } : {}),
    // The ID domains of the study's Patient ID and accession (Type 3, PS3.3 C.7.1.1, C.7.2.1):
    // a PACS shared by hospitals whose numbers overlap files objects by them; without them the
    // SR fell to whichever domain the PACS assumes for objects that name none.
    ...(a.patientId && a.issuerOfPatientId ? { IssuerOfPatientID: a.issuerOfPatientId } : {}),
    ...(a.accessionNumber ? issuerOfAccession(a.issuerOfAccessionNumber) : {}),
  };
}

/** Universal Entity ID Type (0040,0033) defined terms (PS3.3 Table 10-17). */
const ENTITY_ID_TYPES = new Set(['DNS', 'EUI64', 'ISO', 'URI', 'UUID', 'X400', 'X500']);

/**
 * Issuer of Accession Number Sequence (0008,0051), one item of the HL7v2 Hierarchic Designator
 * Macro (PS3.3 Table 10-17): the local namespace, the universal ID (an OID bare, `urn:oid:`
 * taken off) and its type, required with it (taken as written when a defined term, else ISO
 * for an OID and URI otherwise). Each is Type 1C: one that is not valid as it stands (a
 * control character, only spaces) is left out, never written empty or altered into another
 * domain, and with neither the sequence (Type 3) is left out. Before, such a value was present
 * and empty, and dciodvfy refused the SR and PDF ("present but empty", Type 1C).
 */
function issuerOfAccession(issuer: AssigningAuthority | null | undefined): Item {
  const namespace = issuer?.namespace ? identifierAsItStands('UT', issuer.namespace) : undefined;
  const universalId = issuer?.universalId
    ? identifierAsItStands('UT', issuer.universalId.replace(/^urn:oid:/i, ''))
    : undefined;
  if (!issuer || (!namespace && !universalId)) return {};
  const item: Item = {};
  if (namespace) item.LocalNamespaceEntityID = namespace;
  if (universalId) {
    const oid = /^[0-2](\.\d+)+$/.test(universalId);
    const type = issuer.universalIdType?.toUpperCase();
    item.UniversalEntityID = universalId;
    item.UniversalEntityIDType =
      type && ENTITY_ID_TYPES.has(type) && (type !== 'ISO' || oid) ? type : oid ? 'ISO' : 'URI';
  }
  return { IssuerOfAccessionNumberSequence: [item] };
}

/**
 * The Instance Number of an order's SR or PDF: its revision + 1. Every correction is a new
 * instance in the same series, and a PACS or viewer orders and tells apart the series'
 * instances by this number; it was 2 for every correction, so the second amended result
 * shared it with the first.
 */
function instanceNumber(input: PublicationInput): number {
  return (input.revision ?? (input.correction ? 1 : 0)) + 1;
}

/** `cuts` receives a line per value written shorter than it came (see sanitizeDataset). */
function write(dataset: Item, cuts?: string[]): Buffer {
  const meta = {
    FileMetaInformationVersion: new Uint8Array([0, 1]).buffer,
    MediaStorageSOPClassUID: dataset.SOPClassUID,
    MediaStorageSOPInstanceUID: dataset.SOPInstanceUID,
    TransferSyntaxUID: EXPLICIT_VR_LE,
    ImplementationClassUID: IMPLEMENTATION_CLASS_UID,
    ImplementationVersionName: 'IAA_OUTBOUND_1',
  };
  const { DicomDict, DicomMetaDictionary } = dcmjs.data;
  const dict = new DicomDict(DicomMetaDictionary.denaturalizeDataset(meta));
  // Every value valid for its VR, whatever the order or the report held (PS3.5 §6.2), in
  // Latin-1 when all of it fits (see prefersLatin1: a 16-character accession with umlauts is
  // 20 bytes of UTF-8, over SH's 16 as dciodvfy counts), else in UTF-8.
  const latin1 = prefersLatin1(dataset);
  const encoding = latin1 ? 'latin1' : 'utf8';
  const declared = latin1 ? { ...dataset, SpecificCharacterSet: 'ISO_IR 100' } : dataset;
  const vrOf = (keyword: string) => DicomMetaDictionary.nameMap[keyword]?.vr;
  dict.dict = DicomMetaDictionary.denaturalizeDataset(
    sanitizeDataset(declared, vrOf, encoding, cuts),
  );
  return latin1 ? writingLatin1(() => Buffer.from(dict.write())) : Buffer.from(dict.write());
}

/**
 * dcmjs writes every text value (SH, LO, PN, ST, LT, UT, UC) through one method of its write
 * stream, in UTF-8 whatever Specific Character Set says. For a Latin-1 data set that method
 * writes each character as its one ISO 8859-1 byte while `fn` runs (synchronously); lengths
 * and padding follow the bytes written.
 */
function writingLatin1<T>(fn: () => T): T {
  const stream = new (
    dcmjs.data as unknown as { WriteBufferStream: new (size: number) => object }
  ).WriteBufferStream(16);
  let proto: Record<string, unknown> | null = Object.getPrototypeOf(stream) as Record<
    string,
    unknown
  >;
  while (proto && !Object.prototype.hasOwnProperty.call(proto, 'writeUTF8String'))
    proto = Object.getPrototypeOf(proto) as Record<string, unknown> | null;
  if (!proto) throw new Error('dcmjs write stream has no writeUTF8String: cannot write Latin-1');
  const utf8 = proto.writeUTF8String;
  proto.writeUTF8String = function writeLatin1String(
    this: { encoder: { encode(v: string): Uint8Array } } & Record<string, unknown>,
    value: string,
  ): unknown {
    const bytes = Buffer.from(value, 'latin1');
    const encoder = this.encoder;
    this.encoder = { encode: () => new Uint8Array(bytes) };
    try {
      return (utf8 as (this: unknown, v: string) => unknown).call(this, value);
    } finally {
      this.encoder = encoder;
    }
  };
  try {
    return fn();
  } finally {
    proto.writeUTF8String = utf8;
  }
}

function requestSequence(input: PublicationInput, studyUid: string): Item[] {
  const o = input.order;
  const p = o.request.procedure;
  return [
    {
      StudyInstanceUID: studyUid,
      ReferencedStudySequence: [],
      AccessionNumber: o.accessionNumber ?? '',
      PlacerOrderNumberImagingServiceRequest: o.placerOrderNumber ?? '',
      FillerOrderNumberImagingServiceRequest: o.fillerOrderNumber ?? '',
      RequestedProcedureID: o.fillerOrderNumber ?? o.accessionNumber ?? '',
      RequestedProcedureDescription: p?.display ?? '',
      RequestedProcedureCodeSequence: [],
    },
  ];
}

/**
 * The device's equipment attributes. The UDI comes from the site's device mapping as written
 * there; one with nothing printable (spaces, a control character) is no UDI: the UDI Sequence
 * (Type 3) is left out and the device UID is the serial number. Before, the sequence held an
 * empty Unique Device Identifier, Type 1 (dciodvfy: "Empty attribute", the SR and PDF invalid).
 */
function equipment(input: PublicationInput): Item {
  const d = input.device;
  const udi = d.udi && validForVr('UT', d.udi).trim() ? d.udi : undefined;
  return {
    Manufacturer: d.manufacturer,
    ManufacturerModelName: d.name,
    DeviceSerialNumber: udi ?? d.uid,
    SoftwareVersions: d.version,
    ...(udi ? { UDISequence: [{ UniqueDeviceIdentifier: udi }] } : {}),
  };
}

/**
 * Procedure reported: the ordered procedure's code when it is valid as it stands (what a Code
 * Value keeps of it is it), else our generic code. A site running unknown procedure codes
 * through default products accepts an OBR-4.1 of spaces, `\X07\` or `MR\E\BR`: made valid
 * they were an empty Code Value (Type 1C; dsrdump could not read the SR) or another code.
 */
function procedureCode(input: PublicationInput): Code {
  const p = input.order.request.procedure;
  const value = p?.code?.trim();
  if (!p || !value || validForVr('UC', value) !== value)
    return code('AI-ANALYSIS', LOCAL, 'Imaging AI analysis');
  const scheme = p.system === 'LN' || p.system === 'http://loinc.org' ? 'LN' : LOCAL;
  return code(value, scheme, p.display ?? value);
}

/**
 * The Comprehensive 3D SR of a results publication. `cuts` receives a line per patient or
 * study value written shorter than it came (recorded with the attempt, quirk value-cut-to-type).
 */
export function buildMeasurementSr(
  input: PublicationInput,
  source: SourceStudy,
  now: Date,
  cuts?: string[],
): Buffer {
  const uids = input.dicom!;
  const d = input.device;
  const results: ResultContent = input.results ?? { findings: [], qcBypassed: false, leftOut: [] };
  const { date, time } = dicomNow(now);
  const procedure = procedureCode(input);
  const algorithm = [
    text('HAS CONCEPT MOD', code('111001', 'DCM', 'Algorithm Name'), d.name),
    text('HAS CONCEPT MOD', code('111003', 'DCM', 'Algorithm Version'), d.version),
  ];
  const groups = results.findings.map((f) =>
    container(
      'CONTAINS',
      code('125007', 'DCM', 'Measurement Group'),
      [
        text('HAS OBS CONTEXT', code('112039', 'DCM', 'Tracking Identifier'), f.structure),
        uidref(
          'HAS OBS CONTEXT',
          code('112040', 'DCM', 'Tracking Unique Identifier'),
          uidFromSeed(`${input.orderId}:tracking:${f.trackingId}`),
        ),
        codeItem('CONTAINS', code('121071', 'DCM', 'Finding'), code(f.code, LOCAL, f.structure)),
        ...algorithm,
        ...f.measurements.map((m) =>
          num(
            code(m.code, LOCAL, m.label),
            m.text,
            code(m.ucum, 'UCUM', m.unitDisplay === 'percentile' ? 'percentile' : m.unitDisplay),
          ),
        ),
        ...(f.flag
          ? [
              codeItem(
                'CONTAINS',
                code('C0034375', 'UMLS', 'Qualitative Evaluations'),
                code(f.flag.toUpperCase(), LOCAL, f.flag),
              ),
            ]
          : []),
      ],
      '1501',
    ),
  );
  const evaluations: Item[] = [];
  // Findings only in the PDF: the impression points to it, as the DiagnosticReport's conclusion
  // and the ORU's text do (before: a COMPLETE, FINAL report with nothing in it).
  if (onlyInThePdf(input.results))
    evaluations.push(text('CONTAINS', code('121073', 'DCM', 'Impression'), SEE_ATTACHED_REPORT));
  // Optional statements: one with nothing printable is left out rather than written empty.
  if (textOf(results.impression))
    evaluations.push(text('CONTAINS', code('121073', 'DCM', 'Impression'), results.impression!));
  const caveat = textOf(results.caveat) ? results.caveat : undefined;
  if (caveat || results.qcBypassed || input.qcBypass) {
    evaluations.push(
      text(
        'CONTAINS',
        code('121106', 'DCM', 'Comment'),
        caveat ?? 'QC failure was bypassed on user request: interpret with caution.',
      ),
    );
  }
  const library = container('CONTAINS', code('111028', 'DCM', 'Image Library'), [
    container(
      'CONTAINS',
      code('126200', 'DCM', 'Image Library Group'),
      source.instances
        .filter((i) => isImageSopClass(i.sopClassUid))
        .map((i) => ({
          RelationshipType: 'CONTAINS',
          ValueType: 'IMAGE',
          ReferencedSOPSequence: [
            { ReferencedSOPClassUID: i.sopClassUid, ReferencedSOPInstanceUID: i.sopInstanceUid },
          ],
        })),
    ),
  ]);
  const root = container(
    undefined,
    code('126000', 'DCM', 'Imaging Measurement Report'),
    [
      codeItem(
        'HAS CONCEPT MOD',
        code('121049', 'DCM', 'Language of Content Item and Descendants'),
        code('en-US', 'RFC5646', 'English (United States)'),
      ),
      codeItem(
        'HAS OBS CONTEXT',
        code('121005', 'DCM', 'Observer Type'),
        code('121007', 'DCM', 'Device'),
      ),
      uidref('HAS OBS CONTEXT', code('121012', 'DCM', 'Device Observer UID'), d.uid),
      text('HAS OBS CONTEXT', code('121013', 'DCM', 'Device Observer Name'), d.name),
      text(
        'HAS OBS CONTEXT',
        code('121014', 'DCM', 'Device Observer Manufacturer'),
        d.manufacturer,
      ),
      text(
        'HAS OBS CONTEXT',
        code('121015', 'DCM', 'Device Observer Model Name'),
        `${d.name} ${d.version}`,
      ),
      codeItem('HAS CONCEPT MOD', code('121058', 'DCM', 'Procedure reported'), procedure),
      library,
      container('CONTAINS', code('126010', 'DCM', 'Imaging Measurements'), groups),
      ...(evaluations.length > 0
        ? [container('CONTAINS', code('C0034375', 'UMLS', 'Qualitative Evaluations'), evaluations)]
        : []),
    ],
    '1500',
  );
  const bySeries = new Map<string, Item[]>();
  for (const i of source.instances) {
    const list = bySeries.get(i.seriesInstanceUid) ?? [];
    list.push({ ReferencedSOPClassUID: i.sopClassUid, ReferencedSOPInstanceUID: i.sopInstanceUid });
    bySeries.set(i.seriesInstanceUid, list);
  }
  const dataset: Item = {
    SpecificCharacterSet: 'ISO_IR 192',
    SOPClassUID: COMPREHENSIVE_3D_SR,
    SOPInstanceUID: uids.srInstanceUid,
    InstanceCreationDate: date,
    InstanceCreationTime: time,
    ...patientAndStudy(source),
    Modality: 'SR',
    SeriesInstanceUID: uids.srSeriesUid,
    SeriesNumber: 9901,
    SeriesDescription: `AI results (${d.name})`,
    ReferencedPerformedProcedureStepSequence: [],
    ...equipment(input),
    InstanceNumber: instanceNumber(input),
    CompletionFlag: 'COMPLETE',
    VerificationFlag: 'UNVERIFIED',
    PreliminaryFlag: 'FINAL',
    ContentDate: date,
    ContentTime: time,
    ReferencedRequestSequence: requestSequence(input, source.attributes.studyInstanceUid),
    CurrentRequestedProcedureEvidenceSequence: [
      {
        StudyInstanceUID: source.attributes.studyInstanceUid,
        ReferencedSeriesSequence: [...bySeries.entries()].map(([series, sops]) => ({
          SeriesInstanceUID: series,
          ReferencedSOPSequence: sops,
        })),
      },
    ],
    PerformedProcedureCodeSequence: [],
    ...(uids.previousSrInstanceUid
      ? {
          // A corrected result replaces the SR it corrects (PS3.3 C.17.2).
          PredecessorDocumentsSequence: [
            {
              StudyInstanceUID: source.attributes.studyInstanceUid,
              ReferencedSeriesSequence: [
                {
                  SeriesInstanceUID: uids.srSeriesUid,
                  ReferencedSOPSequence: [
                    {
                      ReferencedSOPClassUID: COMPREHENSIVE_3D_SR,
                      ReferencedSOPInstanceUID: uids.previousSrInstanceUid,
                    },
                  ],
                },
              ],
            },
          ],
        }
      : {}),
    ...root,
  };
  return write(dataset, cuts);
}

/** The Encapsulated PDF of the report (results or failure PDF); `cuts` as for the SR. */
export function buildEncapsulatedPdf(
  input: PublicationInput,
  source: SourceStudy,
  pdf: Buffer,
  now: Date,
  cuts?: string[],
): Buffer {
  const uids = input.dicom!;
  const { date, time } = dicomNow(now);
  // OB values have even length (PS3.5 7.1.1): pad with a NUL; the true length goes in
  // Encapsulated Document Length (0042,0015).
  const padded = pdf.length % 2 === 0 ? pdf : Buffer.concat([pdf, Buffer.from([0])]);
  const dataset: Item = {
    SpecificCharacterSet: 'ISO_IR 192',
    SOPClassUID: ENCAPSULATED_PDF,
    SOPInstanceUID: uids.pdfInstanceUid,
    InstanceCreationDate: date,
    InstanceCreationTime: time,
    ...patientAndStudy(source),
    Modality: 'DOC',
    SeriesInstanceUID: uids.pdfSeriesUid,
    SeriesNumber: 9902,
    SeriesDescription: `AI report PDF (${input.device.name})`,
    ...equipment(input),
    ConversionType: 'WSD',
    InstanceNumber: instanceNumber(input),
    ContentDate: date,
    ContentTime: time,
    AcquisitionDateTime: `${date}${time}`,
    BurnedInAnnotation: 'YES',
    DocumentTitle: 'AI analysis report',
    ConceptNameCodeSequence: [],
    MIMETypeOfEncapsulatedDocument: 'application/pdf',
    EncapsulatedDocumentLength: pdf.length,
    EncapsulatedDocument: padded.buffer.slice(padded.byteOffset, padded.byteOffset + padded.length),
  };
  return write(dataset, cuts);
}
