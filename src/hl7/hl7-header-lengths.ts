/**
 * The longest header values we take and write back (HL7 v2.7 conformance lengths, chapter 2):
 * the intake refuses a message over them (hl7-structure.validator.ts), and our ACK never echoes
 * more (hl7-ack.builder.ts), so an answer is valid whatever the sender's header held.
 */

/** MSH-3..6 (HD: IS 20, ST 199, ID 6 and two separators). */
export const HD_MAX_CHARS = 227;

/**
 * MSH-10 and MSA-2 (ST): 199 from v2.6 on (20 in v2.3-2.5.1, a length senders using UUIDs
 * exceed and read back whole: MSA-2 is how they match the answer, v2.5.1 §2.9.2).
 */
export const CONTROL_ID_MAX_CHARS = 199;
