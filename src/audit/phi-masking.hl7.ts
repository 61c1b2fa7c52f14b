import { maskIdentifier, maskValue, type MaskRule } from './phi-masking.values';

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
 * Person names (XPN, v2.5.1 2A.3.88) among the `name` fields: their code components are no PHI
 * and stay readable, so the analyst sees which repetition is the legal (L), birth (B) or
 * maiden (M) name: 7 name type code (table 0200), 8 name representation code (table 4000),
 * 11 name assembly order (table 0444), when they hold a value of their table (a sender's
 * text there is masked). Before, `L` was shown `L***`. Every other component (the names, the
 * context text, the validity dates, the professional suffix) goes to its initial.
 */
const XPN_CODE_COMPONENTS: ReadonlyMap<number, ReadonlySet<string>> = new Map([
  [
    7,
    new Set(
      [
        'A',
        'B',
        'BAD',
        'C',
        'D',
        'F',
        'I',
        'K',
        'L',
        'M',
        'N',
        'NAV',
        'NB',
        'P',
        'R',
        'S',
        'T',
      ].concat(['TEMP', 'U']),
    ),
  ],
  [8, new Set(['A', 'I', 'P'])],
  [11, new Set(['F', 'G'])],
]);
export const HL7_XPN_FIELDS: Readonly<Record<string, ReadonlySet<number>>> = {
  PID: new Set([5, 6, 9]),
  NK1: new Set([2, 30]),
  MRG: new Set([7]),
  GT1: new Set([3]),
  IN1: new Set([16]),
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
  // MSA-3 Text Message, ERR-7 Diagnostic Information and ERR-8 User Message are free text: a
  // RIS's ACK may quote the patient there. Codes, ids and the error location stay readable.
  MSA: new Set([1, 2, 4, 5, 6, 7, 8]),
  ERR: new Set([1, 2, 3, 4, 5, 6, 9, 10, 11, 12]),
  EVN: new Set([1, 2, 3, 4, 6, 7]),
  PID: new Set([1, 8, 24, 30]),
  // Attending, referring, consulting and admitting doctors are clinicians, not the patient.
  PV1: new Set([1, 2, 3, 4, 7, 8, 9, 10, 17, 18, 39]),
  NK1: new Set([1, 3, 7]),
  ORC: new Set([...range(1, 21), 29, 30, 31]),
  OBR: new Set([...range(1, 12), ...range(14, 18), ...range(22, 30), ...range(32, 50)]),
  TQ1: new Set(range(1, 14)),
  IPC: new Set(range(1, 11)),
  // IHE RAD TF-2 ZDS-1 (SWF ORM^O01): the Study Instance UID, an order identifier as IPC-3 is;
  // the only Z-segment field shown (before, hidden as `***^***^***^***` beside the order's UID).
  ZDS: new Set([1]),
  NTE: new Set([1, 2, 4]),
  DG1: new Set([1, 2, 3, 6]),
  OBX: new Set([1, 2, 3, 4, 6, 11, 14]),
  MRG: new Set<number>(),
};

/**
 * Coded fields that may carry free text (CE/CWE, v2.5.1 chapter 2A): as in the mapped view
 * (reasonForStudy[n].code and .system shown, the text hidden), the identifier and coding
 * system components are shown and the text components hidden. OBR-31 Reason for Study, and
 * DG1-3 Diagnosis Code, the other source of reasonForStudy (before, its text was drawn whole
 * in the raw message while the mapped view hid it).
 */
const CE_CODE_COMPONENTS: ReadonlySet<number> = new Set([1, 3, 4, 6]);
export const HL7_CODED_FREE_TEXT: Readonly<
  Record<string, Readonly<Record<number, ReadonlySet<number>>>>
> = {
  OBR: { 31: CE_CODE_COMPONENTS },
  DG1: { 3: CE_CODE_COMPONENTS },
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
  /** Components (1-based) of each repetition shown when they hold one of these codes (an XPN's). */
  readable: ReadonlyMap<number, ReadonlySet<string>> = new Map(),
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
        .map((c, i) =>
          readable.get(i + 1)?.has(c)
            ? c
            : c
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
        const xpn = rule === 'name' && HL7_XPN_FIELDS[id]?.has(position);
        if (rule)
          parts[i] = maskHl7Field(parts[i]!, rule, d, xpn ? XPN_CODE_COMPONENTS : undefined);
        else if (coded) parts[i] = maskHl7Components(parts[i]!, coded, d);
        else if (!visible?.has(position)) parts[i] = maskHl7Field(parts[i]!, 'full', d);
      }
      return parts.join(d.field);
    })
    .join(eol);
}
