import { storableKey } from '../../common/hash';
import { pgSafeDeep } from '../../common/pg-safe';
import type { IntakeResponse } from '../../domain/intake-outcome';
import type { StoredMessageInsert } from '../../persistence/inbound-message.repository';
import type { RejectionInput } from '../intake.model';

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
  };
}

/**
 * The input as it can be stored: values derived from it hold no NUL or lone surrogate
 * (pgSafeDeep; the raw bytes stay exact), and the indexed values it made — idempotency key,
 * message control id — fit their btree index however long the input was (storableKey).
 */
export function storableInput<
  T extends { messageControlId: string | null; idempotencyKey?: string },
>(unsafe: T): T {
  const safe = pgSafeDeep(unsafe);
  const controlId = safe.messageControlId === null ? null : storableKey(safe.messageControlId);
  const key = safe.idempotencyKey === undefined ? undefined : storableKey(safe.idempotencyKey);
  if (controlId === safe.messageControlId && key === safe.idempotencyKey) return safe;
  return {
    ...safe,
    messageControlId: controlId,
    ...(key === undefined ? {} : { idempotencyKey: key }),
  };
}
