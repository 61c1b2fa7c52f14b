/** Every failure the pure HL7v2 layer reports, as one code union (one error class per module). */
export type Hl7ErrorCode =
  | 'MLLP_MESSAGE_TOO_LARGE'
  | 'MLLP_CONNECTION_CLOSED'
  | 'MLLP_TIMEOUT'
  | 'MLLP_NOT_CONNECTED'
  | 'HL7_EMPTY_MESSAGE'
  | 'HL7_MISSING_MSH'
  | 'HL7_BAD_ENCODING_CHARACTERS'
  | 'HL7_BAD_LOCATION';

export class Hl7Error extends Error {
  constructor(
    readonly code: Hl7ErrorCode,
    message: string,
    /** The MSH field at fault (1 or 2) for an unreadable header, for ERR-2 of the AR. */
    readonly mshField?: number,
  ) {
    super(message);
    this.name = 'Hl7Error';
  }
}
