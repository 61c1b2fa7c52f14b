/** Why study acquisition failed; one code per way the caller must react. */
export const STUDY_ERROR_CODES = [
  'bad_multipart', // a multipart body that is not well formed
  'unsupported_media_type', // STOW-RS without multipart/related; type="application/dicom"
  'too_large', // the body or instance exceeds the configured limit
  'pacs_unavailable', // the PACS did not answer (network, 5xx): try again later
  'pacs_error', // the PACS answered with an error we cannot retry
  'invalid_study', // instances that are not usable (reasons are PHI-free)
  'ambiguous_study', // identifiers that match more than one study
] as const;
export type StudyErrorCode = (typeof STUDY_ERROR_CODES)[number];

export class StudyError extends Error {
  override readonly name = 'StudyError';
  /** The PACS's HTTP status, when the error is its answer. */
  readonly httpStatus?: number;

  constructor(
    readonly code: StudyErrorCode,
    message: string,
    options?: { cause?: unknown; httpStatus?: number },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.httpStatus = options?.httpStatus;
  }

  /** Transient failures: the lifecycle should ask again later rather than give up. */
  get transient(): boolean {
    return this.code === 'pacs_unavailable';
  }
}
