import { hasMatchingCharacters, MATCHING_CHARACTERS_MESSAGE } from './dicom-identifiers';
import type { Hl7ErrorCondition } from '../hl7/hl7-ack.builder';
import type { Hl7Location } from '../hl7/hl7-location';
import type { Hl7Segment } from '../hl7/hl7-message';
import type { QuirkCollector } from '../hl7/hl7-quirk';
import type {
  AdministrativeSex,
  CodedConcept,
  Identifier,
  OrderRequest,
  PersonName,
  Practitioner,
} from '../domain/order-request';
import {
  DICOM_MODALITIES,
  FREE_TEXT_SEX,
  ORDER_CONTROL_TO_ACTION,
  TABLE_0119,
  TABLE_0001_SEX,
  TABLE_0027_PRIORITY,
  TABLE_0074_TO_MODALITY,
} from './hl7-code.tables';
import type { Hl7OrderMappingConfig } from './hl7-order.config';
import { resolveProducts } from './product-table';

/** Pure value transforms named in the mapping table; each reads one source position. */
export type Hl7TransformId =
  | 'string'
  | 'cx-list'
  | 'xpn'
  | 'partial-date'
  | 'sex-0001'
  | 'order-control'
  | 'ei'
  | 'coded'
  | 'coded-list'
  | 'free-text-reason'
  | 'modality'
  | 'uid'
  | 'priority-0027'
  | 'xcn'
  | 'dtm-instant'
  | 'nte-notes'
  | 'product-table'
  | 'accession';

export interface TransformInput {
  segment: Hl7Segment;
  loc: Hl7Location;
  /** Every segment with the source's ID in scope (for NTE and the like). */
  sameId: readonly Hl7Segment[];
  config: Hl7OrderMappingConfig;
  quirks: QuirkCollector;
  /** The request as mapped so far (rows run in table order). */
  partial: Partial<OrderRequest>;
}

export interface LineageLine {
  /** Appended to the row's target, e.g. `[0].value`. */
  suffix: string;
  source: string;
  /** The value as stored in the OrderRequest. */
  value: string;
  /** Overrides the row's rule id (the unknown-procedure default has one id everywhere). */
  ruleId?: string;
  /** The table row or conversion that produced `value` from the source (MappedField.rule). */
  rule?: string;
}

export interface TransformProblem {
  location: string;
  code: Hl7ErrorCondition;
  severity: 'E' | 'W';
  message: string;
}

export type TransformOutput =
  | { kind: 'value'; value: unknown; lines: LineageLine[]; warning?: TransformProblem }
  | { kind: 'empty'; warning?: TransformProblem }
  | { kind: 'error'; problem: TransformProblem };

type TransformFn = (input: TransformInput) => TransformOutput;

const EMPTY: TransformOutput = { kind: 'empty' };

function rep(input: TransformInput): number {
  return input.loc.repetition ?? 1;
}

/** Reads components of one repetition into named parts, with lineage for each valued one. */
function readComposite<K extends string>(
  input: TransformInput,
  repetition: number,
  parts: Readonly<Record<K, readonly [component: number, subcomponent?: number]>>,
  prefix = '',
): { values: Partial<Record<K, string>>; lines: LineageLine[] } {
  const values: Partial<Record<K, string>> = {};
  const lines: LineageLine[] = [];
  for (const key of Object.keys(parts) as K[]) {
    const [component, sub] = parts[key];
    const v = input.segment.value(input.loc.field, repetition, component, sub ?? 1);
    if (v === undefined) continue;
    values[key] = v;
    lines.push({
      suffix: `${prefix}.${key}`,
      source: input.segment.locationOf(input.loc.field, repetition, component, sub),
      value: v,
    });
  }
  return { values, lines };
}

/**
 * A lineage line for a value a rule converted: the value stored, and the rule as
 * `rule: source text → stored value` (no rule text when the value is the source as is).
 */
function converted(source: string, raw: string, stored: string, via: string): LineageLine {
  return {
    suffix: '',
    source,
    value: stored,
    ...(raw === stored ? {} : { rule: `${via}: ${raw} → ${stored}` }),
  };
}

function single(input: TransformInput): { value?: string; source: string } {
  const { field, component, subcomponent } = input.loc;
  return {
    value: input.segment.value(field, rep(input), component ?? 1, subcomponent ?? 1),
    source: input.segment.locationOf(field, input.loc.repetition, component, subcomponent),
  };
}

const stringTransform: TransformFn = (input) => {
  const { value, source } = single(input);
  if (value === undefined) return EMPTY;
  return { kind: 'value', value, lines: [{ suffix: '', source, value }] };
};

/** PID-3 / MRG-1 CX (v2.5.1 chapter 2A): ID ^ check digit ^ scheme ^ assigning authority (HD) ^ type. */
const cxList: TransformFn = (input) => {
  const out: Identifier[] = [];
  const lines: LineageLine[] = [];
  const count = input.segment.repetitionCount(input.loc.field);
  for (let r = 1; r <= count; r += 1) {
    const { values } = readComposite(input, r, {
      value: [1],
      namespace: [4, 1],
      universalId: [4, 2],
      type: [5],
    });
    if (values.value === undefined) continue;
    const id: Identifier = { value: values.value };
    const i = out.length;
    lines.push({
      suffix: `[${i}].value`,
      source: input.segment.locationOf(input.loc.field, r, 1),
      value: values.value,
    });
    // CX-4 HD: namespace ID, else universal ID (an OID), as the identifier's system.
    const system = values.namespace ?? values.universalId;
    if (system !== undefined) {
      id.system = system;
      lines.push({
        suffix: `[${i}].system`,
        source: input.segment.locationOf(
          input.loc.field,
          r,
          4,
          values.namespace !== undefined ? 1 : 2,
        ),
        value: system,
      });
    }
    if (values.type !== undefined) {
      id.type = values.type;
      lines.push({
        suffix: `[${i}].type`,
        source: input.segment.locationOf(input.loc.field, r, 5),
        value: values.type,
      });
    }
    out.push(id);
  }
  return out.length === 0 ? EMPTY : { kind: 'value', value: out, lines };
};

/** XPN (chapter 2A): family (FN.1) ^ given ^ second given ^ suffix ^ prefix. First repetition. */
const xpn: TransformFn = (input) => {
  const r = rep(input);
  const { values, lines } = readComposite(input, r, {
    family: [1, 1],
    given: [2],
    middle: [3],
    suffix: [4],
    prefix: [5],
  });
  return personName(values, lines);
};

function personName(
  values: Partial<Record<'family' | 'given' | 'middle' | 'suffix' | 'prefix', string>>,
  lines: LineageLine[],
): TransformOutput {
  const name: PersonName = {};
  if (values.family !== undefined) name.family = values.family;
  const given = [values.given, values.middle].filter((g): g is string => g !== undefined);
  if (given.length > 0) name.given = given;
  if (values.suffix !== undefined) name.suffix = values.suffix;
  if (values.prefix !== undefined) name.prefix = values.prefix;
  if (Object.keys(name).length === 0) return EMPTY;
  const renamed = lines.map((l) => {
    if (l.suffix.endsWith('.given'))
      return { ...l, suffix: l.suffix.replace('.given', '.given[0]') };
    if (l.suffix.endsWith('.middle')) {
      const idx = values.given === undefined ? 0 : 1;
      return { ...l, suffix: l.suffix.replace('.middle', `.given[${idx}]`) };
    }
    return l;
  });
  return { kind: 'value', value: name, lines: renamed };
}

function validDate(y: number, m?: number, d?: number): boolean {
  if (m === undefined) return y >= 1800 && y <= 2999;
  if (m < 1 || m > 12) return false;
  if (d === undefined) return true;
  const days = new Date(Date.UTC(y, m, 0)).getUTCDate();
  return d >= 1 && d <= days;
}

/** DT/DTM (chapter 2A) → ISO 8601 date or partial date, precision kept. */
const partialDate: TransformFn = (input) => {
  const { value, source } = single(input);
  if (value === undefined) return EMPTY;
  const m = /^(\d{4})(\d{2})?(\d{2})?/.exec(value);
  const y = m ? Number(m[1]) : NaN;
  const mo = m?.[2] ? Number(m[2]) : undefined;
  const d = m?.[3] ? Number(m[3]) : undefined;
  if (!m || !validDate(y, mo, d)) {
    input.quirks.add('invalid-date', `${source} is not an HL7 date`);
    return {
      kind: 'empty',
      warning: {
        location: source,
        code: 102,
        severity: 'W',
        message: `${source} not a valid date`,
      },
    };
  }
  const iso = [m[1], m[2], m[3]].filter(Boolean).join('-');
  return { kind: 'value', value: iso, lines: [converted(source, value, iso, 'HL7 DT')] };
};

/** Table 0001 (administrative sex); free text tolerated and recorded. */
const sex0001: TransformFn = (input) => {
  const { value, source } = single(input);
  if (value === undefined) return EMPTY;
  const coded = (TABLE_0001_SEX as Record<string, AdministrativeSex>)[value.toUpperCase()];
  if (coded) {
    return { kind: 'value', value: coded, lines: [converted(source, value, coded, 'table 0001')] };
  }
  const free = FREE_TEXT_SEX[value.trim().toLowerCase()];
  input.quirks.add(
    'free-text-sex',
    `${source} "${free ?? 'unrecognised'}" is not a table 0001 code`,
  );
  const stored = free ?? 'unknown';
  return {
    kind: 'value',
    value: stored,
    lines: [converted(source, value, stored, 'free-text sex (quirk)')],
  };
};

/** ORC-1 (table 0119) → action; unsupported codes are an error at ORC-1 (AE 103). */
const orderControl: TransformFn = (input) => {
  const { value, source } = single(input);
  if (value === undefined) return EMPTY;
  const action = (ORDER_CONTROL_TO_ACTION as Record<string, string>)[value.toUpperCase()];
  if (!action) {
    return {
      kind: 'error',
      problem: {
        location: source,
        code: 103,
        severity: 'E',
        message: TABLE_0119.has(value.toUpperCase())
          ? `Order control ${value} (HL7 table 0119) is not acted on here; this receiver takes NW, CA, DC, OD, XO, SC`
          : `Order control ${value} is not in HL7 table 0119 (this receiver takes NW, CA, DC, OD, XO, SC)`,
      },
    };
  }
  return { kind: 'value', value: action, lines: [converted(source, value, action, 'table 0119')] };
};

/** EI (chapter 2A): entity identifier ^ namespace ID ^ universal ID ^ universal ID type. */
const ei: TransformFn = (input) => {
  const { values } = readComposite(input, rep(input), {
    value: [1],
    namespace: [2],
    universalId: [3],
  });
  if (values.value === undefined) return EMPTY;
  const id: Identifier = { value: values.value };
  const lines: LineageLine[] = [
    {
      suffix: '.value',
      source: input.segment.locationOf(input.loc.field, input.loc.repetition, 1),
      value: values.value,
    },
  ];
  const system = values.namespace ?? values.universalId;
  if (system !== undefined) {
    id.system = system;
    lines.push({
      suffix: '.system',
      source: input.segment.locationOf(
        input.loc.field,
        input.loc.repetition,
        values.namespace !== undefined ? 2 : 3,
      ),
      value: system,
    });
  }
  return { kind: 'value', value: id, lines };
};

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

const coded: TransformFn = (input) => {
  const { concept, lines } = readCoded(input, rep(input), '');
  return Object.keys(concept).length === 0 ? EMPTY : { kind: 'value', value: concept, lines };
};

const codedList: TransformFn = (input) => {
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

/** OBR-13 relevant clinical information (free text) as an uncoded reason. */
const freeTextReason: TransformFn = (input) => {
  const { value, source } = single(input);
  if (value === undefined) return EMPTY;
  return {
    kind: 'value',
    value: [{ display: value }],
    lines: [{ suffix: '[0].display', source, value }],
  };
};

/** IPC-5 (DICOM modality, IHE RAD-4) or OBR-24 (table 0074 or the DICOM modality). */
const modality: TransformFn = (input) => {
  const { value, source } = single(input);
  if (value === undefined) return EMPTY;
  const upper = value.toUpperCase();
  const mapped = (DICOM_MODALITIES as readonly string[]).includes(upper)
    ? upper
    : TABLE_0074_TO_MODALITY[upper];
  if (!mapped) {
    return {
      kind: 'empty',
      warning: {
        location: source,
        code: 103,
        severity: 'W',
        message: `${source} "${value}" is not a DICOM modality; not mapped`,
      },
    };
  }
  const via = mapped === upper ? 'DICOM modality' : 'table 0074';
  return { kind: 'value', value: mapped, lines: [converted(source, value, mapped, via)] };
};

/** DICOM UID syntax (PS3.5 section 9.1): digits and dots, no leading zeros, at most 64 chars. */
const UID_PATTERN = /^(0|[1-9]\d*)(\.(0|[1-9]\d*))+$/;

const uid: TransformFn = (input) => {
  const { value, source } = single(input);
  if (value === undefined) return EMPTY;
  if (!UID_PATTERN.test(value) || value.length > 64) {
    return {
      kind: 'empty',
      warning: {
        location: source,
        code: 102,
        severity: 'W',
        message: `${source} is not a DICOM UID`,
      },
    };
  }
  return { kind: 'value', value, lines: [{ suffix: '', source, value }] };
};

/**
 * An accession number (IPC-1, OBR-18): a string that must not hold DICOM matching characters,
 * or the study query would match other patients' studies (AE at the field, issue #15).
 */
const accession: TransformFn = (input) => {
  const { value, source } = single(input);
  if (value === undefined) return EMPTY;
  if (hasMatchingCharacters(value)) {
    return {
      kind: 'error',
      problem: {
        location: source,
        code: 102,
        severity: 'E',
        message: `${source}: ${MATCHING_CHARACTERS_MESSAGE}`,
      },
    };
  }
  return { kind: 'value', value, lines: [{ suffix: '', source, value }] };
};

const priority0027: TransformFn = (input) => {
  const { value, source } = single(input);
  if (value === undefined) return EMPTY;
  const mapped = (TABLE_0027_PRIORITY as Record<string, string>)[value.toUpperCase()];
  if (!mapped) {
    return {
      kind: 'empty',
      warning: {
        location: source,
        code: 103,
        severity: 'W',
        message: `${source} priority "${value}" not in table 0027`,
      },
    };
  }
  return { kind: 'value', value: mapped, lines: [converted(source, value, mapped, 'table 0027')] };
};

/** XCN (chapter 2A): ID ^ family ^ given ^ second given ^ suffix ^ prefix ^ degree ^ source ^ authority. */
const xcn: TransformFn = (input) => {
  const r = rep(input);
  const { values, lines } = readComposite(input, r, {
    id: [1],
    family: [2, 1],
    given: [3],
    middle: [4],
    suffix: [5],
    prefix: [6],
    authority: [9, 1],
  });
  const practitioner: Practitioner = {};
  const out: LineageLine[] = [];
  if (values.id !== undefined) {
    practitioner.identifier = { value: values.id };
    out.push({ ...lines.find((l) => l.suffix === '.id')!, suffix: '.identifier.value' });
    if (values.authority !== undefined) {
      practitioner.identifier.system = values.authority;
      out.push({ ...lines.find((l) => l.suffix === '.authority')!, suffix: '.identifier.system' });
    }
  }
  const nameLines = lines
    .filter((l) => !['.id', '.authority'].includes(l.suffix))
    .map((l) => ({ ...l, suffix: `.name${l.suffix}` }));
  const name = personName(values, []);
  if (name.kind === 'value') {
    practitioner.name = name.value as PersonName;
    const renamed = nameLines.map((l) => {
      if (l.suffix === '.name.given') return { ...l, suffix: '.name.given[0]' };
      if (l.suffix === '.name.middle') {
        return { ...l, suffix: `.name.given[${values.given === undefined ? 0 : 1}]` };
      }
      return l;
    });
    out.push(...renamed);
  }
  return Object.keys(practitioner).length === 0
    ? EMPTY
    : { kind: 'value', value: practitioner, lines: out };
};

/** DTM (chapter 2A): YYYY[MM[DD[HH[MM[SS[.S...]]]]]][+/-ZZZZ] → ISO 8601 instant with offset. */
const dtmInstant: TransformFn = (input) => {
  const { value, source } = single(input);
  if (value === undefined) return EMPTY;
  const m = /^(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?(?:\.(\d{1,4}))?([+-]\d{4})?$/.exec(
    value,
  );
  const y = m ? Number(m[1]) : NaN;
  const mo = m?.[2] ? Number(m[2]) : 1;
  const d = m?.[3] ? Number(m[3]) : 1;
  const hh = m?.[4] ? Number(m[4]) : 0;
  const mi = m?.[5] ? Number(m[5]) : 0;
  const ss = m?.[6] ? Number(m[6]) : 0;
  if (!m || !validDate(y, mo, d) || hh > 23 || mi > 59 || ss > 59) {
    input.quirks.add('invalid-date', `${source} is not an HL7 timestamp`);
    return {
      kind: 'empty',
      warning: { location: source, code: 102, severity: 'W', message: `${source} not a valid DTM` },
    };
  }
  const p = (n: number): string => String(n).padStart(2, '0');
  const frac = m[7] ? `.${m[7].slice(0, 3).padEnd(3, '0')}` : '';
  const offset = m[8] ? `${m[8].slice(0, 3)}:${m[8].slice(3)}` : input.config.senderUtcOffset;
  const iso = `${m[1]}-${p(mo)}-${p(d)}T${p(hh)}:${p(mi)}:${p(ss)}${frac}${offset}`;
  const via = m[8] ? 'HL7 DTM' : `HL7 DTM, sender offset ${input.config.senderUtcOffset}`;
  return { kind: 'value', value: iso, lines: [converted(source, value, iso, via)] };
};

/** NTE-3 (FT, repeating) of every NTE in the order group, one note per NTE. */
const nteNotes: TransformFn = (input) => {
  const notes: string[] = [];
  const lines: LineageLine[] = [];
  for (const seg of input.sameId) {
    const parts: string[] = [];
    for (let r = 1; r <= seg.repetitionCount(input.loc.field); r += 1) {
      const v = seg.value(input.loc.field, r);
      if (v !== undefined) parts.push(v);
    }
    if (parts.length === 0) continue;
    const text = parts.join('\n');
    lines.push({
      suffix: `[${notes.length}]`,
      source: seg.locationOf(input.loc.field),
      value: text,
    });
    notes.push(text);
  }
  return notes.length === 0 ? EMPTY : { kind: 'value', value: notes, lines };
};

/**
 * Products from the requested procedure code through the product table (product-table.ts
 * resolveProducts). Unknown codes follow the configured rule; cancel and status messages need
 * no products and never fail here. Each lineage line carries the product stored and the
 * table row (or unknown-procedure rule) that chose it.
 */
const productTable: TransformFn = (input) => {
  const code = input.segment.value(input.loc.field, 1, 1);
  const system = input.segment.value(input.loc.field, 1, 3);
  if (code === undefined) return EMPTY;
  const source = input.segment.locationOf(input.loc.field, undefined, 1);
  const action = input.partial.action;
  const resolved = resolveProducts(input.config.productTable, input.config.unknownProcedure, [
    { code, system },
  ]);
  if (
    resolved.kind === 'products' &&
    (resolved.row || (action !== 'cancel' && action !== 'status'))
  ) {
    return {
      kind: 'value',
      value: resolved.products.map((p) => p.product),
      lines: resolved.products.map((p, i) => ({
        suffix: `[${i}]`,
        source,
        value: p.product,
        rule: p.rule,
        ...(p.ruleId ? { ruleId: p.ruleId } : {}),
      })),
    };
  }
  if (action === 'cancel' || action === 'status') return { kind: 'value', value: [], lines: [] };
  return {
    kind: 'error',
    problem: {
      location: source,
      code: 103,
      severity: 'E',
      message: `Procedure code ${code} has no AI product configured`,
    },
  };
};

export const HL7_TRANSFORMS: Readonly<Record<Hl7TransformId, TransformFn>> = {
  string: stringTransform,
  'cx-list': cxList,
  xpn,
  'partial-date': partialDate,
  'sex-0001': sex0001,
  'order-control': orderControl,
  ei,
  coded,
  'coded-list': codedList,
  'free-text-reason': freeTextReason,
  modality,
  uid,
  'priority-0027': priority0027,
  xcn,
  'dtm-instant': dtmInstant,
  'nte-notes': nteNotes,
  'product-table': productTable,
  accession,
};
