import type { PersonName, Practitioner } from '../domain/order-request';
import {
  EMPTY,
  readComposite,
  rep,
  type LineageLine,
  type TransformFn,
  type TransformOutput,
} from './hl7-value.kit';

/** Person names (XPN) and practitioners (XCN), chapter 2A. */

type NameParts = Partial<Record<'family' | 'given' | 'middle' | 'suffix' | 'prefix', string>>;

/**
 * A PersonName from its parts; the given and second given names become `given[0]` and
 * `given[1]` (or `given[0]` alone when only the second is sent), their lineage lines too.
 */
function personName(values: NameParts, lines: LineageLine[]): TransformOutput {
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

/** XPN: family (FN.1) ^ given ^ second given ^ suffix ^ prefix. First repetition. */
export const xpn: TransformFn = (input) => {
  const { values, lines } = readComposite(input, rep(input), {
    family: [1, 1],
    given: [2],
    middle: [3],
    suffix: [4],
    prefix: [5],
  });
  return personName(values, lines);
};

/** XCN: ID ^ family ^ given ^ second given ^ suffix ^ prefix ^ degree ^ source ^ authority. */
export const xcn: TransformFn = (input) => {
  const { values, lines } = readComposite(input, rep(input), {
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
  const name = personName(values, nameLines);
  if (name.kind === 'value') {
    practitioner.name = name.value as PersonName;
    out.push(...name.lines);
  }
  return Object.keys(practitioner).length === 0
    ? EMPTY
    : { kind: 'value', value: practitioner, lines: out };
};

/**
 * The ordering provider of a v2.7+ order that names its people in PRT segments (participation,
 * v2.8.2 chapter 7): PRT-5 (XCN) of the order group's first PRT whose PRT-4 is `OP` (table
 * 0912, Ordering Provider). Since v2.7 ORC-12 and OBR-16 are kept for backward compatibility
 * only; an EHR that leaves them empty had its orders stored without an ordering provider
 * (the upstream's referring_physician left out).
 */
export const prtOrderingProvider: TransformFn = (input) => {
  const prt = input.sameId.find((s) => s.value(4) === 'OP');
  return prt ? xcn({ ...input, segment: prt }) : EMPTY;
};
