import {
  charsetLabel,
  decideCharset,
  decodeBytes,
  hasUtf8Bom,
  readDeclaredCharset,
} from './hl7-charset';
import { Hl7Error } from './hl7.error';
import { Hl7Delimiters } from './hl7-escape';
import { Hl7Location, parseLocation } from './hl7-location';
import { Hl7Quirk, QuirkCollector } from './hl7-quirk';
import {
  checkFieldShape,
  DEFAULT_HL7_PARSE_LIMITS,
  Hl7LimitViolation,
  Hl7ParseLimits,
} from './hl7-parse-limits';
import { Hl7OrderGroup, Hl7Segment } from './hl7-segment';
import { readDelimiters, splitSegments } from './hl7-separators';
import { withoutTrailing } from '../common/padding';

// The segment model, the parse bounds and the separator reading live in their own files;
// re-exported here so that callers keep importing them from the message.
export { HL7_EXPLICIT_NULL, Hl7OrderGroup, Hl7Segment } from './hl7-segment';
export { DEFAULT_HL7_PARSE_LIMITS } from './hl7-parse-limits';
export type { Hl7LimitViolation, Hl7ParseLimits } from './hl7-parse-limits';
export { salvageControlId } from './hl7-separators';

const SEGMENT_ID = /^[A-Z][A-Z0-9]{2}$/;

/**
 * A line that has a segment's shape: three letters or digits, then the field separator (or
 * nothing). Such a line is never read as a line break inside the field before it (v2.5.1
 * §2.5.2: a segment begins with its three-character ID and the field separator).
 */
const SEGMENT_SHAPE = /^[A-Za-z0-9]{3}$/;

/**
 * The segment IDs a line written in lowercase or mixed case (`pv1|`, `Obr|`: a hand-edited
 * message, a transform that lowercased a line) is read as: those of the messages taken here
 * (ORM_O01, OMI_O23, ADT_A01 for A08, ADT_A39 for A40; v2.5.1 chapters 2-4, 6, 7) and the
 * IHE RAD-4 ZDS. Any other lowercase ID is refused: text such as `wks|` after a wrapped line is
 * no segment, and read as one it would take the fields after it with it, unseen.
 */
const LOWERCASE_READABLE_IDS = new Set([
  'MSH',
  'EVN',
  'PID',
  'PD1',
  'PV1',
  'PV2',
  'NK1',
  'MRG',
  'ROL',
  'PRT',
  'AL1',
  'DG1',
  'DRG',
  'PR1',
  'GT1',
  'IN1',
  'IN2',
  'IN3',
  'ACC',
  'UB1',
  'UB2',
  'ORC',
  'OBR',
  'TQ1',
  'TQ2',
  'IPC',
  'NTE',
  'OBX',
  'CTD',
  'CTI',
  'BLG',
  'SFT',
  'UAC',
  'ZDS',
]);

/** Segments that carry an order's study identity (IHE RAD-4: ZDS-1, IPC-1/IPC-3). */
const STUDY_SEGMENT_IDS = new Set(['ZDS', 'IPC']);

export interface Hl7MessageType {
  code: string;
  trigger: string;
  structure?: string;
}

/** A parsed message: segments, delimiters, charset, and the quirks tolerated on the way. */
export class Hl7Message {
  readonly segments: Hl7Segment[] = [];
  /** Bounds exceeded (at most one per kind); the structure check refuses such a message. */
  readonly limitViolations: Hl7LimitViolation[] = [];
  /** @internal shared with segments so that unescaping can record quirks. */
  readonly quirkCollector: QuirkCollector;
  /**
   * WHATWG label `\Xhh\` hexadecimal data is decoded with: the message charset, except when
   * an engine re-encoded the bytes to UTF-8 under the sender's MSH-18 (its escapes still mean
   * bytes of the charset MSH-18 names: `Ger\XE4\t` is `Gerät` in 8859/1).
   */
  escapeEncoding: string;

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
    this.escapeEncoding = encoding;
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
      code: this.msh.code(9, 1, 1) ?? '',
      trigger: this.msh.code(9, 1, 2) ?? '',
      structure: this.msh.code(9, 1, 3),
    };
  }

  /**
   * MSH-10, the message control ID (ST): its value, or, when the sender wrote a component,
   * repetition or subcomponent separator in it (`20240318^0001`, a RIS numbering by day and
   * sequence), the whole field as written: an ST has no parts, our MSA-2 echoes it whole, and
   * it keys the sender's duplicates. Before, its first part alone was the ID, so
   * `20240318^0002` was refused AR 205 as a reuse of `20240318^0001` (and a resend of it
   * would have been answered with the other message's ACK).
   */
  get controlId(): string {
    const raw = this.msh.rawField(10);
    const d = this.delimiters;
    return [d.component, d.repetition, d.subcomponent].some((c) => raw.includes(c))
      ? raw
      : (this.msh.value(10) ?? '');
  }

  /** MSH-12.1, e.g. `2.5.1`. */
  get version(): string {
    return this.msh.code(12) ?? '';
  }

  /**
   * The sender's UTC offset as MSH-7 states it (`+01:00`), undefined when MSH-7 carries none.
   * A TS/DTM without an offset is in the sender's local time zone (v2.5.1 chapter 2A, DTM; the
   * same rule for TS since v2.3), and MSH-7 is the timestamp the standard asks to carry the
   * offset (§2.15.9.7: "strongly recommended"), so it says which zone that is, also across a
   * daylight-saving change that a fixed configured offset gets wrong half of the year.
   */
  get headerUtcOffset(): string | undefined {
    const m = /^\d{4,14}(?:\.\d{1,4})?([+-])(\d{2})(\d{2})$/.exec(this.msh.value(7) ?? '');
    if (!m) return undefined;
    const minutes = Number(m[2]) * 60 + Number(m[3]);
    if (Number(m[3]) > 59 || minutes > (m[1] === '-' ? 12 * 60 : 14 * 60)) return undefined;
    return `${m[1]}${m[2]}:${m[3]}`;
  }

  /** MSH-11.1, table 0103 (P production, T training, D debugging). */
  get processingId(): string {
    return this.msh.code(11) ?? '';
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

  /**
   * Segments that identify an order's study (ZDS, IPC) found before the first ORC/OBR, in no
   * order group, when the message has more than one order (see orderGroups): not read.
   */
  get unplacedStudySegments(): readonly Hl7Segment[] {
    this.orderGroups();
    return this.unplaced;
  }
  private unplaced: Hl7Segment[] = [];

  /**
   * ORC/OBR order groups in message order (see Hl7OrderGroup). A ZDS or IPC written before the
   * first ORC (a sender that puts its Z-segment after PID/PV1) is in no group: with one order
   * in the message it is that order's, and read as such (quirk `segment-outside-order`); with
   * more it belongs to none and is listed in unplacedStudySegments. Before, the Study Instance
   * UID of such a ZDS was dropped without a word.
   */
  orderGroups(): Hl7OrderGroup[] {
    const groups: Hl7Segment[][] = [];
    const leading: Hl7Segment[] = [];
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
      } else if (STUDY_SEGMENT_IDS.has(seg.id)) {
        leading.push(seg);
      }
    }
    this.unplaced = [];
    if (leading.length > 0) {
      const where = leading.map((l) => l.locationOf(1).replace(/-1$/, '')).join(', ');
      if (groups.length === 1) {
        groups[0].push(...leading);
        this.quirkCollector.add(
          'segment-outside-order',
          `${where} before the first ORC: read as the message's one order's`,
        );
      } else {
        this.unplaced = leading;
        this.quirkCollector.add(
          'segment-outside-order',
          `${where} before the first ORC: in no order group; not read`,
        );
      }
    }
    return groups.map((segs, i) => new Hl7OrderGroup(i + 1, segs));
  }
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
  let escapeEncoding: string | undefined;
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
    escapeEncoding = decision.escapeEncoding;
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
  if (escapeEncoding !== undefined) message.escapeEncoding = escapeEncoding;

  const counts = new Map<string, number>();
  let position = 0;
  const violated = new Set<string>();
  const violation = (
    kind: Hl7LimitViolation['kind'],
    location: string,
    text: string,
    brief: string,
  ) => {
    if (violated.has(kind)) return;
    violated.add(kind);
    message.limitViolations.push({ kind, location, message: text, brief });
  };
  // The segment being read: its first line and the lines that continue it (a line that does
  // not start a segment is an unescaped line break inside one of its fields). It is split into
  // fields, and checked against the bounds, once it is whole.
  let pending: { id: string; text: string; fields: number } | undefined;
  const flush = () => {
    if (pending === undefined) return;
    const { id, text: line } = pending;
    pending = undefined;
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
        `Send at most ${limits.maxSegments} segments in one message (HL7_MAX_SEGMENTS)`,
      );
      return;
    }
    checkFieldShape(fields, id, where, delimiters, limits, violation);
    message.segments.push(new Hl7Segment(id, fields, ordinal, position, message));
  };
  const separators = (line: string) => {
    let n = 0;
    for (
      let i = line.indexOf(delimiters.field);
      i !== -1;
      i = line.indexOf(delimiters.field, i + 1)
    )
      n += 1;
    return n;
  };
  for (let n = 0; n < lines.length; n += 1) {
    let line = lines[n];
    const trimmed = withoutTrailing(line, ' \t');
    if (trimmed !== line) {
      quirks.add('trailing-whitespace', `${line.slice(0, 3)} segment ends with whitespace`);
      line = trimmed;
    }
    if (n > 0 && (line.startsWith(' ') || line.startsWith('\t'))) {
      // An indented segment (a message built from an indented template or pasted from a
      // document): whitespace before a segment ID read here, as before MSH. Before, the line
      // was a line break inside the field before it, and PID, ORC and OBR became MSH text.
      const start = line.trimStart();
      const indented = start.slice(0, 3);
      if (
        SEGMENT_SHAPE.test(indented) &&
        (start.length === 3 || start[3] === delimiters.field) &&
        (LOWERCASE_READABLE_IDS.has(indented.toUpperCase()) || SEGMENT_ID.test(indented))
      ) {
        quirks.add('leading-whitespace', `line ${n + 1}: whitespace before ${indented}`);
        line = start;
      }
    }
    let id = line.slice(0, 3);
    const shaped = SEGMENT_SHAPE.test(id) && (line.length === 3 || line[3] === delimiters.field);
    if (shaped && !SEGMENT_ID.test(id)) {
      // Before, such a line was joined to the field before it: `pv1|...` became part of PID-18.
      const upper = id.toUpperCase();
      const starts = `line ${n + 1} starts "${id}${delimiters.field}"`;
      if (!LOWERCASE_READABLE_IDS.has(upper)) {
        if (!violated.has('segment-id')) {
          violated.add('segment-id');
          message.limitViolations.push({
            kind: 'segment-id',
            message: `${starts}, shaped like a segment but no segment ID read here; it cannot be text of the field before it: send it as a segment, or escape its field separator`,
            brief: `Escape the ${delimiters.field} or send a segment: ${starts}, no segment ID`,
          });
        }
        continue;
      }
      quirks.add('lowercase-segment-id', `${starts}: read as the ${upper} segment`);
      line = upper + line.slice(3);
      id = upper;
    }
    if (!shaped) {
      // Not a segment: most often an unescaped line break inside a text field (an EHR's
      // multi-line OBR-13). The text after the break continues that field, and the fields
      // after it are the segment's next fields: read as one field, they were lost (OBR-16,
      // OBR-18 accession, OBR-24 after a break in OBR-13) and the text held field separators.
      if (pending === undefined) continue;
      const fieldNo = pending.id === 'MSH' ? pending.fields + 1 : pending.fields;
      quirks.add('mixed-separators', `line break inside ${pending.id}-${fieldNo} joined`);
      pending.text += `\n${line}`;
      pending.fields += separators(line);
      continue;
    }
    flush();
    pending = { id, text: line, fields: separators(line) };
  }
  flush();
  if (message.segments[0]?.id !== 'MSH') {
    throw new Hl7Error('HL7_MISSING_MSH', 'Message does not start with MSH');
  }
  return message;
}
