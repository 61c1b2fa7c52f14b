import { formatLocation, parseLocation } from '../hl7/hl7-location';
import type { Hl7Message, Hl7OrderGroup, Hl7Segment } from '../hl7/hl7-message';
import { QuirkCollector } from '../hl7/hl7-quirk';
import type { MappedField, OrderAction, OrderRequest } from '../domain/order-request';
import type { Hl7OrderMappingConfig } from './hl7-order.config';
import type { TransformProblem } from './hl7-value.kit';
import { HL7_TRANSFORMS, type Hl7TransformId } from './hl7-value.transforms';
import { applyRow } from './table-driver';

/**
 * The driver of the HL7v2 → OrderRequest table (hl7-order.mapping.ts): what a row is, where its
 * sources are looked up, and how a row is read, with declared precedence and conflicts.
 */

export type Hl7SourceSpec =
  | string
  | {
      readonly at: string;
      readonly transform?: Hl7TransformId;
      /**
       * Read only when the sources before it are empty, never compared with them: it means
       * something else that stands in for the target (ORC-9, the time of the transaction, for
       * the requested start), so holding another value is no conflict.
       */
      readonly fallbackOnly?: true;
      /**
       * Not read either when a source before it held a value its transform left out: the sender
       * said something there (ORC-7.6 `SOON`), and this older place is not asked to override it
       * (OBR-5 `STAT`, kept for backward compatibility only).
       */
      readonly notAfterLeftOut?: true;
      /**
       * Read only for orders with one of these actions (the `action` row runs first): ORC-9 is
       * the time the order was entered for NW, but the time of the change for XO.
       */
      readonly forActions?: readonly OrderAction[];
    };

/** One row of the declarative table: where a target comes from, how, and under which rule ID. */
export interface Hl7FieldRule {
  /** Dotted path in OrderRequest (or `priorIdentifiers` for merges). */
  readonly target: string;
  /** Locations in priority order; the first one with a value wins (declared precedence). */
  readonly sources: readonly Hl7SourceSpec[];
  readonly transform: Hl7TransformId;
  readonly required: boolean;
  readonly ruleId: string;
  /**
   * When more than one source holds a value and they differ: `must-agree` (the standard says
   * they carry the same thing, e.g. ORC-2 and OBR-2, v2.5.1 §4.5.1.2/§4.5.3.2) is an error at
   * the disagreeing field (a warning where the site tolerates it, `fieldConflicts: warn`);
   * `first-wins` (the sources mean related but different things) keeps the first and records a
   * quirk. Never a silent choice. Default `first-wins`.
   */
  readonly onConflict?: 'must-agree' | 'first-wins';
}

/** Segments that belong to an order group: never looked up outside their own group. */
const ORDER_SEGMENTS = new Set([
  'ORC',
  'OBR',
  'TQ1',
  'TQ2',
  'IPC',
  'ZDS',
  'NTE',
  'DG1',
  'OBX',
  'CTD',
  'CTI',
  'BLG',
  'PRT', // v2.7+ participation (ORDER group: ORC [{PRT}] ..., OBR [{PRT}])
]);

/** Where a row's sources are looked up: the message, one order group, or one PID/MRG pair. */
export interface Scope {
  message: Hl7Message;
  group?: Hl7OrderGroup;
  /** For ADT^A40: the PID/MRG pair being mapped. */
  pair?: readonly Hl7Segment[];
}

function segmentsInScope(scope: Scope, id: string): Hl7Segment[] {
  if (scope.pair) return scope.pair.filter((s) => s.id === id);
  if (ORDER_SEGMENTS.has(id)) return scope.group ? scope.group.all(id) : [];
  return scope.message.segmentsById(id);
}

interface RowsOutcome {
  values: Record<string, unknown>;
  lineage: MappedField[];
  problems: TransformProblem[];
  /** Targets whose transform reported an error. */
  failed: Set<string>;
}

/**
 * Runs rows in table order: each takes its first source with a value (Hl7FieldRule.sources),
 * records lineage, and reports conflicts, transform problems and required rows left empty.
 */
export function applyRows(
  rows: readonly Hl7FieldRule[],
  scope: Scope,
  config: Hl7OrderMappingConfig,
  quirks: QuirkCollector,
  seed: Record<string, unknown> = {},
): RowsOutcome {
  const values = seed;
  const lineage: MappedField[] = [];
  const problems: TransformProblem[] = [];
  const failed = new Set<string>();
  for (const row of rows) {
    let found = false;
    // A source held a value its transform left out (not a table code): see notAfterLeftOut.
    let leftOut = false;
    for (const spec of row.sources) {
      if (typeof spec !== 'string' && spec.notAfterLeftOut && leftOut) break;
      const quirksBefore = quirks.quirks.length;
      const read = readSource(row, spec, scope, config, quirks, values);
      if (!read) continue;
      const { out } = read;
      // A value left out with a warning reaches the sender only in a v2.5+ ACK (v2.3/2.4 ERR
      // has no severity): say it in the message's quirks too, so the audit log shows why the
      // order has no Study Instance UID or modality (unless the transform said so already).
      if (out.kind === 'empty' && out.warning && quirks.quirks.length === quirksBefore)
        quirks.add('value-not-mapped', out.warning.message);
      if (out.kind === 'error') {
        problems.push(out.problem);
        failed.add(row.target);
        found = true;
        break;
      }
      if (out.warning) problems.push(out.warning);
      if (out.kind === 'empty') {
        if (out.warning) leftOut = true;
        continue;
      }
      applyRow(values, lineage, row, out.value, out.lines);
      found = true;
      problems.push(
        // The taken source as this message has it (`ORC[2]-2` in the second order), not the
        // row's `ORC-2`, which names the first order's ORC.
        ...conflicts(
          row,
          row.sources.indexOf(spec),
          out.value,
          read.segment.locationOf(read.loc.field),
          scope,
          config,
          quirks,
          values,
        ),
      );
      break;
    }
    if (!found && row.required) {
      const first = row.sources[0];
      const loc = parseLocation(typeof first === 'string' ? first : first.at);
      const seg = segmentsInScope(scope, loc.segment)[0];
      const location = seg ? seg.locationOf(loc.field) : formatLocation(loc);
      problems.push({
        location,
        code: 101,
        severity: 'E',
        message: `${location} required (${row.target}) but empty`,
        brief: `Send ${location}: it is required (${row.target}) but empty`,
      });
    }
  }
  return { values, lineage, problems, failed };
}

/** One source of a row through its transform; undefined when its segment is absent. */
function readSource(
  row: Hl7FieldRule,
  spec: Hl7SourceSpec,
  scope: Scope,
  config: Hl7OrderMappingConfig,
  quirks: QuirkCollector,
  values: Record<string, unknown>,
) {
  const at = typeof spec === 'string' ? spec : spec.at;
  if (typeof spec !== 'string' && spec.forActions) {
    if (!spec.forActions.includes(values.action as OrderAction)) return undefined;
  }
  const transform = typeof spec === 'string' ? row.transform : (spec.transform ?? row.transform);
  const loc = parseLocation(at);
  const sameId = segmentsInScope(scope, loc.segment);
  const segment = sameId[(loc.segmentOrdinal ?? 1) - 1];
  if (!segment) return undefined;
  const out = HL7_TRANSFORMS[transform]({
    message: scope.message,
    segment,
    loc,
    sameId,
    config,
    quirks,
    partial: values as Partial<OrderRequest>,
  });
  return { out, segment, loc };
}

/**
 * The later sources of a multi-source row that hold a different value than the one taken
 * (`taken`, from sources[index]): each is a recorded conflict (Hl7FieldRule.onConflict); of a
 * must-agree row, one whose value its transform left out with a warning is that warning.
 */
function conflicts(
  row: Hl7FieldRule,
  index: number,
  taken: unknown,
  takenAt: string,
  scope: Scope,
  config: Hl7OrderMappingConfig,
  quirks: QuirkCollector,
  values: Record<string, unknown>,
): TransformProblem[] {
  const problems: TransformProblem[] = [];
  const reads = [
    ...(row.onConflict === 'must-agree'
      ? repeatsOf(row, row.sources[index]!, scope, config, values)
      : []),
    ...row.sources.slice(index + 1).flatMap((spec) => {
      if (typeof spec !== 'string' && spec.fallbackOnly) return [];
      // Read only to compare: its own quirks are not the message's.
      const read = readSource(row, spec, scope, config, new QuirkCollector(), values);
      return read ? [read] : [];
    }),
  ];
  for (const { out, segment, loc } of reads) {
    // A later source of a must-agree row whose value means nothing here (ORC-7.6 `SOON`
    // beside TQ1-9 `S`) is said as when it stands alone (ERR 103 W, quirk value-not-mapped):
    // before, only values were compared and it went unsaid.
    if (out.kind === 'empty' && out.warning && row.onConflict === 'must-agree') {
      problems.push(out.warning);
      quirks.add('value-not-mapped', out.warning.message);
      continue;
    }
    if (out.kind !== 'value' || sameValue(taken, out.value)) continue;
    const location = segment.locationOf(loc.field);
    const first = takenAt.replace(/\.\d+$/, '');
    const detail = `${location} (${describe(out.value)}) differs from ${first} (${describe(taken)}); ${first} is used`;
    if ((row.onConflict ?? 'first-wins') === 'must-agree') {
      const tolerated = config.fieldConflicts === 'warn';
      problems.push({
        location,
        code: 102,
        severity: tolerated ? 'W' : 'E',
        message: `${row.target}: ${detail}${tolerated ? '' : '; they must carry the same value (HL7 v2.5.1 chapter 4)'}`,
        brief: `Send the same value in both: ${location} (${describe(out.value)}) differs from ${first} (${describe(taken)})`,
      });
      if (tolerated) quirks.add('field-conflict', `${row.target}: ${detail}`);
    } else {
      // Values left out: these rows include free text (OBR-13), which is PHI.
      quirks.add(
        'field-conflict',
        `${row.target}: ${location} differs from ${first}; ${first} is used`,
      );
    }
  }
  return problems;
}

/**
 * The taken source's field in the other segments of its ID in scope, for a must-agree row: an
 * OMI^O23 repeats IPC once per scheduled procedure step of the group's one requested procedure
 * (IHE RAD TF-2 RAD-4), so IPC-1 (accession) and IPC-3 (Study Instance UID) are the same in
 * each; a second ZDS of an order names its one study again. Before, the first was read and the
 * others never looked at: an order whose second step named another study waited for the first
 * while the modality worklist had both. A source naming its segment's ordinal (`IPC[2]-3`) has
 * no repeats.
 */
function repeatsOf(
  row: Hl7FieldRule,
  spec: Hl7SourceSpec,
  scope: Scope,
  config: Hl7OrderMappingConfig,
  values: Record<string, unknown>,
) {
  const loc = parseLocation(typeof spec === 'string' ? spec : spec.at);
  if (loc.segmentOrdinal !== undefined) return [];
  const transform = typeof spec === 'string' ? row.transform : (spec.transform ?? row.transform);
  const sameId = segmentsInScope(scope, loc.segment);
  return sameId.slice(1).map((segment) => ({
    out: HL7_TRANSFORMS[transform]({
      message: scope.message,
      segment,
      loc,
      sameId,
      config,
      quirks: new QuirkCollector(),
      partial: values as Partial<OrderRequest>,
    }),
    segment,
    loc,
  }));
}

/** Equal for a conflict: entity identifiers by number (and namespace when both carry one). */
function sameValue(a: unknown, b: unknown): boolean {
  if (isEi(a) && isEi(b))
    return (
      a.value === b.value &&
      (a.system === undefined || b.system === undefined || a.system === b.system)
    );
  return JSON.stringify(a) === JSON.stringify(b);
}

function isEi(v: unknown): v is { value: string; system?: string } {
  return (
    typeof v === 'object' && v !== null && typeof (v as { value?: unknown }).value === 'string'
  );
}

function describe(v: unknown): string {
  if (typeof v === 'string') return v;
  if (isEi(v)) return v.system ? `${v.value}^${v.system}` : v.value;
  return JSON.stringify(v);
}
