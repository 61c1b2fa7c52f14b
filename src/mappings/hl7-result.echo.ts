import { hl7DateOf } from './hl7-value.dates';

/**
 * Fields of the order's PID and PV1 that our result echoes but the intake does not read, by
 * their HL7 v2.5.1 data type (chapter 3: PID §3.4.2, PV1 §3.4.3). The echo is the sender's own
 * text, so nothing was checked there: a value that is not valid for the field's type is
 * written empty, never altered into another one (as PID-7 is, hl7-result.segments.ts). PID-7
 * and PID-8, which the order model holds, are written from it.
 */
export type EchoedType =
  /** TS (DTM ^ degree of precision) or DTM: a date/time with a real date, time and offset. */
  | 'TS'
  /** DT: a date (YYYY[MM[DD]]). */
  | 'DT'
  /** ID of table 0136: `Y` or `N`. */
  | 'YN';

export const ECHOED_FIELD_TYPES: Readonly<Record<string, Readonly<Record<number, EchoedType>>>> = {
  PID: {
    24: 'YN', // multiple birth indicator
    29: 'TS', // patient death date and time
    30: 'YN', // patient death indicator
    31: 'YN', // identity unknown indicator
    33: 'TS', // last update date/time
  },
  PV1: {
    25: 'DT', // contract effective date (repeating)
    29: 'DT', // transfer to bad debt date
    35: 'DT', // delete account date
    44: 'TS', // admit date/time
    45: 'TS', // discharge date/time (repeating in v2.5)
  },
};

/** Whether one repetition (raw, our delimiters) is valid for `type`; `""` (null) always is. */
function validFor(type: EchoedType, repetition: string): boolean {
  if (repetition === '' || repetition === '""') return true;
  const [first = '', ...rest] = repetition.split('^');
  switch (type) {
    case 'TS':
      // the degree of precision (TS.2, table 0529) is one letter when present
      return (
        hl7DateOf(first) !== undefined && rest.length <= 1 && /^[YLDHMS]?$/.test(rest[0] ?? '')
      );
    case 'DT':
      return (
        rest.length === 0 && /^\d{4}(\d{2}(\d{2})?)?$/.test(first) && hl7DateOf(first) !== undefined
      );
    case 'YN':
      return rest.length === 0 && (first === 'Y' || first === 'N');
  }
  return type satisfies never;
}

/**
 * An echoed segment (raw, our delimiters) with every field of ECHOED_FIELD_TYPES that is not
 * valid for its type written empty (all its repetitions: one bad repetition is not the value
 * the sender meant). Other fields as they are.
 */
export function withValidEchoes(segment: string): string {
  const fields = segment.split('|');
  const types = ECHOED_FIELD_TYPES[fields[0] ?? ''];
  if (!types) return segment;
  let changed = false;
  for (const [at, type] of Object.entries(types)) {
    const n = Number(at);
    const value = fields[n];
    if (value === undefined || value === '') continue;
    if (value.split('~').every((r) => validFor(type, r))) continue;
    fields[n] = '';
    changed = true;
  }
  return changed ? fields.join('|') : segment;
}
