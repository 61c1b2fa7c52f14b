import { parseHl7 } from '../hl7';
import {
  hl7Delimiters,
  hl7Fields,
  hl7Segments,
  maskDicomValue,
  maskHl7Text,
  maskJson,
} from './phi-masking';

/**
 * Raw bytes and exchanged texts as the API and the page show them: HL7 segment by segment
 * with field names, JSON pretty-printed, DICOM tag dumps line by line; masked unless `reveal`.
 */

export interface Hl7FieldView {
  /** e.g. `PID-5` */
  position: string;
  /** Field name from HL7 v2.5.1, when known. */
  name?: string;
  value: string;
}

/** What a bounded view left out of a text over RAW_VIEW_LIMITS: shown and total. */
export interface RawCut {
  shownSegments: number;
  totalSegments: number;
  shownCharacters: number;
  totalCharacters: number;
}

export type RawView =
  | {
      format: 'hl7';
      separator: string;
      segments: Array<{ id: string; fields: Hl7FieldView[] }>;
      text: string;
      cut?: RawCut;
    }
  | { format: 'json'; text: string }
  | { format: 'text'; text: string; cut?: RawCut };

/**
 * How much of one HL7 or plain text the views show: the front door keeps the whole input of a
 * refusal (MLLP allows MLLP_MAX_MESSAGE_BYTES, 10 MB by default), far beyond what a page can
 * draw. A field view costs markup per field, so fields are bounded in all as well as
 * characters; a message within the HL7 parse bounds' defaults is shown whole. Before, one
 * refused 2 MB message of two million empty OBX fields drew a 181 MB page (33 s of rendering,
 * the event loop blocked) and a 77 MB API answer.
 */
export const RAW_VIEW_LIMITS = {
  segments: 5_000,
  fields: 20_000,
  characters: 512 * 1024,
} as const;

/** The tag dump of a DICOM document we sent (outbound/dicom-tag-dump.ts). */
export const DICOM_TAG_DUMP = 'application/x-dicom-tag-dump+json';

/** Levels of JSON the views indent; deeper ones are written compactly. */
export const JSON_INDENT_DEPTH = 24;

/**
 * JSON as JSON.stringify(value, null, 2) writes it, down to JSON_INDENT_DEPTH levels; deeper
 * values compact. Indenting every level makes the text quadratic in the depth: a refused
 * 26 KB FHIR body nested 1,000 levels deep was a 10 MB view (FHIR resources nest about ten).
 */
export function prettyJson(value: unknown, depth = 0): string {
  if (depth >= JSON_INDENT_DEPTH || value === null || typeof value !== 'object') {
    return JSON.stringify(value) ?? 'null';
  }
  const pad = '  '.repeat(depth + 1);
  const close = '  '.repeat(depth);
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    return `[\n${value.map((v) => pad + prettyJson(v, depth + 1)).join(',\n')}\n${close}]`;
  }
  const entries = Object.entries(value).filter(
    ([, v]) => v !== undefined && typeof v !== 'function' && typeof v !== 'symbol',
  );
  if (entries.length === 0) return '{}';
  return `{\n${entries
    .map(([k, v]) => `${pad}${JSON.stringify(k)}: ${prettyJson(v, depth + 1)}`)
    .join(',\n')}\n${close}}`;
}

/** A sent or received text masked by its content type (HL7, JSON, DICOM tag dump); `***` when unreadable. */
export function maskedText(text: string, contentType: string): string {
  const type = contentType.toLowerCase();
  if (type === DICOM_TAG_DUMP) {
    try {
      const lines = JSON.parse(text) as Array<{ keyword: string; value: string }>;
      return JSON.stringify(
        lines.map((l) => ({ ...l, value: maskDicomValue(l.keyword, l.value) })),
      );
    } catch {
      return '***';
    }
  }
  if (type.includes('json')) {
    try {
      return prettyJson(maskJson(JSON.parse(text)));
    } catch {
      return '***';
    }
  }
  if (/^\uFEFF?MSH/.test(text.trimStart())) return maskHl7Text(text);
  return '***';
}

/** One side of an exchange for display: HL7 segment by segment, JSON, or a DICOM tag dump. */
export function sideView(text: string, contentType: string, reveal: boolean): RawView {
  if (contentType.toLowerCase() === DICOM_TAG_DUMP) {
    const shown = reveal ? text : maskedText(text, contentType);
    try {
      const lines = JSON.parse(shown) as Array<{
        tag: string;
        keyword: string;
        vr: string;
        depth: number;
        value: string;
      }>;
      return {
        format: 'text',
        text: lines
          .map((l) => `${'  '.repeat(l.depth)}${l.tag} ${l.vr} ${l.keyword}: ${l.value}`)
          .join('\n'),
      };
    } catch {
      return { format: 'text', text: '(tag dump not readable)' };
    }
  }
  if (contentType.toLowerCase().includes('json')) {
    return rawView(Buffer.from(text, 'utf8'), contentType, reveal);
  }
  return hl7TextView(text, reveal);
}

/** Decodes raw bytes for display: HL7 by its own charset rules (MSH-18), JSON pretty-printed. */
export function rawView(bytes: Buffer, contentType: string | null, reveal: boolean): RawView {
  const type = (contentType ?? '').toLowerCase();
  if (type.includes('json')) {
    const text = bytes.toString('utf8');
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return { format: 'text', text: reveal ? text : '(not valid JSON; hidden while masked)' };
    }
    try {
      return { format: 'json', text: prettyJson(reveal ? parsed : maskJson(parsed)) };
    } catch {
      // masking walks the value: a body nested thousands of levels deep exhausts the stack
      return { format: 'text', text: '(nested too deeply to mask; hidden while masked)' };
    }
  }
  let text: string;
  try {
    text = parseHl7(bytes).text;
  } catch {
    text = bytes.toString('latin1');
  }
  return hl7TextView(text, reveal);
}

/** The first characters of a text up to `max`, never ending between a surrogate pair's halves. */
function headOf(text: string, max: number): string {
  if (text.length <= max) return text;
  const end = /[\uD800-\uDBFF]/.test(text[max - 1] ?? '') ? max - 1 : max;
  return text.slice(0, end);
}

/**
 * The head of an HL7 text within RAW_VIEW_LIMITS, cut between segments, after a segment's
 * last field within the field budget, or within a field at the character budget; `cut` when
 * anything was left out. Linear in the text's length.
 */
function boundedHl7(text: string): { text: string; cut?: RawCut } {
  const segments = hl7Segments(text);
  const fieldSep = hl7Delimiters(text).field;
  const kept: string[] = [];
  let characters = 0;
  let fields = 0;
  let whole = true;
  for (const segment of segments) {
    if (kept.length >= RAW_VIEW_LIMITS.segments || characters >= RAW_VIEW_LIMITS.characters) {
      whole = false;
      break;
    }
    let end = Math.min(segment.length, RAW_VIEW_LIMITS.characters - characters);
    let at = segment.indexOf(fieldSep);
    while (at >= 0 && at < end) {
      if (++fields > RAW_VIEW_LIMITS.fields) {
        end = at;
        break;
      }
      at = segment.indexOf(fieldSep, at + 1);
    }
    const shown = headOf(segment, end);
    kept.push(shown);
    characters += shown.length + 1;
    if (shown.length < segment.length) {
      whole = false;
      break;
    }
  }
  if (whole) return { text };
  const eol = /\r\n/.test(text) ? '\r\n' : /\r/.test(text) ? '\r' : '\n';
  const head = kept.join(eol);
  return {
    text: head,
    cut: {
      shownSegments: kept.length,
      totalSegments: segments.length,
      shownCharacters: head.length,
      totalCharacters: text.length,
    },
  };
}

/** HL7 text (already decoded) segment by segment with field positions and names, masked. */
function hl7TextView(full: string, reveal: boolean): RawView {
  if (!/^\uFEFF?MSH/.test(full.trimStart())) {
    if (!reveal) return { format: 'text', text: '(not an HL7 message; hidden while masked)' };
    const text = headOf(full, RAW_VIEW_LIMITS.characters);
    return text.length === full.length
      ? { format: 'text', text }
      : {
          format: 'text',
          text,
          cut: {
            shownSegments: 0,
            totalSegments: 0,
            shownCharacters: text.length,
            totalCharacters: full.length,
          },
        };
  }
  // Bounded before masking: masking and drawing then cost no more than the view shows.
  const { text, cut } = boundedHl7(full);
  const shown = reveal ? text : maskHl7Text(text);
  const d = hl7Delimiters(shown);
  const segments = hl7Segments(shown).map((segment) => {
    const id = segment.slice(0, 3);
    return {
      id,
      fields: hl7Fields(segment, d.field).map(({ position, value }) => ({
        position: `${id}-${position}`,
        ...(HL7_FIELD_NAMES[`${id}-${position}`]
          ? { name: HL7_FIELD_NAMES[`${id}-${position}`] }
          : {}),
        value,
      })),
    };
  });
  return {
    format: 'hl7',
    separator: d.field,
    segments,
    text: hl7Segments(shown).join('\n'),
    ...(cut ? { cut } : {}),
  };
}

/** Names of the fields analysts look at most (HL7 v2.5.1 chapters 2, 3, 4; IHE RAD TF-2 for ZDS). */
export const HL7_FIELD_NAMES: Readonly<Record<string, string>> = {
  'MSH-1': 'Field Separator',
  'MSH-2': 'Encoding Characters',
  'MSH-3': 'Sending Application',
  'MSH-4': 'Sending Facility',
  'MSH-5': 'Receiving Application',
  'MSH-6': 'Receiving Facility',
  'MSH-7': 'Date/Time of Message',
  'MSH-9': 'Message Type',
  'MSH-10': 'Message Control ID',
  'MSH-11': 'Processing ID',
  'MSH-12': 'Version ID',
  'MSH-18': 'Character Set',
  'EVN-1': 'Event Type Code',
  'PID-2': 'Patient ID',
  'PID-3': 'Patient Identifier List',
  'PID-5': 'Patient Name',
  'PID-6': "Mother's Maiden Name",
  'PID-7': 'Date/Time of Birth',
  'PID-8': 'Administrative Sex',
  'PID-11': 'Patient Address',
  'PID-13': 'Phone Number - Home',
  'PID-14': 'Phone Number - Business',
  'PID-18': 'Patient Account Number',
  'PID-19': 'SSN Number - Patient',
  'PV1-2': 'Patient Class',
  'PV1-3': 'Assigned Patient Location',
  'PV1-8': 'Referring Doctor',
  'PV1-19': 'Visit Number',
  'MRG-1': 'Prior Patient Identifier List',
  'ORC-1': 'Order Control',
  'ORC-2': 'Placer Order Number',
  'ORC-3': 'Filler Order Number',
  'ORC-4': 'Placer Group Number',
  'ORC-5': 'Order Status',
  'ORC-7': 'Quantity/Timing',
  'ORC-9': 'Date/Time of Transaction',
  'ORC-10': 'Entered By',
  'ORC-12': 'Ordering Provider',
  'OBR-1': 'Set ID - OBR',
  'OBR-2': 'Placer Order Number',
  'OBR-3': 'Filler Order Number',
  'OBR-4': 'Universal Service Identifier',
  'OBR-6': 'Requested Date/Time',
  'OBR-13': 'Relevant Clinical Information',
  'OBR-16': 'Ordering Provider',
  'OBR-18': 'Placer Field 1 (accession, IHE RAD ORM)',
  'OBR-19': 'Placer Field 2 (requested procedure ID)',
  'OBR-20': 'Filler Field 1 (scheduled procedure step ID)',
  'OBR-24': 'Diagnostic Serv Sect ID (modality)',
  'OBR-25': 'Result Status',
  'OBR-27': 'Quantity/Timing',
  'OBR-31': 'Reason for Study',
  'OBR-44': 'Procedure Code',
  'TQ1-7': 'Start Date/Time',
  'TQ1-9': 'Priority',
  'IPC-1': 'Accession Identifier',
  'IPC-2': 'Requested Procedure ID',
  'IPC-3': 'Study Instance UID',
  'IPC-4': 'Scheduled Procedure Step ID',
  'IPC-5': 'Modality',
  'ZDS-1': 'Study Instance UID (IHE RAD ZDS)',
  'NTE-3': 'Comment',
  'MSA-1': 'Acknowledgment Code',
  'MSA-2': 'Message Control ID',
  'ERR-1': 'Error Code and Location',
  'ERR-2': 'Error Location',
  'ERR-3': 'HL7 Error Code',
  'ERR-4': 'Severity',
  'OBX-2': 'Value Type',
  'OBX-3': 'Observation Identifier',
  'OBX-5': 'Observation Value',
  'OBX-11': 'Observation Result Status',
};
