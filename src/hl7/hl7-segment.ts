import { unescapeValue } from './hl7-escape';
import { formattingModeOf, type FormattingMode } from './hl7-formatting';
import { formatLocation } from './hl7-location';
import { quotedCode } from './hl7-quoted';
import type { Hl7Message } from './hl7-message';

/** The HL7 explicit null (v2.5.1 chapter 2, null values): the receiver shall delete the value. */
export const HL7_EXPLICIT_NULL = '""';

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
      encoding: this.message.escapeEncoding,
      quirks: this.message.quirkCollector,
      location: this.locationOf(field, repetition, component, subcomponent),
      formatting: this.formattingOf(field),
    });
  }

  /**
   * A coded value (an ID/IS of an HL7 table, a CWE's code: MSH-9, -11, -12, -15, -16, ORC-1,
   * ORC-5, a priority) without the spaces around it: a fixed-width engine pads `NW` to `NW `
   * and a table value holds no space, so the code is read and the padding recorded (quirk
   * `padded-code`, naming the place). The one place such fields are trimmed; a value read with
   * `value()` (names, text, identifiers by their own rule) keeps its spaces. Before, `ORC|NW |`
   * was AE 103 and MSH-12 `2.5.1 ` AR 203.
   */
  code(field: number, repetition = 1, component = 1, subcomponent = 1): string | undefined {
    const sent = this.value(field, repetition, component, subcomponent);
    if (sent === undefined) return undefined;
    // by index, not /^ +| +$/: that regex is quadratic on a long run of inner spaces
    let start = 0;
    let end = sent.length;
    while (start < end && sent.charCodeAt(start) === 0x20) start += 1;
    while (end > start && sent.charCodeAt(end - 1) === 0x20) end -= 1;
    const code = sent.slice(start, end);
    if (code !== sent) {
      this.message.quirkCollector.add(
        'padded-code',
        `${this.locationOf(field, ...leafPath(repetition, component, subcomponent))} "${quotedCode(sent)}" read as ${quotedCode(code)}`,
      );
    }
    return code === '' ? undefined : code;
  }

  /** What a formatting command means in this field (one rule by data type, hl7-formatting.ts). */
  private formattingOf(field: number): FormattingMode {
    return formattingModeOf(this.id, field, this.id === 'OBX' ? this.rawField(2) : undefined);
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

  /**
   * One repetition whole: every component as its unescaped subcomponents (index 0 = component
   * 1), for echoing a composite as the sender wrote it, e.g. an HD in MSH-3 `RIS^1.2.3^ISO` or,
   * as some senders write it, `RIS&1.2.3&ISO`; an explicit null stays `""`. [] when empty.
   */
  structure(field: number, repetition = 1): string[][] {
    const rep = this.rawRepetition(field, repetition);
    if (rep === '') return [];
    const d = this.message.delimiters;
    const leaf = (raw: string): string =>
      raw.includes(d.escape)
        ? unescapeValue(raw, {
            delimiters: d,
            encoding: this.message.escapeEncoding,
            formatting: this.formattingOf(field),
          })
        : raw;
    return this.componentsOf(field, repetition, rep).map((c) => c.split(d.subcomponent).map(leaf));
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
    // walked, not split: one read of CX-4.2 does not make an array of every subcomponent
    const sep = this.message.delimiters.subcomponent;
    let start = 0;
    for (let s = 1; s < subcomponent; s += 1) {
      const at = comp.indexOf(sep, start);
      if (at === -1) return '';
      start = at + 1;
    }
    const end = comp.indexOf(sep, start);
    return end === -1 ? comp.slice(start) : comp.slice(start, end);
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

/** A leaf's repetition, component and subcomponent as a location names them: none that is 1 after the last that is not. */
function leafPath(...path: number[]): (number | undefined)[] {
  const named: (number | undefined)[] = [...path];
  for (let i = named.length - 1; i >= 0 && named[i] === 1; i -= 1) named[i] = undefined;
  return named;
}
