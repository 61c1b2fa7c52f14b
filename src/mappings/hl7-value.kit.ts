import type { Hl7ErrorCondition } from '../hl7/hl7-ack.builder';
import type { Hl7Location } from '../hl7/hl7-location';
import type { Hl7Message, Hl7Segment } from '../hl7/hl7-message';
import type { QuirkCollector } from '../hl7/hl7-quirk';
import type { OrderRequest } from '../domain/order-request';
import type { Hl7OrderMappingConfig } from './hl7-order.config';
import type { LineageLine } from './table-driver';

export type { LineageLine } from './table-driver';

/**
 * What every HL7 value transform (hl7-value.transforms.ts) takes and gives, and the small
 * readers and answers they share. A transform reads one source position of the row.
 */
export interface TransformInput {
  /** The whole message (its header: MSH-7's offset for timestamps sent without one). */
  message: Hl7Message;
  segment: Hl7Segment;
  loc: Hl7Location;
  /** Every segment with the source's ID in scope (for NTE and the like). */
  sameId: readonly Hl7Segment[];
  config: Hl7OrderMappingConfig;
  quirks: QuirkCollector;
  /** The request as mapped so far (rows run in table order). */
  partial: Partial<OrderRequest>;
}

export interface TransformProblem {
  location: string;
  code: Hl7ErrorCondition;
  severity: 'E' | 'W';
  message: string;
  /** The sentence in 80 characters, advice first, for a v2.1-2.4 MSA-3 (Hl7ErrorDetail.brief). */
  brief?: string;
}

export type TransformOutput =
  | { kind: 'value'; value: unknown; lines: LineageLine[]; warning?: TransformProblem }
  | { kind: 'empty'; warning?: TransformProblem }
  | { kind: 'error'; problem: TransformProblem };

export type TransformFn = (input: TransformInput) => TransformOutput;

export const EMPTY: TransformOutput = { kind: 'empty' };

/** The repetition the row names (the first when it names none). */
export function rep(input: TransformInput): number {
  return input.loc.repetition ?? 1;
}

/** Reads components of one repetition into named parts, with lineage for each valued one. */
export function readComposite<K extends string>(
  input: TransformInput,
  repetition: number,
  parts: Readonly<Record<K, readonly [component: number, subcomponent?: number]>>,
  prefix = '',
  clean: (value: string) => string | undefined = (value) => value,
): { values: Partial<Record<K, string>>; lines: LineageLine[] } {
  const values: Partial<Record<K, string>> = {};
  const lines: LineageLine[] = [];
  for (const key of Object.keys(parts) as K[]) {
    const [component, sub] = parts[key];
    const sent = input.segment.value(input.loc.field, repetition, component, sub ?? 1);
    const v = sent === undefined ? undefined : clean(sent);
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
export function converted(source: string, raw: string, stored: string, via: string): LineageLine {
  return {
    suffix: '',
    source,
    value: stored,
    ...(raw === stored ? {} : { rule: `${via}: ${raw} → ${stored}` }),
  };
}

/**
 * A transform of the one value at the row's location (component and subcomponent as the row
 * names them): empty when the location holds nothing, else whatever `read` makes of it.
 */
export function ofValue(
  read: (value: string, source: string, input: TransformInput) => TransformOutput,
  clean: (value: string) => string | undefined = (value) => value,
): TransformFn {
  return (input) => {
    const { field, component, subcomponent } = input.loc;
    const sent = input.segment.value(field, rep(input), component ?? 1, subcomponent ?? 1);
    const value = sent === undefined ? undefined : clean(sent);
    if (value === undefined) return EMPTY;
    const source = input.segment.locationOf(field, input.loc.repetition, component, subcomponent);
    return read(value, source, input);
  };
}

/**
 * ofValue for a coded value (an HL7 table code): read with `Hl7Segment.code`, without the
 * spaces a fixed-width sender pads it with (quirk `padded-code`).
 */
export function ofCode(
  read: (value: string, source: string, input: TransformInput) => TransformOutput,
): TransformFn {
  return (input) => {
    const { field, component, subcomponent } = input.loc;
    const value = input.segment.code(field, rep(input), component ?? 1, subcomponent ?? 1);
    if (value === undefined) return EMPTY;
    const source = input.segment.locationOf(field, input.loc.repetition, component, subcomponent);
    return read(value, source, input);
  };
}

/** The source's value stored as it was sent. */
export function asSent(value: string, source: string): TransformOutput {
  return { kind: 'value', value, lines: [{ suffix: '', source, value }] };
}

/** A value a rule converted (`via` names the rule, see converted). */
export function storedAs(
  source: string,
  raw: string,
  stored: string,
  via: string,
): TransformOutput {
  return { kind: 'value', value: stored, lines: [converted(source, raw, stored, via)] };
}

/** Nothing stored, with a warning at the source (the message is still accepted). */
export function notMapped(
  source: string,
  code: Hl7ErrorCondition,
  message: string,
): TransformOutput {
  return { kind: 'empty', warning: { location: source, code, severity: 'W', message } };
}

/** An error at the source: the order group is refused. */
export function refused(
  source: string,
  code: Hl7ErrorCondition,
  message: string,
  brief?: string,
): TransformOutput {
  const problem = { location: source, code, severity: 'E' as const, message };
  return { kind: 'error', problem: brief === undefined ? problem : { ...problem, brief } };
}
