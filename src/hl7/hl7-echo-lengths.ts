/**
 * The longest values of a sender's we write back (HL7 v2.7 conformance lengths, chapter 2 and
 * 2A): the intake refuses a header over them (hl7-structure.validator.ts), and our ACK, batch
 * ACK, ORR and ORU never echo more, so an answer is valid whatever the sender's message held.
 */

/** MSH-3..6 (HD: IS 20, ST 199, ID 6 and two separators). */
export const HD_MAX_CHARS = 227;

/**
 * MSH-10 and MSA-2 (ST): 199 from v2.6 on (20 in v2.3-2.5.1, a length senders using UUIDs
 * exceed and read back whole: MSA-2 is how they match the answer, v2.5.1 §2.9.2).
 */
export const CONTROL_ID_MAX_CHARS = 199;

/** Versions whose MSH-10 and MSA-2 are ST 20 (v2.3 to v2.5.1; 199 from v2.6). */
const CONTROL_ID_20_VERSIONS: readonly string[] = ['2.3', '2.3.1', '2.4', '2.5', '2.5.1'];

/**
 * The quirk of a control ID longer than its version's MSH-10 (20 in v2.3-2.5.1) but within
 * CONTROL_ID_MAX_CHARS: taken and echoed whole in MSA-2, as the sender matches the answer by
 * it (a UUID, 36, cut to 20 would answer no message of its); the analyst sees that the answer
 * carried a longer MSA-2 than the version gives it. Undefined when it fits.
 */
export function controlIdLengthQuirk(
  version: string,
  rawControlId: string,
): { code: 'control-id-longer-than-version'; detail: string } | undefined {
  const length = [...rawControlId].length;
  if (!CONTROL_ID_20_VERSIONS.includes(version) || length <= 20 || length > CONTROL_ID_MAX_CHARS)
    return undefined;
  return {
    code: 'control-id-longer-than-version',
    detail: `MSH-10 is ${length} characters, more than the 20 that v${version} gives MSH-10 and MSA-2 (${CONTROL_ID_MAX_CHARS} from v2.6): taken, and echoed whole in MSA-2 so that the sender can match the answer`,
  };
}

/** An EI whole (ORC-2/-3, OBR-2/-3: EI.1 ST 199, EI.2 IS 20, EI.3 ST 199, EI.4 ID 6, separators). */
export const EI_MAX_CHARS = 427;

/**
 * An order number's EI as the sender wrote it (`components`, for the echo), unless it is longer
 * than an EI holds: then its number alone (EI.1, at most 199 by the identifier rule). The
 * number is what names the order; a namespace of thousands of characters (none holds more
 * than 20) went back whole in our ORR and ORU.
 */
export function boundedEi<
  T extends readonly (string | readonly (string | undefined)[] | undefined)[],
>(components: T, value: string): T | [string] {
  const length = components.reduce<number>(
    (n, c) =>
      n +
      1 +
      (typeof c === 'string'
        ? [...c].length
        : (c ?? []).reduce((m, s) => m + 1 + [...(s ?? '')].length, 0)),
    0,
  );
  return length > EI_MAX_CHARS ? [value] : components;
}
