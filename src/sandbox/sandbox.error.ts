/**
 * The one error class of the sandbox. Each carries the HTTP status and a machine code,
 * rendered as `{"error": code, "message": text, ...details}` (docs/upstream-assumptions.md,
 * "error body").
 */
export type SandboxErrorCode =
  | 'bad_request'
  | 'malformed_json'
  | 'empty_body'
  | 'unsupported_media_type'
  | 'payload_too_large'
  | 'invalid_request'
  | 'invalid_client'
  | 'unsupported_grant_type'
  | 'invalid_scope'
  | 'invalid_token'
  | 'insufficient_scope'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'order_not_found'
  | 'batch_not_found'
  | 'upload_not_found'
  | 'invalid_metadata'
  | 'invalid_parameter'
  | 'order_terminal'
  | 'order_already_uploaded'
  | 'upload_not_open'
  | 'too_many_parts'
  | 'invalid_part'
  | 'invalid_part_order'
  | 'part_too_small'
  | 'entity_too_large'
  | 'study_too_large'
  | 'too_many_concurrent_uploads'
  | 'signature_mismatch'
  | 'url_expired'
  | 'write_only'
  | 'authorization_not_allowed'
  | 'invalid_study'
  | 'study_uid_mismatch'
  | 'report_not_available'
  | 'qc_round_not_available'
  | 'qc_bypass_not_allowed'
  | 'qc_bypass_restricted'
  | 'products_mismatch'
  | 'agent_not_registered'
  | 'rate_limited'
  | 'internal_error'
  | 'service_unavailable';

export interface FileProblem {
  file: string;
  reason: string;
}

export class SandboxError extends Error {
  constructor(
    readonly status: number,
    readonly code: SandboxErrorCode,
    message: string,
    readonly details: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'SandboxError';
  }

  body(): Record<string, unknown> {
    return { error: this.code, message: this.message, ...this.details };
  }
}

export const badRequest = (
  code: SandboxErrorCode,
  message: string,
  details?: Record<string, unknown>,
): SandboxError => new SandboxError(400, code, message, details);

export const notFound = (code: SandboxErrorCode, message: string): SandboxError =>
  new SandboxError(404, code, message);

export const conflict = (
  code: SandboxErrorCode,
  message: string,
  details?: Record<string, unknown>,
): SandboxError => new SandboxError(409, code, message, details);

export const invalidStudy = (problems: FileProblem[]): SandboxError =>
  new SandboxError(
    400,
    'invalid_study',
    `study validation failed: ${problems
      .slice(0, 3)
      .map((p) => `${p.file}: ${p.reason}`)
      .join('; ')}${problems.length > 3 ? ` (+${problems.length - 3} more)` : ''}`,
    { files: problems },
  );
