import { Hl7Delimiters } from './hl7-escape';

/**
 * Bounds on the shape of one message (issue #15): every loop over segments, fields,
 * repetitions and components is bounded by them, whatever the sender put in. A message over a
 * bound is refused (AR) with an ERR at the first place it was exceeded; it is never truncated.
 */
export interface Hl7ParseLimits {
  maxSegments: number;
  maxFieldsPerSegment: number;
  maxRepetitions: number;
  maxComponents: number;
}

export const DEFAULT_HL7_PARSE_LIMITS: Hl7ParseLimits = {
  maxSegments: 5_000,
  maxFieldsPerSegment: 500,
  maxRepetitions: 1_000,
  maxComponents: 100,
};

/** Where and how a message exceeded an Hl7ParseLimits bound. */
export interface Hl7LimitViolation {
  /** `segment-id`: a line shaped like a segment whose ID is none (it cannot be placed). */
  kind: 'segments' | 'fields' | 'repetitions' | 'components' | 'segment-id';
  /** e.g. `PID-3`, `NTE[4990]-1` (the first segment over the bound); none for a line */
  location?: string;
  message: string;
  /** The sentence in 80 characters, advice first, for a v2.1-2.4 MSA-3. */
  brief?: string;
}

/**
 * Counts fields, repetitions, components and subcomponents of one segment against the limits, in one pass
 * over its characters (no splitting): linear in the segment's length.
 */
export function checkFieldShape(
  fields: readonly string[],
  id: string,
  where: string,
  delimiters: Hl7Delimiters,
  limits: Hl7ParseLimits,
  violation: (
    kind: Hl7LimitViolation['kind'],
    location: string,
    message: string,
    /** The refusal in 80 characters, advice first (a v2.1-2.4 MSA-3). */
    brief: string,
  ) => void,
): void {
  if (fields.length - 1 > limits.maxFieldsPerSegment) {
    violation(
      'fields',
      `${where}-${limits.maxFieldsPerSegment + 1}`,
      `${where} has ${fields.length - 1} fields; at most ${limits.maxFieldsPerSegment} are accepted (HL7_MAX_FIELDS)`,
      `Send at most ${limits.maxFieldsPerSegment} fields per segment: ${where} has ${fields.length - 1}`,
    );
  }
  const first = id === 'MSH' ? 3 : 1;
  const { repetition, component, subcomponent } = delimiters;
  for (let f = first; f < fields.length; f += 1) {
    const text = fields[f];
    // A field shorter than the bound cannot exceed it.
    if (text.length < Math.min(limits.maxRepetitions, limits.maxComponents)) continue;
    let reps = 1;
    let comps = 1;
    let maxComps = 1;
    let subs = 1;
    let maxSubs = 1;
    for (let i = 0; i < text.length; i += 1) {
      const ch = text[i];
      if (ch === repetition) {
        reps += 1;
        comps = 1;
        subs = 1;
      } else if (ch === component) {
        comps += 1;
        subs = 1;
        if (comps > maxComps) maxComps = comps;
      } else if (ch === subcomponent) {
        subs += 1;
        if (subs > maxSubs) maxSubs = subs;
      }
    }
    if (reps > limits.maxRepetitions) {
      violation(
        'repetitions',
        `${where}-${f}`,
        `${where}-${f} has ${reps} repetitions; at most ${limits.maxRepetitions} are accepted (HL7_MAX_REPETITIONS)`,
        `Send at most ${limits.maxRepetitions} repetitions: ${where}-${f} has ${reps}`,
      );
    }
    if (maxComps > limits.maxComponents) {
      violation(
        'components',
        `${where}-${f}`,
        `${where}-${f} has ${maxComps} components in one repetition; at most ${limits.maxComponents} are accepted (HL7_MAX_COMPONENTS)`,
        `Send at most ${limits.maxComponents} components: ${where}-${f} has ${maxComps}`,
      );
    }
    // subcomponents too (CX-4 HD, XCN-9): the same bound as components
    if (maxSubs > limits.maxComponents) {
      violation(
        'components',
        `${where}-${f}`,
        `${where}-${f} has ${maxSubs} subcomponents in one component; at most ${limits.maxComponents} are accepted (HL7_MAX_COMPONENTS)`,
        `Send at most ${limits.maxComponents} subcomponents: ${where}-${f} has ${maxSubs}`,
      );
    }
  }
}
