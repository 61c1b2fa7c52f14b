import { encodeSegment, formatHl7Timestamp, type Hl7SegmentSpec } from '../hl7/hl7-builder';
import { charsetLabel, encodeText } from '../hl7/hl7-charset';
import type { Hl7Message } from '../hl7/hl7-message';
import { resultTextLines } from './result-content.mapping';
import type { PublicationInput } from './publication.model';

/**
 * ORU^R01 (HL7 v2.5.1 chapter 7.3.1) and the optional ORM^O01 status message (ORC-1 SC,
 * chapter 4.4.1) for one publication. MSH is in the site's version (the original order's
 * MSH-12 unless configured), PID and PV1 are the original order's segments as received, and
 * every value we write goes through the builder's escaping (v2.5.1 section 2.7).
 */
export interface Hl7ResultSettings {
  sendingApplication: string;
  sendingFacility: string;
  /** MSH-12 when the order did not come over HL7 (or to force one). */
  defaultVersion: string;
  forceVersion?: string;
  /** OBX-2 of the text report: TX (one repetition per line) or FT. */
  textType: 'TX' | 'FT';
}

export interface Hl7OriginalOrder {
  message: Hl7Message;
}

export interface BuiltHl7 {
  controlId: string;
  text: string;
  /** The wire bytes, in the character set MSH-18 names. */
  bytes: Buffer;
  version: string;
}

/**
 * MSH-18 of what we send: the order's own character set when it declared one we can write
 * (the RIS reads its own messages' charset, e.g. 8859/1), else UTF-8, said explicitly.
 */
function charsetFor(original: Hl7Message | undefined): string {
  const declared = original?.msh.value(18);
  return declared && charsetLabel(declared) ? declared : 'UNICODE UTF-8';
}

/** Stands for an FT line break until the segment is encoded (the escaper leaves it alone). */
const LINE_BREAK = '\u0001';

function encodeObx(spec: Hl7SegmentSpec): string {
  const text = encodeSegment(spec);
  return spec.fields[1] === 'FT' ? text.replaceAll(LINE_BREAK, '\\.br\\') : text;
}

/** Local coding system of our OBX-3 codes (HL7 table 0396 `99zzz` local), beside DCM and LN. */
const LOCAL = '99IAA';

function versionAtLeast(version: string, min: string): boolean {
  const a = version.split('.').map(Number);
  const b = min.split('.').map(Number);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d > 0;
  }
  return true;
}

/** A segment of the original message, re-encoded with our delimiters (raw text when they match). */
function originalSegment(original: Hl7Message | undefined, id: string): string | undefined {
  const seg = original?.segment(id);
  if (!seg) return undefined;
  const d = original!.delimiters;
  if (
    d.field === '|' &&
    d.component === '^' &&
    d.repetition === '~' &&
    d.escape === '\\' &&
    d.subcomponent === '&'
  ) {
    return seg.fields.join('|');
  }
  return undefined;
}

function msh(
  input: PublicationInput,
  original: Hl7Message | undefined,
  settings: Hl7ResultSettings,
  type: 'ORU' | 'ORM',
  controlId: string,
  now: Date,
): { spec: Hl7SegmentSpec; version: string } {
  const version = settings.forceVersion ?? original?.version ?? settings.defaultVersion;
  const event = type === 'ORU' ? 'R01' : 'O01';
  // MSH-9.3 message structure exists from v2.3.1 on.
  const messageType = versionAtLeast(version, '2.3.1')
    ? [type, event, `${type}_${event}`]
    : [type, event];
  const o = original?.msh;
  return {
    version,
    spec: {
      id: 'MSH',
      fields: [
        settings.sendingApplication,
        settings.sendingFacility,
        // Back to whoever sent the order (its MSH-3 / MSH-4).
        o?.value(3),
        o?.value(4),
        formatHl7Timestamp(now),
        undefined,
        messageType,
        controlId,
        'P',
        version,
        undefined,
        undefined,
        'AL',
        'NE',
        undefined,
        charsetFor(original),
      ],
    },
  };
}

function pidOf(input: PublicationInput, original: Hl7Message | undefined): string {
  const raw = originalSegment(original, 'PID');
  if (raw) return raw;
  const p = input.order.request.patient;
  const sex = { male: 'M', female: 'F', other: 'O', unknown: 'U' } as const;
  return encodeSegment({
    id: 'PID',
    fields: [
      '1',
      undefined,
      {
        repetitions: p.identifiers.map((i) => [
          i.value,
          undefined,
          undefined,
          i.system,
          i.type ?? 'MR',
        ]),
      },
      undefined,
      p.name
        ? [p.name.family, p.name.given?.[0], p.name.given?.slice(1).join(' ') || undefined]
        : undefined,
      undefined,
      p.birthDate?.replace(/-/g, ''),
      p.sex ? sex[p.sex] : undefined,
    ],
  });
}

function pv1Of(original: Hl7Message | undefined): string {
  // PV1-2 patient class is required; U = unknown (table 0004) when the order had no visit.
  return originalSegment(original, 'PV1') ?? encodeSegment({ id: 'PV1', fields: ['1', 'U'] });
}

/**
 * ORC-2/OBR-2: the placer's number as the order brought it; for a FHIR order without one, the
 * ServiceRequest's id (namespace `FHIR`), so the receiver can match the result to its request.
 */
export function placerNumberOf(input: PublicationInput): string[] | undefined {
  const o = input.order;
  const placer = o.request.placerOrderNumber;
  if (o.placerOrderNumber) return [o.placerOrderNumber, placer?.system ?? ''];
  const srId = input.serviceRequest?.match(/ServiceRequest\/([^/]+)/)?.[1];
  return srId ? [srId, 'FHIR'] : undefined;
}

/**
 * ORC-3/OBR-3 (the same value in both, v2.5.1 §4.5.1.3/§4.5.3.3): the filler number the order
 * came with, else ours — the adapter's order id, namespace `IMAGING-AI-ADAPTER` — so that a
 * later correction can name the order (intake finds an order by its id as a filler number).
 */
export function fillerNumberOf(input: PublicationInput): string[] {
  const o = input.order;
  const filler = o.request.fillerOrderNumber;
  if (o.fillerOrderNumber) return [o.fillerOrderNumber, filler?.system ?? ''];
  return [input.orderId, 'IMAGING-AI-ADAPTER'];
}

function orc(input: PublicationInput, control: string, status: string, now: Date): Hl7SegmentSpec {
  const o = input.order;
  const noResult = input.row.hl7.orderStatus === 'CA';
  const reason = noResult ? [input.row.task.reason, input.reason].filter(Boolean).join(': ') : '';
  return {
    id: 'ORC',
    fields: [
      control,
      placerNumberOf(input),
      fillerNumberOf(input),
      o.request.placerGroupNumber?.value,
      status,
      undefined,
      undefined,
      undefined,
      formatHl7Timestamp(now),
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      // ORC-16 order control code reason (CE): text only.
      reason ? [undefined, reason.slice(0, 199)] : undefined,
    ],
  };
}

function resultStatusOf(input: PublicationInput): string {
  const s = input.row.hl7.resultStatus;
  // Table 0123 C = correction of a final result.
  return s === 'F' && input.correction ? 'C' : s;
}

function obr(input: PublicationInput, now: Date): Hl7SegmentSpec {
  const o = input.order;
  const p = o.request.procedure;
  const d = input.device;
  const statusAt = new Date(input.statusAt);
  return {
    id: 'OBR',
    fields: [
      '1',
      placerNumberOf(input),
      fillerNumberOf(input),
      p?.code
        ? [p.code, p.display, p.system]
        : ['AI', `AI analysis ${o.request.products.join(',')}`, LOCAL],
      undefined,
      undefined,
      o.request.requestedAt ? formatHl7Timestamp(new Date(o.request.requestedAt)) : undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      // OBR-18 placer field 1: the accession number (IHE SWF practice).
      o.accessionNumber ?? undefined,
      undefined,
      undefined,
      undefined,
      // OBR-22 results report / status change date-time.
      formatHl7Timestamp(Number.isNaN(statusAt.getTime()) ? now : statusAt),
      undefined,
      undefined,
      resultStatusOf(input),
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      // OBR-32 principal result interpreter (NDL; CNN in component 1): the AI device.
      [[d.udi ?? d.uid, `${d.name} ${d.version}`]],
    ],
  };
}

/** The OBX lines: text report, measurements, flags, PDF, DICOM UIDs. */
function obxLines(
  input: PublicationInput,
  version: string,
  settings: Hl7ResultSettings,
): Hl7SegmentSpec[] {
  const out: Hl7SegmentSpec[] = [];
  const status = input.row.hl7.observationStatus ?? 'F';
  const obxStatus = status === 'F' && input.correction ? 'C' : status;
  const coded = versionAtLeast(version, '2.5') ? 'CWE' : 'CE';
  const add = (
    type: string,
    code: readonly string[],
    value: unknown,
    units?: readonly string[],
    flag?: string,
  ) => {
    out.push({
      id: 'OBX',
      fields: [
        String(out.length + 1),
        type,
        code,
        undefined,
        value as never,
        units,
        undefined,
        flag,
        undefined,
        undefined,
        obxStatus,
        undefined,
        undefined,
        formatHl7Timestamp(new Date(input.statusAt)),
      ],
    });
  };
  const isResult = input.row.hl7.resultStatus === 'F';
  const lines =
    isResult && input.results
      ? resultTextLines(input.results)
      : [[input.row.conclusion, input.reason].filter(Boolean).join(' ') || 'No result.'];
  if (isResult && (input.results?.qcBypassed || input.qcBypass) && !input.results?.caveat) {
    lines.push('QC failure was bypassed on user request: interpret with caution.');
  }
  // Text report: TX repeats one line per repetition; FT is one value whose lines are joined
  // by the \.br\ formatting command (v2.5.1 2.7.6), spliced in after escaping (LINE_BREAK).
  if (settings.textType === 'TX') {
    add('TX', ['REPORT', 'Report text', LOCAL], { repetitions: lines });
  } else {
    add(
      'FT',
      ['REPORT', 'Report text', LOCAL],
      lines.map((l) => l.replaceAll(LINE_BREAK, ' ')).join(LINE_BREAK),
    );
  }
  if (isResult && input.results) {
    for (const f of input.results.findings) {
      for (const m of f.measurements) {
        // OBX-8 abnormal flags (table 0078): L / N / H on the volume line.
        const flag =
          m.quantity === 'volume' && f.flag
            ? { low: 'L', normal: 'N', high: 'H' }[f.flag]
            : undefined;
        add('NM', [m.code, m.label, LOCAL], String(m.value), [m.ucum, m.unitDisplay, 'UCUM'], flag);
      }
      if (f.flag)
        add(
          coded,
          [`${f.code}.F`, `${f.structure} evaluation`, LOCAL],
          [f.flag.toUpperCase(), f.flag, LOCAL],
        );
    }
    if (input.results.impression)
      add('ST', ['IMPRESSION', 'Impression', LOCAL], input.results.impression);
  }
  if (input.qcReport !== undefined) {
    // The QC findings themselves, so the RIS user sees why the study was not analysable.
    add(
      'TX',
      ['QC-REPORT', 'Quality control report', LOCAL],
      JSON.stringify(input.qcReport).slice(0, 4000),
    );
  }
  if (input.pdf) {
    // ED (2A.2.24): source application ^ type ^ subtype ^ encoding ^ data.
    add(
      'ED',
      ['PDF', isResult ? 'Report PDF' : 'Failure report PDF', LOCAL],
      [undefined, 'Application', 'PDF', 'Base64', input.pdf.toString('base64')],
    );
  }
  const study = input.dicom?.studyInstanceUid ?? input.order.studyInstanceUid;
  if (study) add('ST', ['110180', 'Study Instance UID', 'DCM'], study);
  if (isResult && input.dicom)
    add('ST', ['SR-UID', 'SR SOP Instance UID', LOCAL], input.dicom.srInstanceUid);
  return out;
}

export function buildOru(
  input: PublicationInput,
  original: Hl7Message | undefined,
  settings: Hl7ResultSettings,
  controlId: string,
  now: Date,
): BuiltHl7 {
  const head = msh(input, original, settings, 'ORU', controlId, now);
  const lines = [
    encodeSegment(head.spec),
    pidOf(input, original),
    pv1Of(original),
    encodeSegment(orc(input, input.row.hl7.orderControl, input.row.hl7.orderStatus, now)),
    encodeSegment(obr(input, now)),
    ...obxLines(input, head.version, settings).map((s) => encodeObx(s)),
  ];
  const text = lines.join('\r') + '\r';
  return { controlId, text, bytes: encodeText(text, charsetFor(original)), version: head.version };
}

/** ORM^O01 with ORC-1 SC and ORC-5 per the row: an intermediate status for the RIS worklist. */
export function buildOrmStatus(
  input: PublicationInput,
  original: Hl7Message | undefined,
  settings: Hl7ResultSettings,
  controlId: string,
  now: Date,
): BuiltHl7 {
  const head = msh(input, original, settings, 'ORM', controlId, now);
  const lines = [
    encodeSegment(head.spec),
    pidOf(input, original),
    pv1Of(original),
    encodeSegment(orc(input, 'SC', input.row.hl7.orderStatus, now)),
    encodeSegment({ ...obr(input, now), fields: obr(input, now).fields.slice(0, 25) }),
  ];
  const text = lines.join('\r') + '\r';
  return { controlId, text, bytes: encodeText(text, charsetFor(original)), version: head.version };
}
