/** Errors of the outbound side; `permanent` ones dead-letter at once (no retry can fix them). */
export type OutboundErrorCode =
  | 'order_missing'
  | 'bad_document'
  | 'invalid_resource'
  | 'invalid_uid'
  | 'no_study'
  | 'not_configured';

export class OutboundError extends Error {
  constructor(
    readonly code: OutboundErrorCode,
    message: string,
    readonly detail: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'OutboundError';
  }
}
