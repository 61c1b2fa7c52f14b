/**
 * The values of the metadata key `sandbox_outcome` (docs/upstream-assumptions.md "Order
 * metadata keys", docs/sandbox.md): the path the sandbox takes an order through. Named once
 * here because both sides must agree: the sandbox accepts exactly these, and the adapter
 * only sends one of them (UpstreamMetadataOptions.sandboxOutcomeFromNotes).
 */
export const SANDBOX_OUTCOMES = [
  'delivered',
  'qc_failed',
  'qc_bypass_refused',
  'invalid_study',
  'unknown_status',
  'failed',
  'preprocessing_failed',
  'in_review',
  'expired',
] as const;
export type SandboxOutcome = (typeof SANDBOX_OUTCOMES)[number];

export function isSandboxOutcome(value: unknown): value is SandboxOutcome {
  return typeof value === 'string' && (SANDBOX_OUTCOMES as readonly string[]).includes(value);
}
