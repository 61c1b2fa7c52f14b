import { storableKey } from '../../common/hash';
import { unpadded } from '../../common/padding';
import { pgSafeDeep } from '../../common/pg-safe';
import type { IntakeResponse } from '../../domain/intake-outcome';
import {
  composedLineage,
  eventWithComposedIdentifiers,
  withComposedIdentifiers,
} from '../../domain/identifier-form';
import type { ToleratedQuirk } from '../../domain/order-request';
import type { StoredMessageInsert } from '../../persistence/inbound-message.repository';
import type { IntakeInput, RejectionInput } from '../intake.model';

/** What a front door hands over about any message, accepted or refused. */
export type MessageSource = Omit<RejectionInput, 'response' | 'problems'>;

/**
 * What every stored message carries, whatever its outcome: where it came from, its bytes,
 * what the front door tolerated and the answer it got.
 */
export function storedEnvelope(
  input: MessageSource,
  response: IntakeResponse,
): StoredMessageInsert {
  return {
    transport: input.transport,
    sender: input.sender,
    remoteAddress: input.remoteAddress,
    messageType: input.messageType,
    messageControlId: input.messageControlId,
    contentType: input.contentType,
    raw: input.raw,
    quirks: JSON.stringify(input.quirks),
    response: response.body,
    responseCode: response.code,
    responseContentType: response.contentType,
    ...(input.ifNoneExist === undefined ? {} : { ifNoneExist: input.ifNoneExist }),
  };
}

/** Recorded when storing replaced characters of the input's values (the raw bytes keep them). */
export const REPLACED_CHARACTERS_QUIRK: ToleratedQuirk = {
  code: 'unstorable-characters-replaced',
  detail:
    'control characters (below U+0020 but TAB, LF, CR; DEL; C1 U+0080-U+009F), NUL or lone surrogates in values were stored as U+FFFD; the raw message keeps what was sent',
};

/**
 * The input as it can be stored: values derived from it hold no NUL, control character or
 * lone surrogate (pgSafeDeep; the raw bytes stay exact; when any was replaced, a quirk says so
 * for the analyst), and the indexed values it made — idempotency key, message control id —
 * fit their btree index however long the input was (storableKey). The message control id is
 * kept without the spaces around it, as identifiers are (a fixed-width RIS pads MSH-10; the
 * audit search trims what the analyst types, so a padded id was never found); the ACK still
 * echoes it as sent and the idempotency key is derived from it unchanged.
 */
export function storableInput<
  T extends { messageControlId: string | null; idempotencyKey?: string; quirks: ToleratedQuirk[] },
>(unsafe: T): T {
  let safe = pgSafeDeep(unsafe);
  if (safe !== unsafe) safe = { ...safe, quirks: [...safe.quirks, REPLACED_CHARACTERS_QUIRK] };
  const controlId =
    safe.messageControlId === null
      ? null
      : storableKey(unpadded(safe.messageControlId) ?? safe.messageControlId);
  const key = safe.idempotencyKey === undefined ? undefined : storableKey(safe.idempotencyKey);
  if (controlId === safe.messageControlId && key === safe.idempotencyKey) return safe;
  return {
    ...safe,
    messageControlId: controlId,
    ...(key === undefined ? {} : { idempotencyKey: key }),
  };
}

/**
 * The input with every order's and patient event's identifiers in NFC (domain/identifier-form.ts):
 * the one form they are stored, indexed and looked up in, whatever transport brought them and
 * whatever form its sender wrote. The raw message keeps the sender's bytes.
 */
export function withComposedInput(input: IntakeInput): IntakeInput {
  return {
    ...input,
    orders: input.orders.map((o) => ({
      ...o,
      request: withComposedIdentifiers(o.request),
      lineage: composedLineage(o.lineage),
    })),
    ...(input.patientEvents
      ? { patientEvents: input.patientEvents.map(eventWithComposedIdentifiers) }
      : {}),
  };
}
