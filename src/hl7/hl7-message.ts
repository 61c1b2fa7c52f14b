import {
  charsetLabel,
  decideCharset,
  decodeBytes,
  hasUtf8Bom,
  readDeclaredCharset,
} from './hl7-charset';
import { Hl7Error } from './hl7.error';
import { DEFAULT_DELIMITERS, Hl7Delimiters, unescapeValue } from './hl7-escape';
import { formatLocation, Hl7Location, parseLocation } from './hl7-location';
import { Hl7Quirk, QuirkCollector } from './hl7-quirk';

/** The HL7 explicit null (v2.5.1 chapter 2, null values): the receiver shall delete the value. */
export const HL7_EXPLICIT_NULL = '""';

const SEGMENT_ID = /^[A-Z][A-Z0-9]{2}$/;
/** A character that may serve as a delimiter: printable ASCII, not a letter, digit or space. */
const DELIMITER_CHAR = /^[!-/:-@[-`{-~]$/;

/**
 * One segment. `fields[n]` is the raw (still escaped) text of field n, so `fields[0]` is the
 * segment ID; for MSH, `fields[1]` is the field separator (MSH-1) and `fields[2]` the encoding
 * characters (MSH-2), as the standard numbers them (v2.5.1 section 2.15.9, MSH).
 */
export class Hl7Segment {
  /**
   * Each field is split into repetitions, and each repetition into components, once, on first
   * use: every access after that is O(1), so walking a field of N repetitions is O(N), not
   * O(N²) (issue #15: 20,000 empty PID-3 repetitions took 24 s).
   */
  private readonly repetitionCache = new Map<number, readonly string[]>();
  private readonly componentCache = new Map<string, readonly string[]>();

  constructor(
    readonly id: string,
    readonly fields: readonly string[],
    /** 1-based occurrence of this segment ID in the message. */
    readonly ordinal: number,
    /** 1-based position of the segment in the message. */
    readonly position: number,
    private readonly message: Hl7Message,
  ) {}

  get fieldCount(): number {
    return this.fields.length - 1;
  }

  /** Raw field text (escaped, with its delimiters), '' when absent. */
  rawField(field: number): string {
    return this.fields[field] ?? '';
  }

  /** Number of repetitions present in a field (0 when empty). */
  repetitionCount(field: number): number {
    return this.repetitions(field).length;
  }

  /**
   * The unescaped value at a position; undefined when empty or the explicit null `""`.
   * Missing repetition/component/subcomponent default to 1 (a primitive value, never a
   * composite's text).
   */
  value(field: number, repetition = 1, component = 1, subcomponent = 1): string | undefined {
    const raw = this.rawLeaf(field, repetition, component, subcomponent);
    if (raw === '' || raw === HL7_EXPLICIT_NULL) return undefined;
    if (this.id === 'MSH' && field <= 2) return raw;
    const d = this.message.delimiters;
    if (!raw.includes(d.escape)) return raw;
    return unescapeValue(raw, {
      delimiters: d,
      encoding: this.message.encoding,
      quirks: this.message.quirkCollector,
      location: formatLocation({
        segment: this.id,
        segmentOrdinal: this.ordinal,
        field,
        repetition,
        component,
        subcomponent,
      }),
    });
  }

  /** True when the position holds the explicit null `""` (delete the value). */
  isExplicitNull(field: number, repetition = 1, component = 1, subcomponent = 1): boolean {
    return this.rawLeaf(field, repetition, component, subcomponent) === HL7_EXPLICIT_NULL;
  }

  /** Unescaped components of one repetition (index 0 = component 1); [] when empty. */
  components(field: number, repetition = 1): (string | undefined)[] {
    const rep = this.rawRepetition(field, repetition);
    if (rep === '') return [];
    const count = this.componentsOf(field, repetition, rep).length;
    const out: (string | undefined)[] = [];
    for (let c = 1; c <= count; c += 1) out.push(this.value(field, repetition, c, 1));
    return out;
  }

  /** Absolute location text of a position in this segment, for lineage and ERR-2. */
  locationOf(
    field: number,
    repetition?: number,
    component?: number,
    subcomponent?: number,
  ): string {
    return formatLocation({
      segment: this.id,
      segmentOrdinal: this.ordinal,
      field,
      repetition,
      component,
      subcomponent,
    });
  }

  /** The raw repetitions of a field ([] when empty), split once. */
  private repetitions(field: number): readonly string[] {
    let reps = this.repetitionCache.get(field);
    if (reps === undefined) {
      const raw = this.rawField(field);
      if (raw === '') reps = [];
      else if (this.id === 'MSH' && field <= 2) reps = [raw];
      else reps = raw.split(this.message.delimiters.repetition);
      this.repetitionCache.set(field, reps);
    }
    return reps;
  }

  private componentsOf(field: number, repetition: number, rep: string): readonly string[] {
    const key = `${field}.${repetition}`;
    let comps = this.componentCache.get(key);
    if (comps === undefined) {
      comps = rep.split(this.message.delimiters.component);
      this.componentCache.set(key, comps);
    }
    return comps;
  }

  private rawRepetition(field: number, repetition: number): string {
    return this.repetitions(field)[repetition - 1] ?? '';
  }

  private rawLeaf(
    field: number,
    repetition: number,
    component: number,
    subcomponent: number,
  ): string {
    const rep = this.rawRepetition(field, repetition);
    if (rep === '') return '';
    if (this.id === 'MSH' && field <= 2) return component === 1 && subcomponent === 1 ? rep : '';
    const comp = this.componentsOf(field, repetition, rep)[component - 1] ?? '';
    if (subcomponent === 1) {
      const end = comp.indexOf(this.message.delimiters.subcomponent);
      return end === -1 ? comp : comp.slice(0, end);
    }
    return comp.split(this.message.delimiters.subcomponent)[subcomponent - 1] ?? '';
  }
}

/**
 * One order group (ORM_O01 ORDER / OMI_O23 ORDER, HL7 v2.5.1 chapter 4 message structures): an ORC
 * and the segments that follow it up to the next ORC (TQ1, OBR, NTE, DG1, OBX, IPC, ZDS...).
 * An OBR with no ORC of its own starts a group too (tolerated; some v2.3 senders do it).
 */
export class Hl7OrderGroup {
  constructor(
    /** 1-based index of the group in the message. */
    readonly index: number,
    readonly segments: readonly Hl7Segment[],
  ) {}

  first(id: string): Hl7Segment | undefined {
    return this.segments.find((s) => s.id === id);
  }

  all(id: string): Hl7Segment[] {
    return this.segments.filter((s) => s.id === id);
  }

  get orc(): Hl7Segment | undefined {
    return this.first('ORC');
  }

  get obr(): Hl7Segment | undefined {
    return this.first('OBR');
  }
}

export interface Hl7MessageType {
  code: string;
  trigger: string;
  structure?: string;
}

/**
 * Bounds on the shape of one message (issue #15): every loop over segments, fields,
 * repetitions and components is bounded by them, whatever the sender put in. A message over a
 * bound is refused (AR) with an ERR at the first place it was exceeded; it is never truncated.
 */
export interface Hl7ParseLimits {
  maxSegments: number;
  maxFieldsPerSegment: number;
  maxRepetitions: number;
  maxComponents: number;
}

export const DEFAULT_HL7_PARSE_LIMITS: Hl7ParseLimits = {
  maxSegments: 5_000,
  maxFieldsPerSegment: 500,
  maxRepetitions: 1_000,
  maxComponents: 100,
};

/** Where and how a message exceeded an Hl7ParseLimits bound. */
export interface Hl7LimitViolation {
  kind: 'segments' | 'fields' | 'repetitions' | 'components';
  /** e.g. `PID-3`, `NTE[4990]-1` (the first segment over the bound) */
  location: string;
  message: string;
}

/** A parsed message: segments, delimiters, charset, and the quirks tolerated on the way. */
export class Hl7Message {
  readonly segments: Hl7Segment[] = [];
  /** Bounds exceeded (at most one per kind); the structure check refuses such a message. */
  readonly limitViolations: Hl7LimitViolation[] = [];
  /** @internal shared with segments so that unescaping can record quirks. */
  readonly quirkCollector: QuirkCollector;

  constructor(
    readonly delimiters: Hl7Delimiters,
    /** WHATWG label the bytes were decoded with. */
    readonly encoding: string,
    /** MSH-18 as received ('' when absent). */
    readonly declaredCharset: string,
    readonly charsetKnown: boolean,
    /** The decoded segment lines (joined into `text` only when asked for). */
    private readonly lines: readonly string[],
    quirks: QuirkCollector,
  ) {
    this.quirkCollector = quirks;
  }

  private joined?: string;
  /**
   * The decoded text, segment separators normalised to CR. Built on first use: the ingest path
   * never needs it, and a 10 MB message would otherwise be held once more.
   */
  get text(): string {
    this.joined ??= this.lines.join('\r');
    return this.joined;
  }

  get quirks(): readonly Hl7Quirk[] {
    return this.quirkCollector.quirks;
  }

  get msh(): Hl7Segment {
    return this.segments[0];
  }

  get messageType(): Hl7MessageType {
    return {
      code: this.msh.value(9, 1, 1) ?? '',
      trigger: this.msh.value(9, 1, 2) ?? '',
      structure: this.msh.value(9, 1, 3),
    };
  }

  get controlId(): string {
    return this.msh.value(10) ?? '';
  }

  /** MSH-12.1, e.g. `2.5.1`. */
  get version(): string {
    return this.msh.value(12) ?? '';
  }

  /** MSH-11.1, table 0103 (P production, T training, D debugging). */
  get processingId(): string {
    return this.msh.value(11) ?? '';
  }

  /**
   * Key for duplicate detection: the same sender (MSH-3 sending application, MSH-4 sending
   * facility) never reuses a control ID (MSH-10, v2.5.1 section 2.15.9.10) for another message.
   */
  get duplicateKey(): string {
    return [this.msh.rawField(3), this.msh.rawField(4), this.controlId].join('|');
  }

  segment(id: string, ordinal = 1): Hl7Segment | undefined {
    return this.index().get(id)?.[ordinal - 1];
  }

  segmentsById(id: string): Hl7Segment[] {
    return [...(this.index().get(id) ?? [])];
  }

  /** Segments by ID, built once the parse is complete (lookups by ordinal in O(1)). */
  private byId?: { count: number; map: Map<string, Hl7Segment[]> };
  private index(): Map<string, Hl7Segment[]> {
    if (this.byId?.count !== this.segments.length) {
      const map = new Map<string, Hl7Segment[]>();
      for (const seg of this.segments) {
        const list = map.get(seg.id);
        if (list) list.push(seg);
        else map.set(seg.id, [seg]);
      }
      this.byId = { count: this.segments.length, map };
    }
    return this.byId.map;
  }

  /** Value at a location such as `PID-3[2].4` or `ORC[2]-1` (see Hl7Location). */
  get(location: string | Hl7Location): string | undefined {
    const loc = typeof location === 'string' ? parseLocation(location) : location;
    const seg = this.segment(loc.segment, loc.segmentOrdinal ?? 1);
    return seg?.value(loc.field, loc.repetition ?? 1, loc.component ?? 1, loc.subcomponent ?? 1);
  }

  /** The value at a location in every repetition of its field (empty repetitions skipped). */
  getAll(location: string | Hl7Location): string[] {
    const loc = typeof location === 'string' ? parseLocation(location) : location;
    const seg = this.segment(loc.segment, loc.segmentOrdinal ?? 1);
    if (!seg) return [];
    const out: string[] = [];
    for (let r = 1; r <= seg.repetitionCount(loc.field); r += 1) {
      const v = seg.value(loc.field, r, loc.component ?? 1, loc.subcomponent ?? 1);
      if (v !== undefined) out.push(v);
    }
    return out;
  }

  /** ORC/OBR order groups in message order (see Hl7OrderGroup). */
  orderGroups(): Hl7OrderGroup[] {
    const groups: Hl7Segment[][] = [];
    let current: Hl7Segment[] | undefined;
    for (const seg of this.segments) {
      if (seg.id === 'ORC') {
        current = [seg];
        groups.push(current);
      } else if (seg.id === 'OBR') {
        if (!current || current.some((s) => s.id === 'OBR')) {
          this.quirkCollector.add(
            'obr-without-orc',
            `${seg.locationOf(1).split('-')[0]} has no ORC`,
          );
          current = [seg];
          groups.push(current);
        } else {
          current.push(seg);
        }
      } else if (current) {
        current.push(seg);
      }
    }
    return groups.map((segs, i) => new Hl7OrderGroup(i + 1, segs));
  }
}

function readDelimiters(mshLine: string, quirks: QuirkCollector): Hl7Delimiters {
  const field = mshLine[3];
  if (field === undefined || !DELIMITER_CHAR.test(field)) {
    throw new Hl7Error('HL7_BAD_ENCODING_CHARACTERS', 'MSH-1 field separator missing or invalid');
  }
  const end = mshLine.indexOf(field, 4);
  const enc = end === -1 ? mshLine.slice(4) : mshLine.slice(4, end);
  // MSH-2 (v2.5.1 §2.15.9.2; v2.7 added a fifth, the truncation character): four or five
  // distinct printable non-alphanumeric characters, none equal to the field separator.
  if (
    enc.length < 4 ||
    enc.length > 5 ||
    ![...enc].every((c) => DELIMITER_CHAR.test(c)) ||
    new Set(enc + field).size !== enc.length + 1
  ) {
    throw new Hl7Error(
      'HL7_BAD_ENCODING_CHARACTERS',
      'MSH-2 encoding characters invalid: four or five distinct characters, no letter, digit, space or control character',
    );
  }
  const delimiters: Hl7Delimiters = {
    field,
    component: enc[0],
    repetition: enc[1],
    escape: enc[2],
    subcomponent: enc[3],
  };
  if (enc.length >= 5) {
    // v2.7 added the truncation character as a fifth encoding character (MSH-2).
    delimiters.truncation = enc[4];
    quirks.add('truncation-character', `MSH-2 "${enc}"`);
  }
  const std = DEFAULT_DELIMITERS;
  if (
    field !== std.field ||
    delimiters.component !== std.component ||
    delimiters.repetition !== std.repetition ||
    delimiters.escape !== std.escape ||
    delimiters.subcomponent !== std.subcomponent
  ) {
    quirks.add('custom-encoding-characters', `MSH-1 "${field}" MSH-2 "${enc}"`);
  }
  return delimiters;
}

/**
 * Counts fields, repetitions and components of one segment against the limits, in one pass
 * over its characters (no splitting): linear in the segment's length.
 */
function checkFieldShape(
  fields: readonly string[],
  id: string,
  where: string,
  delimiters: Hl7Delimiters,
  limits: Hl7ParseLimits,
  violation: (kind: Hl7LimitViolation['kind'], location: string, message: string) => void,
): void {
  if (fields.length - 1 > limits.maxFieldsPerSegment) {
    violation(
      'fields',
      `${where}-${limits.maxFieldsPerSegment + 1}`,
      `${where} has ${fields.length - 1} fields; at most ${limits.maxFieldsPerSegment} are accepted (HL7_MAX_FIELDS)`,
    );
  }
  const first = id === 'MSH' ? 3 : 1;
  const { repetition, component } = delimiters;
  for (let f = first; f < fields.length; f += 1) {
    const text = fields[f];
    // A field shorter than the bound cannot exceed it.
    if (text.length < Math.min(limits.maxRepetitions, limits.maxComponents)) continue;
    let reps = 1;
    let comps = 1;
    let maxComps = 1;
    for (let i = 0; i < text.length; i += 1) {
      const ch = text[i];
      if (ch === repetition) {
        reps += 1;
        comps = 1;
      } else if (ch === component) {
        comps += 1;
        if (comps > maxComps) maxComps = comps;
      }
    }
    if (reps > limits.maxRepetitions) {
      violation(
        'repetitions',
        `${where}-${f}`,
        `${where}-${f} has ${reps} repetitions; at most ${limits.maxRepetitions} are accepted (HL7_MAX_REPETITIONS)`,
      );
    }
    if (maxComps > limits.maxComponents) {
      violation(
        'components',
        `${where}-${f}`,
        `${where}-${f} has ${maxComps} components in one repetition; at most ${limits.maxComponents} are accepted (HL7_MAX_COMPONENTS)`,
      );
    }
  }
}

/** Splits into segment lines, tolerating CR, LF, CRLF and mixes; records what it saw. */
function splitSegments(text: string, quirks: QuirkCollector): string[] {
  const crlf = (text.match(/\r\n/g) ?? []).length;
  const cr = (text.match(/\r(?!\n)/g) ?? []).length;
  const lf = (text.match(/(?<!\r)\n/g) ?? []).length;
  const kinds = [crlf > 0, cr > 0, lf > 0].filter(Boolean).length;
  if (kinds > 1) quirks.add('mixed-separators', `CRLF ${crlf}, CR ${cr}, LF ${lf}`);
  else if (crlf > 0) quirks.add('crlf-separators', `${crlf} segment separators are CRLF`);
  else if (lf > 0) quirks.add('lf-separators', `${lf} segment separators are LF`);

  const lines = text.split(/\r\n|\r|\n/);
  const out: string[] = [];
  let blanks = 0;
  for (const line of lines) {
    if (line.trim() === '') {
      blanks += 1;
      continue;
    }
    out.push(line);
  }
  // A trailing separator after the last segment is normal; only inner blank lines are a quirk.
  const trailing = lines.length > 0 && lines[lines.length - 1].trim() === '' ? 1 : 0;
  if (blanks - trailing > 0)
    quirks.add('blank-lines', `${blanks - trailing} blank line(s) skipped`);
  return out;
}

/**
 * Parses one HL7v2 message from its raw bytes (the MLLP payload or a file): detects the BOM
 * and MSH-18 charset, decodes accordingly, and splits segments tolerantly. Throws Hl7Error only
 * when no MSH header can be found or its encoding characters are unusable; everything else is
 * tolerated and recorded in `quirks`.
 */
export function parseHl7(
  input: Buffer | string,
  limits: Hl7ParseLimits = DEFAULT_HL7_PARSE_LIMITS,
): Hl7Message {
  const quirks = new QuirkCollector();
  let text: string;
  let encoding = 'utf-8';
  let declared: string;
  let known: boolean;
  if (typeof input === 'string') {
    text = input;
    if (text.charCodeAt(0) === 0xfeff) {
      quirks.add('bom', 'UTF-8 byte order mark before MSH');
      text = text.slice(1);
    }
    // Already decoded by the caller: keep MSH-18 for the answer, and say if it is unknown.
    declared = readDeclaredCharset(Buffer.from(text.slice(0, 4096), 'utf8'));
    known = declared === '' || charsetLabel(declared) !== undefined;
    if (!known) quirks.add('unknown-charset', `MSH-18 "${declared}" not supported`);
  } else {
    let bytes = input;
    if (hasUtf8Bom(bytes)) {
      quirks.add('bom', 'UTF-8 byte order mark before MSH');
      bytes = bytes.subarray(3);
    }
    const decision = decideCharset(bytes, quirks);
    encoding = decision.encoding;
    declared = decision.declared;
    known = decision.known;
    text = decodeBytes(bytes, encoding);
  }
  if (text.trim() === '') throw new Hl7Error('HL7_EMPTY_MESSAGE', 'Empty HL7 message');

  const lines = splitSegments(text, quirks);
  const first = lines[0] ?? '';
  const mshAt = first.indexOf('MSH');
  if (mshAt === -1) throw new Hl7Error('HL7_MISSING_MSH', 'Message does not start with MSH');
  if (mshAt > 0) {
    if (first.slice(0, mshAt).trim() !== '') {
      throw new Hl7Error('HL7_MISSING_MSH', 'Message does not start with MSH');
    }
    quirks.add('leading-whitespace', 'whitespace before MSH');
    lines[0] = first.slice(mshAt);
  }
  const delimiters = readDelimiters(lines[0], quirks);
  const message = new Hl7Message(delimiters, encoding, declared, known, lines, quirks);

  const counts = new Map<string, number>();
  let position = 0;
  // The fields of the last segment, kept mutable so that a stray line joins it in place
  // (copying the field list per joined line was O(lines × fields)).
  let lastFields: string[] | undefined;
  const violated = new Set<string>();
  const violation = (kind: Hl7LimitViolation['kind'], location: string, text: string) => {
    if (violated.has(kind)) return;
    violated.add(kind);
    message.limitViolations.push({ kind, location, message: text });
  };
  for (let line of lines) {
    const trimmed = line.replace(/[ \t]+$/, '');
    if (trimmed !== line) {
      quirks.add('trailing-whitespace', `${line.slice(0, 3)} segment ends with whitespace`);
      line = trimmed;
    }
    const id = line.slice(0, 3);
    if (!SEGMENT_ID.test(id) || (line.length > 3 && line[3] !== delimiters.field)) {
      // Not a segment: most often an unescaped line break inside a text field. Keep the text
      // with the previous segment rather than lose it.
      const prev = message.segments[message.segments.length - 1];
      quirks.add('mixed-separators', `line break inside ${prev.id} field joined`);
      if (lastFields) lastFields[lastFields.length - 1] += `\n${line}`;
      continue;
    }
    if (line.endsWith(delimiters.field) && !(id === 'MSH' && line.length <= 9)) {
      quirks.add('trailing-field-separator', `${id} segment ends with "${delimiters.field}"`);
    }
    let fields: string[];
    if (id === 'MSH') {
      const rest = line.slice(4);
      const parts = rest.split(delimiters.field);
      // parts[0] is MSH-2; MSH-1 is the separator itself.
      fields = ['MSH', delimiters.field, ...parts];
    } else {
      fields = line.split(delimiters.field);
    }
    if (id.startsWith('Z')) quirks.add('z-segment', `${id} segment`);
    const ordinal = (counts.get(id) ?? 0) + 1;
    counts.set(id, ordinal);
    position += 1;
    const where = ordinal > 1 ? `${id}[${ordinal}]` : id;
    if (position > limits.maxSegments) {
      // Refused as a whole; the segments beyond the bound are not even kept in memory.
      violation(
        'segments',
        `${where}-1`,
        `the message has more than ${limits.maxSegments} segments (HL7_MAX_SEGMENTS)`,
      );
      lastFields = undefined;
      continue;
    }
    checkFieldShape(fields, id, where, delimiters, limits, violation);
    lastFields = fields;
    message.segments.push(new Hl7Segment(id, fields, ordinal, position, message));
  }
  if (message.segments[0]?.id !== 'MSH') {
    throw new Hl7Error('HL7_MISSING_MSH', 'Message does not start with MSH');
  }
  return message;
}

/**
 * MSH-10 of a message whose header could not be parsed (e.g. unusable MSH-2), found by the
 * field separator alone, so that even an AR for such a message echoes the control ID in
 * MSA-2 (v2.5.1 §2.9.2) and the sender can match it. Only the first line is read, and only
 * printable ASCII up to ST's 199 characters is returned; undefined when not found.
 */
export function salvageControlId(raw: Buffer | string): string | undefined {
  const head = (
    typeof raw === 'string' ? raw.slice(0, 4096) : raw.subarray(0, 4096).toString('latin1')
  )
    .replace(/^\uFEFF|^\u00EF\u00BB\u00BF/, '')
    .trimStart();
  if (!head.startsWith('MSH')) return undefined;
  const separator = head[3];
  if (separator === undefined || !DELIMITER_CHAR.test(separator)) return undefined;
  const line = head.split(/[\r\n]/, 1)[0];
  const value = line.split(separator)[9];
  if (!value || !/^[\x20-\x7e]+$/.test(value)) return undefined;
  return value.slice(0, 199);
}
