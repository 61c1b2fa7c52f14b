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
