import type { IntakeOutcome, IntakeResponse } from '../intake-outcome';
import type { PatientInfo } from '../order-request';

/**
 * The front door a message came through (MLLP, FHIR REST, FHIR Subscription), as the intake
 * use case calls it inside its transaction: the answer to the sender is worded by the front
 * door from the intake's outcome, and a front door may store what it serves alongside the
 * order. `Tx` is the transaction handle (the persistence layer's EntityManager).
 */
export interface IntakeResponder<Tx = unknown> {
  /**
   * The answer for this outcome; `accepted: false` refuses the message (nothing of it is
   * applied and it is stored as rejected). Runs inside the intake transaction: no I/O.
   */
  respond(outcome: IntakeOutcome): IntakeResponse;
  /**
   * Runs inside the intake transaction after everything is written, only when the message is
   * accepted and new: e.g. the FHIR resource served, with its version.
   */
  afterStore?(tx: Tx, stored: { inboundMessageId: string; outcome: IntakeOutcome }): Promise<void>;
  /**
   * The idempotency key is already taken by an accepted message whose bytes are `originalRaw`:
   * undefined when this is a resend of it (answered with its stored answer); else the refusal
   * of a different message reusing the key (stored as rejected, never answered as the other).
   * `existing.patients()` reads the patients of the sender's orders under this message's
   * placer numbers, as they stand now, for a front door whose key is the order number;
   * `existing.answer` is the answer stored for the message under the key.
   */
  reusedKey?(
    originalRaw: Buffer,
    existing: { patients(): Promise<PatientInfo[]>; answer: Buffer },
  ): IntakeResponse | undefined | Promise<IntakeResponse | undefined>;
}
