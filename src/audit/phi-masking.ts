/**
 * How PHI is hidden from analysts on the audit API and page (docs/audit.md, "Masking"), by
 * allow-list (issue #15): a value is shown only when it sits in a field known to carry no
 * PHI; everything else — free text, narrative, extensions, unknown keys and segments, NTE,
 * OBR-13/31 — is hidden whole. Names keep their initials, birth dates their year, patient
 * identifiers their last two characters. Order identifiers (accession, placer/filler
 * numbers, Study Instance UID), codes, statuses and timestamps stay readable: they name the
 * order, not the patient, and are what an analyst is asked about.
 *
 * Pure functions, no Nest or database: the same rules serve order fields, lineage values,
 * audit event details, raw HL7 and raw FHIR.
 */

export type MaskRule = 'name' | 'date' | 'id' | 'full';

const HIDDEN = '***';

/** "SCHMIDT" → "S***"; "Anna Maria" → "A*** M***". */
export function maskName(value: string): string {
  return value
    .split(/(\s+)/)
    .map((part) => (/^\s*$/.test(part) ? part : `${[...part][0]}${HIDDEN}`))
    .join('');
}

/** Keeps the year: "1956-02-14" → "1956-**-**", HL7 "19560214" → "1956****". */
export function maskDate(value: string): string {
  const year = /^\d{4}/.exec(value)?.[0];
  if (!year) return HIDDEN;
  return year + value.slice(4).replace(/\d/g, '*');
}

/** Keeps the last two characters of identifiers long enough to stay unguessable. */
export function maskIdentifier(value: string): string {
  if (value.length < 6) return HIDDEN;
  return `${HIDDEN}${value.slice(-2)}`;
}

export function maskValue(rule: MaskRule, value: string): string {
  if (value === '') return value;
  switch (rule) {
    case 'name':
      return maskName(value);
    case 'date':
      return maskDate(value);
    case 'id':
      return maskIdentifier(value);
    case 'full':
      return HIDDEN;
    default:
      return rule satisfies never;
  }
}

/**
 * OrderRequest paths (lineage `target`s) shown as they are: identifiers of the order, codes,
 * statuses and times. Every other path is PHI or free text.
 */
const VISIBLE_TARGETS: readonly RegExp[] = [
  /^(source|action|accessionNumber|studyInstanceUid|modality|priority|requestedAt)$/,
  /^(placerOrderNumber|fillerOrderNumber|placerGroupNumber)(\.(value|system|type))?$/,
  /^procedure(\.(code|system|display))?$/,
  /^products(\[\d+\])?$/,
  /^patient\.sex$/,
  /^patient\.identifiers\[\d+\]\.(system|type)$/,
  /^reasonForStudy\[\d+\]\.(code|system)$/,
  // The ordering provider is a clinician acting in their role, not the patient.
  /^orderingProvider\./,
];

/**
 * The rule for an OrderRequest path (lineage `target`), or undefined when it is shown as it
 * is. Allow-list: a path not known to be PHI-free is hidden whole.
 */
export function ruleForTarget(target: string): MaskRule | undefined {
  if (/^patient\.name/.test(target)) return 'name';
  if (/^patient\.birthDate/.test(target)) return 'date';
  if (/^(patient\.identifiers|priorIdentifiers)(\[\d+\])?(\.value)?$/.test(target)) return 'id';
  if (VISIBLE_TARGETS.some((re) => re.test(target))) return undefined;
  return 'full';
}

/** An OrderRequest (ours): every string leaf masked by its path's rule. */
function isOrderRequest(obj: Record<string, unknown>): boolean {
  return (
    typeof obj.source === 'string' &&
    typeof obj.action === 'string' &&
    typeof obj.patient === 'object' &&
    obj.patient !== null
  );
}

function maskByPath(v: unknown, path: string): unknown {
  if (typeof v === 'string') {
    const rule = ruleForTarget(path);
    return rule ? maskValue(rule, v) : v;
  }
  if (Array.isArray(v)) return v.map((x, i) => maskByPath(x, `${path}[${i}]`));
  if (v === null || typeof v !== 'object') return v;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(v as Record<string, unknown>)) {
    out[key] = maskByPath(inner, path ? `${path}.${key}` : key);
  }
  return out;
}

/** Keys whose values are PHI wherever they appear in our own JSON (order requests, event details). */
const KEY_RULES: Readonly<Record<string, MaskRule>> = {
  birthDate: 'date',
  deceasedDateTime: 'date',
  address: 'full',
  telecom: 'full',
  notes: 'full',
  note: 'full',
  photo: 'full',
};

/** FHIR resources that describe a person: their `name` and `identifier` are PHI (FHIR R4 Patient, RelatedPerson, Person). */
const PERSON_RESOURCES = new Set(['Patient', 'RelatedPerson', 'Person']);

/**
 * Masks PHI anywhere in a JSON value. `person`: inside a resource about a person, so nested
 * `name` and `identifier` (e.g. Patient.contact.name) are PHI too. Covers our OrderRequest
 * (`patient`), lineage lines (by target), identifier lists, FHIR resources, and embedded HL7
 * text (outbound ORU payloads).
 */
export function maskJson(value: unknown, context: { person?: boolean } = {}): unknown {
  if (typeof value === 'string') {
    return /^(\uFEFF)?MSH./.test(value) ? maskHl7Text(value) : value;
  }
  if (Array.isArray(value)) return value.map((v) => maskJson(v, context));
  if (value === null || typeof value !== 'object') return value;
  const obj = value as Record<string, unknown>;
  if (isLineageLine(obj)) return maskLineageLine(obj);
  if (isOrderRequest(obj)) return maskByPath(obj, '');
  if (typeof obj.resourceType === 'string') return maskFhir(obj, false);
  const person =
    context.person ||
    (typeof obj.resourceType === 'string' && PERSON_RESOURCES.has(obj.resourceType));
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(obj)) {
    const keyRule = KEY_RULES[key];
    if (keyRule) out[key] = maskLeaves(v, keyRule);
    else if (key === 'patient' || key === 'subject') out[key] = maskPatientLike(v);
    else if (person && key === 'name') out[key] = maskLeaves(v, 'name', ['use', 'period']);
    else if (person && key === 'identifier') out[key] = maskIdentifiers(v);
    else if (key === 'identifiers' || key === 'priorIdentifiers') out[key] = maskIdentifiers(v);
    else out[key] = maskJson(v, { person });
  }
  return out;
}

/**
 * FHIR elements (R4) whose string values carry no PHI and are shown as they are: structure,
 * codes, statuses, times and references. `display` is shown in a Coding only, `text` in a
 * CodeableConcept only; narrative (`text.div`), extensions, notes, instructions, names,
 * addresses and every element not listed are hidden. Identifiers of a person resource keep
 * their system and type; those of an order (accession, placer number) stay readable.
 */
const FHIR_VISIBLE = new Set([
  'resourceType',
  'id',
  'meta',
  'versionId',
  'lastUpdated',
  'profile',
  'security',
  'tag',
  'status',
  'intent',
  'priority',
  'category',
  'code',
  'coding',
  'system',
  'version',
  'userSelected',
  'reference',
  'type',
  'use',
  'authoredOn',
  'occurrenceDateTime',
  'occurrencePeriod',
  'start',
  'end',
  'gender',
  'active',
  'deceasedBoolean',
  'fullUrl',
  'request',
  'method',
  'url',
  'entry',
  'resource',
  'contained',
  'link',
  'relation',
  'timestamp',
  'total',
  'basedOn',
  'replaces',
  'requisition',
  'identifier',
  'value',
  'assigner',
  'subject',
  'encounter',
  'requester',
  'performer',
  'performerType',
  'supportingInfo',
  'reasonCode',
  'reasonReference',
  'bodySite',
  'orderDetail',
  'quantity',
  'unit',
  'series',
  'modality',
  'uid',
  'numberOfSeries',
  'numberOfInstances',
  'started',
  'focus',
  'parameter',
  'name',
  'part',
  'valueCode',
  'valueCoding',
  'valueReference',
  'valueCanonical',
  'valueUri',
  'valueUrl',
  'valueInstant',
  'valueDateTime',
  'valueInteger',
  'valueUnsignedInt',
  'valuePositiveInt',
  'valueBoolean',
  'valueId',
  'valueIdentifier',
  'issue',
  'severity',
  'expression',
  'location',
  'businessStatus',
  'statusReason',
  'effectiveDateTime',
  'issued',
  'conclusionCode',
  'result',
  'presentedForm',
  'contentType',
  'output',
  'input',
  'for',
  'owner',
  'lastModified',
  'executionPeriod',
  'channel',
  'endpoint',
  'payload',
  'criteria',
  'topic',
]);
/** Keys that are PHI or free text in any FHIR element, whatever the allow-list says. */
const FHIR_HIDDEN = new Set([
  'div',
  'extension',
  'modifierExtension',
  'note',
  'patientInstruction',
  'comment',
  'description',
  'valueString',
  'valueMarkdown',
  'address',
  'telecom',
  'photo',
  'maritalStatus',
  'contact',
  'communication',
  'data',
  'conclusion',
  'diagnostics',
  'details',
]);

function maskFhir(obj: Record<string, unknown>, person: boolean): Record<string, unknown> {
  const isPerson =
    person || (typeof obj.resourceType === 'string' && PERSON_RESOURCES.has(obj.resourceType));
  const isCoding = 'code' in obj || 'system' in obj;
  const isConcept = Array.isArray(obj.coding);
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(obj)) {
    if (FHIR_HIDDEN.has(key)) out[key] = maskLeaves(v, 'full', ['url', 'status']);
    else if (key === 'birthDate' || key === 'deceasedDateTime') out[key] = maskLeaves(v, 'date');
    else if (key === 'text')
      out[key] =
        typeof v === 'string' && isConcept
          ? v
          : typeof v === 'string'
            ? maskValue('full', v)
            : maskLeaves(v, 'full', ['status']);
    else if (key === 'display')
      out[key] = isCoding && typeof v === 'string' ? v : maskLeaves(v, isPerson ? 'name' : 'full');
    else if (isPerson && key === 'name') out[key] = maskLeaves(v, 'name', ['use', 'period']);
    else if (isPerson && key === 'identifier') out[key] = maskIdentifiers(v);
    else if (key === 'subject' || key === 'patient') out[key] = maskFhirValue(v, true);
    else if (FHIR_VISIBLE.has(key)) out[key] = maskFhirValue(v, isPerson);
    else out[key] = maskLeaves(v, 'full');
  }
  return out;
}

function maskFhirValue(v: unknown, person: boolean): unknown {
  if (Array.isArray(v)) return v.map((x) => maskFhirValue(x, person));
  if (v === null || typeof v !== 'object') return v;
  const obj = v as Record<string, unknown>;
  return maskFhir(obj, person && typeof obj.resourceType !== 'string');
}

export interface LineageLine {
  target: string;
  source: string;
  value: string;
  ruleId: string;
  rule?: string;
}

function isLineageLine(obj: Record<string, unknown>): obj is Record<string, unknown> & LineageLine {
  return (
    typeof obj.target === 'string' &&
    typeof obj.source === 'string' &&
    typeof obj.ruleId === 'string' &&
    'value' in obj
  );
}

export function maskLineageLine<T extends LineageLine>(line: T): T {
  const rule = ruleForTarget(line.target);
  if (!rule || typeof line.value !== 'string') return line;
  // The conversion rule quotes the source text (`HL7 DT: 19560214 → 1956-02-14`): keep its
  // name, hide the values.
  const converted =
    typeof line.rule === 'string' ? { rule: `${line.rule.replace(/:.*$/s, '')}: ***` } : {};
  return { ...line, value: maskValue(rule, line.value), ...converted };
}

/** Our PatientInfo, or a FHIR Reference (`display` is the person's name). */
function maskPatientLike(v: unknown): unknown {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return maskJson(v, {});
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(v as Record<string, unknown>)) {
    if (key === 'display') out[key] = maskLeaves(inner, 'name');
    else out[key] = (maskJson({ [key]: inner }, { person: true }) as Record<string, unknown>)[key];
  }
  return out;
}

/** Identifier(s): the value is hidden, the system and type (which say what it is) kept. */
function maskIdentifiers(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(maskIdentifiers);
  if (typeof v === 'string') return maskIdentifier(v);
  if (v === null || typeof v !== 'object') return v;
  const obj = v as Record<string, unknown>;
  return {
    ...obj,
    ...(typeof obj.value === 'string' ? { value: maskIdentifier(obj.value) } : {}),
  };
}

/** Applies `rule` to every string leaf, except under the keys in `keep` (codes such as `use`). */
function maskLeaves(v: unknown, rule: MaskRule, keep: readonly string[] = []): unknown {
  if (typeof v === 'string') return maskValue(rule, v);
  if (Array.isArray(v)) return v.map((x) => maskLeaves(x, rule, keep));
  if (v === null || typeof v !== 'object') return v;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(v as Record<string, unknown>)) {
    out[key] = keep.includes(key) ? inner : maskLeaves(inner, rule, keep);
  }
  return out;
}

/**
 * PHI fields of HL7 v2 segments (v2.5.1 chapter 3 for PID, NK1, MRG, PV1; chapter 6 for GT1
 * and IN1). `id`: component 1 of each repetition (the number; assigning authority and type
 * code stay readable). `name`: every component to its initial. `date`: year kept. `full`:
 * every component hidden.
 */
export const HL7_PHI_FIELDS: Readonly<Record<string, Readonly<Record<number, MaskRule>>>> = {
  PID: {
    2: 'id',
    3: 'id',
    4: 'id',
    5: 'name',
    6: 'name',
    7: 'date',
    9: 'name',
    11: 'full',
    13: 'full',
    14: 'full',
    18: 'id',
    19: 'id',
    20: 'id',
    21: 'id',
    23: 'full',
    29: 'date',
  },
  PD1: { 3: 'full', 4: 'name' },
  NK1: {
    2: 'name',
    4: 'full',
    5: 'full',
    6: 'full',
    30: 'name',
    31: 'full',
    32: 'full',
    33: 'id',
    37: 'id',
  },
  MRG: { 1: 'id', 2: 'id', 3: 'id', 4: 'id', 5: 'id', 6: 'id', 7: 'name' },
  PV1: { 19: 'id', 50: 'id' },
  GT1: { 3: 'name', 5: 'full', 6: 'full', 7: 'full', 8: 'date', 12: 'id' },
  IN1: { 16: 'name', 18: 'date', 19: 'full', 36: 'id', 49: 'id' },
};

/**
 * Fields of HL7 v2 segments shown as they are (v2.5.1 chapters 2, 3, 4; IHE RAD TF-2): message
 * header and acknowledgment, order identifiers, codes, statuses, times, the ordering
 * clinician. Every field not listed here and not in HL7_PHI_FIELDS, and every segment not
 * listed at all (Z-segments included), is hidden whole: NTE-3, OBR-13 (relevant clinical
 * information), OBR-31 (reason for study), OBX-5 and free text never show unmasked.
 */
const range = (from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => from + i);
export const HL7_VISIBLE_FIELDS: Readonly<Record<string, ReadonlySet<number>>> = {
  MSH: new Set(range(1, 21)),
  MSA: new Set(range(1, 8)),
  ERR: new Set(range(1, 12)),
  EVN: new Set([1, 2, 3, 4, 6, 7]),
  PID: new Set([1, 8, 24, 30]),
  // Attending, referring, consulting and admitting doctors are clinicians, not the patient.
  PV1: new Set([1, 2, 3, 4, 7, 8, 9, 10, 17, 18, 39]),
  NK1: new Set([1, 3, 7]),
  ORC: new Set([...range(1, 21), 29, 30, 31]),
  OBR: new Set([...range(1, 12), ...range(14, 18), ...range(22, 30), ...range(32, 50)]),
  TQ1: new Set(range(1, 14)),
  IPC: new Set(range(1, 11)),
  NTE: new Set([1, 2, 4]),
  DG1: new Set([1, 2, 3, 6]),
  OBX: new Set([1, 2, 3, 4, 6, 11, 14]),
  MRG: new Set<number>(),
};

/**
 * Coded fields that may carry free text (CE/CWE, v2.5.1 chapter 2A): as in the mapped view
 * (reasonForStudy[n].code and .system shown, the text hidden), the identifier and coding
 * system components are shown and the text components hidden. OBR-31 Reason for Study.
 */
const CE_CODE_COMPONENTS: ReadonlySet<number> = new Set([1, 3, 4, 6]);
export const HL7_CODED_FREE_TEXT: Readonly<
  Record<string, Readonly<Record<number, ReadonlySet<number>>>>
> = {
  OBR: { 31: CE_CODE_COMPONENTS },
};

/** Shows only the listed components of each repetition; the others are hidden whole. */
function maskHl7Components(
  value: string,
  visible: ReadonlySet<number>,
  d: { component: string; repetition: string; subcomponent: string },
): string {
  if (value === '' || value === '""') return value;
  return value
    .split(d.repetition)
    .map((rep) =>
      rep
        .split(d.component)
        .map((c, i) => (visible.has(i + 1) || c === '' ? c : maskHl7Field(c, 'full', d)))
        .join(d.component),
    )
    .join(d.repetition);
}

/** The HL7 delimiters from MSH-1/MSH-2 (v2.5.1 2.5.4), with the standard defaults. */
export function hl7Delimiters(text: string): {
  field: string;
  component: string;
  repetition: string;
  escape: string;
  subcomponent: string;
} {
  const at = text.indexOf('MSH');
  const field = at >= 0 ? (text[at + 3] ?? '|') : '|';
  const enc = at >= 0 ? text.slice(at + 4, at + 8) : '^~\\&';
  return {
    field,
    component: enc[0] ?? '^',
    repetition: enc[1] ?? '~',
    escape: enc[2] ?? '\\',
    subcomponent: enc[3] ?? '&',
  };
}

/** Splits HL7 text into segments, keeping each segment's text (CR, LF or CRLF tolerated). */
export function hl7Segments(text: string): string[] {
  return text
    .replace(/^\uFEFF/, '')
    .split(/\r\n|\r|\n/)
    .filter((s) => s.length > 0);
}

/** The segment's fields with their HL7 positions (MSH-1 is the field separator itself). */
export function hl7Fields(
  segment: string,
  fieldSep: string,
): Array<{ position: number; value: string }> {
  const parts = segment.split(fieldSep);
  const id = parts[0] ?? '';
  if (id === 'MSH' || id === 'BHS' || id === 'FHS') {
    return [
      { position: 1, value: fieldSep },
      ...parts.slice(1).map((value, i) => ({ position: i + 2, value })),
    ];
  }
  return parts.slice(1).map((value, i) => ({ position: i + 1, value }));
}

/** Masks one HL7 field value by rule, repetition by repetition and component by component. */
export function maskHl7Field(
  value: string,
  rule: MaskRule,
  d: { component: string; repetition: string; subcomponent: string },
): string {
  if (value === '' || value === '""') return value;
  return value
    .split(d.repetition)
    .map((rep) => {
      const comps = rep.split(d.component);
      if (rule === 'id') {
        if (comps[0]) comps[0] = maskIdentifier(comps[0]);
        return comps.join(d.component);
      }
      return comps
        .map((c) =>
          c
            .split(d.subcomponent)
            .map((s) => (s === '' ? s : maskValue(rule, s)))
            .join(d.subcomponent),
        )
        .join(d.component);
    })
    .join(d.repetition);
}

/**
 * Raw HL7 text masked by allow-list; segment and field structure unchanged. A field is shown
 * when HL7_VISIBLE_FIELDS lists it, partly masked by its HL7_PHI_FIELDS rule, and hidden
 * whole otherwise.
 */
export function maskHl7Text(text: string): string {
  const d = hl7Delimiters(text);
  const eol = /\r\n/.test(text) ? '\r\n' : /\r/.test(text) ? '\r' : '\n';
  return hl7Segments(text)
    .map((segment) => {
      const parts = segment.split(d.field);
      const id = parts[0] ?? '';
      const rules = HL7_PHI_FIELDS[id] ?? {};
      const visible = HL7_VISIBLE_FIELDS[id];
      // MSH-1 is the separator itself: parts[1] is MSH-2, so field n is parts[n - 1].
      const offset = id === 'MSH' ? 1 : 0;
      for (let i = 1; i < parts.length; i++) {
        const position = i + offset;
        if (id === 'MSH' && position <= 2) continue;
        const rule = rules[position];
        const coded = HL7_CODED_FREE_TEXT[id]?.[position];
        if (rule) parts[i] = maskHl7Field(parts[i]!, rule, d);
        else if (coded) parts[i] = maskHl7Components(parts[i]!, coded, d);
        else if (!visible?.has(position)) parts[i] = maskHl7Field(parts[i]!, 'full', d);
      }
      return parts.join(d.field);
    })
    .join(eol);
}

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

/** An upstream report (JSON) masked by UPSTREAM_REPORT_VISIBLE, structure kept. */
export function maskUpstreamReport(value: unknown, visible = true): unknown {
  if (Array.isArray(value)) return value.map((v) => maskUpstreamReport(v, visible));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
      out[key] = maskUpstreamReport(v, visible && UPSTREAM_REPORT_VISIBLE.has(key));
    }
    return out;
  }
  if (visible || value === null || typeof value === 'boolean') return value;
  return HIDDEN;
}
