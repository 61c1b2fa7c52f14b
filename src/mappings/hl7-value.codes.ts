import { quotedCode } from '../hl7/hl7-quoted';
import type { AdministrativeSex, CodedConcept } from '../domain/order-request';
import {
  DICOM_MODALITIES,
  FREE_TEXT_PRIORITY,
  FREE_TEXT_SEX,
  ORDER_CONTROL_TO_ACTION,
  STATUS_CHANGE_TO_ACTION,
  TABLE_0038,
  TABLE_0119,
  TABLE_0119_ANSWERS,
  TABLE_0001_SEX,
  TABLE_0027_PRIORITY,
  TABLE_0074_TO_MODALITY,
} from './hl7-code.tables';
import { EMPTY, notMapped, ofCode, readComposite, refused, rep, storedAs } from './hl7-value.kit';
import type { LineageLine, TransformFn, TransformInput, TransformOutput } from './hl7-value.kit';

/** Codes: HL7 tables (hl7-code.tables.ts), DICOM modalities, CE/CWE coded elements. */

/** Table 0001 (administrative sex); free text tolerated and recorded. */
export const sex0001: TransformFn = ofCode((value, source, input) => {
  const table = TABLE_0001_SEX as Record<string, AdministrativeSex>;
  const coded = table[value];
  if (coded) return storedAs(source, value, coded, 'table 0001');
  // Table codes are case-sensitive (as MSH-9, MSH-11, ORC-1 are read): `m` is no table 0001
  // code. Tolerated as free text is, and recorded; before, it was upper-cased silently.
  const cased = table[value.toUpperCase()];
  if (cased) {
    input.quirks.add(
      'free-text-sex',
      `${source} "${value}" is not a table 0001 code: its codes are case-sensitive (${value.toUpperCase()})`,
    );
    return storedAs(source, value, cased, 'table 0001 code in another case (quirk)');
  }
  const free = FREE_TEXT_SEX[value.trim().toLowerCase()];
  input.quirks.add(
    'free-text-sex',
    `${source} "${free ?? 'unrecognised'}" is not a table 0001 code`,
  );
  return storedAs(source, value, free ?? 'unknown', 'free-text sex (quirk)');
});

/** The order controls acted on, as the answer names them (`NW, CA, …`). */
const TAKEN_CONTROLS = Object.keys(ORDER_CONTROL_TO_ACTION).join(', ');

/**
 * ORC-1 (table 0119) → action; unsupported codes are an error at ORC-1 (AE 103). Table codes
 * are case-sensitive: `nw` is not NW, and the answer says so.
 */
export const orderControl: TransformFn = ofCode((value, source, input) => {
  if (value === 'SC') {
    // ORC-5 of the same ORC: a status change to canceled/discontinued ends the order.
    const status = input.segment.code(5);
    const ended =
      status === undefined
        ? undefined
        : (STATUS_CHANGE_TO_ACTION as Record<string, string>)[status];
    if (ended) {
      return storedAs(source, value, ended, `table 0119 SC with ORC-5 ${status} (table 0038)`);
    }
    if (status !== undefined && !(TABLE_0038 as readonly string[]).includes(status)) {
      // A status outside table 0038 (`dc`: its codes are case-sensitive) says nothing read
      // here: the SC is recorded only, never a cancel on a guess, and the sender is told.
      // Before, it was recorded without a word, the order of an exam called off going on.
      const at = input.segment.locationOf(5);
      const upper = status.toUpperCase();
      const message = `${at} ${quotedCode(status)} is not in HL7 table 0038${(TABLE_0038 as readonly string[]).includes(upper) ? `: its codes are case-sensitive (${upper})` : ''}; SC recorded as a status, the order not ended`;
      input.quirks.add('value-not-mapped', message);
      return {
        ...storedAs(source, value, 'status', 'table 0119 SC'),
        warning: { location: at, code: 103, severity: 'W', message },
      };
    }
  }
  const action = (ORDER_CONTROL_TO_ACTION as Record<string, string>)[value];
  if (action) return storedAs(source, value, action, 'table 0119');
  const answer = TABLE_0119_ANSWERS[value];
  if (answer) {
    // An answer sent as a request (a placer, or an engine looping our own ORR back): said as
    // such, with the request it answers. Still 103: the value is outside the table 0119 codes
    // this receiver takes, as a conformance profile constrains a table.
    const taken = answer.answers in ORDER_CONTROL_TO_ACTION;
    return refused(
      source,
      103,
      `Order control ${value} (${answer.meaning}) is a filler's answer to ${answer.answers}, not a request; this receiver is the filler and takes ${TAKEN_CONTROLS}`,
      taken
        ? `Send ${answer.answers} to ask for it: ${value} answers a request, it asks for nothing`
        : `Send one of ${TAKEN_CONTROLS}: ${value} answers a request, it asks for nothing`,
    );
  }
  const upper = value.toUpperCase();
  return refused(
    source,
    103,
    TABLE_0119.has(value)
      ? `Order control ${quotedCode(value)} (HL7 table 0119) is not acted on here; this receiver takes ${TAKEN_CONTROLS}`
      : TABLE_0119.has(upper)
        ? `Order control ${quotedCode(value)} is not in HL7 table 0119: its codes are case-sensitive (${upper}); this receiver takes ${TAKEN_CONTROLS}`
        : `Order control ${quotedCode(value)} is not in HL7 table 0119 (this receiver takes ${TAKEN_CONTROLS})`,
    TABLE_0119.has(value) || !TABLE_0119.has(upper)
      ? `Send one of ${TAKEN_CONTROLS}: order control ${quotedCode(value)} is not taken`
      : `Order control ${quotedCode(value)} is not in HL7 table 0119: its codes are case-sensitive (${upper})`,
  );
});

/**
 * TQ1-9 / ORC-7.6 / OBR-27.6 priority (table 0027); a priority word (`STAT`, `Routine`) is
 * tolerated and recorded; anything else is left out with a warning.
 */
const readPriority = (value: string, source: string, input: TransformInput): TransformOutput => {
  const table = TABLE_0027_PRIORITY as Record<string, string>;
  const mapped = table[value];
  if (mapped) return storedAs(source, value, mapped, 'table 0027');
  // `s` is no table 0027 code (ID, case-sensitive): tolerated as a priority word is, and
  // recorded; before, it was upper-cased silently.
  const cased = table[value.toUpperCase()];
  if (cased) {
    input.quirks.add(
      'free-text-priority',
      `${source} "${quotedCode(value)}" is not a table 0027 code: its codes are case-sensitive (${value.toUpperCase()})`,
    );
    return storedAs(source, value, cased, 'table 0027 code in another case (quirk)');
  }
  const word = FREE_TEXT_PRIORITY[value.trim().toLowerCase()];
  if (word) {
    input.quirks.add(
      'free-text-priority',
      `${source} "${quotedCode(value)}" is not a table 0027 code`,
    );
    return storedAs(source, value, word, 'free-text priority (quirk)');
  }
  return notMapped(source, 103, `${source} priority "${quotedCode(value)}" not in table 0027`);
};

/**
 * TQ1-9 is a CWE (v2.5.1 §4.5.4.9; ORC-7.6 and OBR-27.6 are a TQ component, one value): its
 * code, else the alternate code, else the text, else the alternate text. An EHR writing only
 * the text (`^STAT`) had component 1 read alone, found empty, and its stat order went upstream
 * without a priority.
 */
const CWE_PRIORITY_COMPONENTS = [1, 4, 2, 5] as const;

export const priority0027: TransformFn = (input) => {
  const { field, component } = input.loc;
  if (input.segment.id !== 'TQ1' || component !== undefined) return ofCode(readPriority)(input);
  for (const c of CWE_PRIORITY_COMPONENTS) {
    const value = input.segment.code(field, rep(input), c, 1);
    if (value === undefined) continue;
    const source = input.segment.locationOf(field, input.loc.repetition, c === 1 ? undefined : c);
    return readPriority(value, source, input);
  }
  return EMPTY;
};

/** IPC-5 (DICOM modality, IHE RAD-4) or OBR-24 (table 0074 or the DICOM modality). */
export const modality: TransformFn = ofCode((value, source, input) => {
  const upper = value.toUpperCase();
  const mapped = (DICOM_MODALITIES as readonly string[]).includes(upper)
    ? upper
    : TABLE_0074_TO_MODALITY[upper];
  if (!mapped)
    return notMapped(
      source,
      103,
      `${source} "${quotedCode(value)}" is not a DICOM modality; not mapped`,
    );
  // DICOM modalities (CS) and table 0074 codes are upper case and case-sensitive: `ct` is
  // read as CT, as a free-text sex or priority is read, and recorded (it was read silently).
  if (value !== upper)
    input.quirks.add(
      'lowercase-code',
      `${source} "${quotedCode(value)}" is not a DICOM modality or table 0074 code: its codes are case-sensitive (${upper})`,
    );
  return storedAs(source, value, mapped, mapped === upper ? 'DICOM modality' : 'table 0074');
});

/** CE/CWE (chapter 2A): identifier ^ text ^ coding system (alternate triplet as fallback). */
function readCoded(input: TransformInput, r: number, prefix: string) {
  const { values, lines } = readComposite(
    input,
    r,
    { code: [1], display: [2], system: [3], altCode: [4], altDisplay: [5], altSystem: [6] },
    prefix,
  );
  const concept: CodedConcept = {};
  const keep: LineageLine[] = [];
  const useAlt = values.code === undefined && values.altCode !== undefined;
  const pick = (k: 'code' | 'display' | 'system'): void => {
    const key = useAlt ? (`alt${k[0].toUpperCase()}${k.slice(1)}` as const) : k;
    const v = values[key as keyof typeof values];
    if (v === undefined) return;
    concept[k] = v;
    const line = lines.find((l) => l.suffix === `${prefix}.${key}`);
    if (line) keep.push({ ...line, suffix: `${prefix}.${k}` });
  };
  pick('code');
  pick('display');
  pick('system');
  if (concept.display === undefined && values.display !== undefined) {
    concept.display = values.display;
    const line = lines.find((l) => l.suffix === `${prefix}.display`);
    if (line) keep.push(line);
  }
  return { concept, lines: keep };
}

export const coded: TransformFn = (input) => {
  const { concept, lines } = readCoded(input, rep(input), '');
  return Object.keys(concept).length === 0 ? EMPTY : { kind: 'value', value: concept, lines };
};

/** Every repetition of a CE/CWE field, the empty ones left out. */
export const codedList: TransformFn = (input) => {
  const out: CodedConcept[] = [];
  const all: LineageLine[] = [];
  for (let r = 1; r <= input.segment.repetitionCount(input.loc.field); r += 1) {
    const { concept, lines } = readCoded(input, r, `[${out.length}]`);
    if (Object.keys(concept).length === 0) continue;
    out.push(concept);
    all.push(...lines);
  }
  return out.length === 0 ? EMPTY : { kind: 'value', value: out, lines: all };
};

/**
 * DG1-3 (diagnosis code, CE/CWE, v2.5.1 §6.5.2.3) of every DG1 of the order group, in message
 * order; DG1-4 (diagnosis description, ST, kept for backward compatibility) as the text of a
 * DG1 without a code. The row reads it as the reason for the study when OBR-31 is empty.
 */
export const dg1Diagnoses: TransformFn = (input) => {
  const out: CodedConcept[] = [];
  const all: LineageLine[] = [];
  for (const segment of input.sameId) {
    const at = { ...input, segment };
    const { concept, lines } = readCoded(at, 1, `[${out.length}]`);
    const description = segment.value(4);
    if (concept.display === undefined && description !== undefined) {
      concept.display = description;
      lines.push({
        suffix: `[${out.length}].display`,
        source: segment.locationOf(4),
        value: description,
      });
    }
    if (Object.keys(concept).length === 0) continue;
    out.push(concept);
    all.push(...lines);
  }
  return out.length === 0 ? EMPTY : { kind: 'value', value: out, lines: all };
};
