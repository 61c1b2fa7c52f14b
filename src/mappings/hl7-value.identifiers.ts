import type { AssigningAuthority, Identifier } from '../domain/order-request';
import { hasControlCharacters } from '../domain/identifier-bounds';
import { primaryIdentifier } from '../domain/patient-identity';
import type { PatientInfo } from '../domain/order-request';
import { hasMatchingCharacters, MATCHING_CHARACTERS_MESSAGE } from './dicom-identifiers';
import { asSent, EMPTY, notMapped, ofValue, readComposite, refused, rep } from './hl7-value.kit';
import { unpadded } from '../common/padding';
import type { LineageLine, TransformFn, TransformInput } from './hl7-value.kit';

/** Identifiers: CX and EI (chapter 2A), DICOM UIDs, accession numbers. */

/**
 * An identifier's system: the namespace ID, else the universal ID (an OID), with the
 * lineage line of whichever was used (`at` gives the location of each).
 */
function systemOf(
  values: { namespace?: string; universalId?: string },
  suffix: string,
  at: (part: 'namespace' | 'universalId') => string,
): { system?: string; line?: LineageLine } {
  const part = values.namespace !== undefined ? 'namespace' : 'universalId';
  const system = values[part];
  if (system === undefined) return {};
  return { system, line: { suffix, source: at(part), value: system } };
}

/** One CX repetition as read: its number and the components cxList keeps. */
interface CxRead {
  r: number;
  values: Partial<Record<'value' | 'namespace' | 'universalId' | 'type', string>>;
}

/**
 * PID-3 / MRG-1 CX: ID ^ check digit ^ scheme ^ assigning authority (HD) ^ type.
 *
 * A PID-3 repetition whose ID holds a control character (a scanner's TAB, `\X09\`) and is not
 * the identifier the order is known by (primaryIdentifier: the one studies are matched by) is
 * left out, with a quirk and a warning at it: it matches nothing either way, and refusing the
 * order for a social security number with a TAB would hold up an examination its record number
 * names exactly. The identifier the order is known by keeps it, and the rule for every
 * identifier (identifier-bounds.ts) refuses the order. MRG-1 is not filtered: every prior
 * identifier names a record to merge.
 */
export const cxList: TransformFn = (input) => {
  const field = input.loc.field;
  const count = input.segment.repetitionCount(field);
  const read: CxRead[] = [];
  for (let r = 1; r <= count; r += 1) {
    const { values } = readComposite(
      input,
      r,
      {
        value: [1],
        namespace: [4, 1],
        universalId: [4, 2],
        type: [5],
      },
      '',
      unpadded,
    );
    if (values.value !== undefined) read.push({ r, values });
  }
  const dropped = droppedRepetitions(input, read);
  const out: Identifier[] = [];
  const lines: LineageLine[] = [];
  for (const { r, values } of read) {
    if (dropped.has(r)) continue;
    const id: Identifier = { value: values.value! };
    const i = out.length;
    lines.push({
      suffix: `[${i}].value`,
      source: input.segment.locationOf(field, r, 1),
      value: values.value!,
    });
    // CX-4 HD: namespace ID, else universal ID, as the identifier's system.
    const { system, line } = systemOf(values, `[${i}].system`, (part) =>
      input.segment.locationOf(field, r, 4, part === 'namespace' ? 1 : 2),
    );
    if (system !== undefined) {
      id.system = system;
      lines.push(line!);
    }
    if (values.type !== undefined) {
      id.type = values.type;
      lines.push({
        suffix: `[${i}].type`,
        source: input.segment.locationOf(field, r, 5),
        value: values.type,
      });
    }
    out.push(id);
  }
  if (out.length === 0) return EMPTY;
  const first = [...dropped][0];
  if (first === undefined) return { kind: 'value', value: out, lines };
  const at = input.segment.locationOf(field, first, 1);
  const message = `${at}: a patient identifier holding a control character (TAB, CR, LF ...) left out (${dropped.size} of ${read.length}); the order is known by another`;
  input.quirks.add('identifier-control-character', message);
  return {
    kind: 'value',
    value: out,
    lines,
    warning: { location: at, code: 102, severity: 'W', message },
  };
};

/** The PID-3 repetitions left out (see cxList): control characters, not the primary one. */
function droppedRepetitions(input: TransformInput, read: readonly CxRead[]): Set<number> {
  const out = new Set<number>();
  if (input.segment.id !== 'PID' || !read.some((x) => hasControlCharacters(x.values.value!)))
    return out;
  const ids: Identifier[] = read.map(({ values }) => ({
    value: values.value!,
    ...((values.namespace ?? values.universalId)
      ? { system: values.namespace ?? values.universalId }
      : {}),
    ...(values.type !== undefined ? { type: values.type } : {}),
  }));
  const primary = primaryIdentifier({ identifiers: ids } as PatientInfo);
  ids.forEach((id, i) => {
    if (id !== primary && hasControlCharacters(id.value)) out.add(read[i].r);
  });
  return out;
}

/** EI: entity identifier ^ namespace ID ^ universal ID ^ universal ID type. */
export const ei: TransformFn = (input) => {
  const { values } = readComposite(
    input,
    rep(input),
    {
      value: [1],
      namespace: [2],
      universalId: [3],
    },
    '',
    unpadded,
  );
  if (values.value === undefined) return EMPTY;
  const { field, repetition } = input.loc;
  const id: Identifier = { value: values.value };
  const lines: LineageLine[] = [
    {
      suffix: '.value',
      source: input.segment.locationOf(field, repetition, 1),
      value: values.value,
    },
  ];
  const { system, line } = systemOf(values, '.system', (part) =>
    input.segment.locationOf(field, repetition, part === 'namespace' ? 2 : 3),
  );
  if (system !== undefined) {
    id.system = system;
    lines.push(line!);
  }
  return { kind: 'value', value: id, lines };
};

/** DICOM UID syntax (PS3.5 section 9.1): digits and dots, no leading zeros, at most 64 chars. */
const UID_PATTERN = /^(0|[1-9]\d*)(\.(0|[1-9]\d*))+$/;

export const uid: TransformFn = ofValue(
  (value, source) =>
    !UID_PATTERN.test(value) || value.length > 64
      ? notMapped(source, 102, `${source} is not a DICOM UID`)
      : asSent(value, source),
  unpadded,
);

/**
 * An accession number (IPC-1, OBR-18): a string that must not hold DICOM matching characters,
 * or the study query would match other patients' studies (AE at the field, issue #15). A
 * control character in it is refused by the rule for every identifier (identifier-bounds.ts).
 */
export const accession: TransformFn = ofValue(
  (value, source) =>
    hasMatchingCharacters(value)
      ? refused(
          source,
          102,
          `${source}: ${MATCHING_CHARACTERS_MESSAGE}`,
          `Remove the DICOM matching character (* ? \\) from the accession number (${source})`,
        )
      : asSent(value, source),
  unpadded,
);

/**
 * Who issued the accession number: EI components 2-4 (namespace ID, universal ID, universal ID
 * type; v2.5.1 §2.A.28) of the field the accession was read from (IPC-1 is EI; a RIS that
 * writes OBR-18 as `ACC^RIS_A` uses the same layout). Only when that field's first component is
 * the order's accession: a field holding another number (a site's first-wins accession sources)
 * does not lend the order its issuer. No value: no issuer, the study's is not compared.
 */
export const accessionIssuer: TransformFn = (input) => {
  const { values, lines } = readComposite(
    input,
    rep(input),
    { namespace: [2], universalId: [3], universalIdType: [4] },
    '',
    unpadded,
  );
  const number = input.segment.value(input.loc.field, rep(input), 1, 1);
  const accession = input.partial.accessionNumber;
  if (accession === undefined || number === undefined || unpadded(number) !== accession)
    return EMPTY;
  if (values.namespace === undefined && values.universalId === undefined) return EMPTY;
  const issuer: AssigningAuthority = { ...values };
  return { kind: 'value', value: issuer, lines };
};
