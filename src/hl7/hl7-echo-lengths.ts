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
