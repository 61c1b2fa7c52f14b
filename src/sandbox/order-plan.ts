import type { UpstreamStatus } from '../imaging-spec/imaging-spec';
import type { SandboxOutcome } from './metadata-rules';
import type { StepSeconds } from './sandbox-options';
import type { PlannedStep } from './sandbox-state';

// The synthetic pipeline an order walks through: the steps each outcome plans, the failure
// reasons it reports and the QC checks it shows. Durations come from the sandbox options;
// `ms` scales them by the time scale.

/**
 * The status the `unknown_status` outcome shows: not one of the contract's values (a client
 * must survive a value it does not know). Typed as a status only so it can travel the plan.
 */
export const UNNAMED_STATUS = 'VENDOR_REVIEW_HOLD' as UpstreamStatus;

export const FAILURE_REASONS = {
  preprocessing:
    'preprocessing failed: no usable 3D T1-weighted series after skull stripping (synthetic sandbox outcome)',
  analysis: 'analysis failed: brain segmentation did not converge (synthetic sandbox outcome)',
} as const;

/** The steps an order takes once processing starts, by its synthetic outcome. */
export function planSteps(
  outcome: SandboxOutcome,
  s: StepSeconds,
  ms: (seconds: number) => number,
): PlannedStep[] {
  const head: PlannedStep[] = [
    { status: 'QUEUED', afterMs: ms(s.received) },
    { status: 'ELIGIBILITY_CHECK_RUNNING', afterMs: ms(s.queued) },
  ];
  if (outcome === 'qc_failed' || outcome === 'qc_bypass_refused' || outcome === 'invalid_study')
    return [...head, { status: 'QC_FAILED', afterMs: ms(s.eligibility) }];
  const pre: PlannedStep[] = [
    ...head,
    ...(outcome === 'unknown_status'
      ? [
          // A status value the contract does not name, listed while the order is active, for
          // as long as a manual review takes; then the order goes on as delivered.
          { status: UNNAMED_STATUS, afterMs: ms(s.eligibility) },
          { status: 'QC_PASSED' as const, afterMs: ms(s.review) },
        ]
      : [{ status: 'QC_PASSED' as const, afterMs: ms(s.eligibility) }]),
    { status: 'PREPROCESSING', afterMs: ms(s.qcPassed) },
  ];
  if (outcome === 'preprocessing_failed') {
    return [
      ...pre,
      {
        status: 'PREPROCESSING_FAILED',
        afterMs: ms(s.preprocessing),
        failureReason: FAILURE_REASONS.preprocessing,
      },
    ];
  }
  const analysis: PlannedStep[] = [
    ...pre,
    { status: 'ANALYSIS_RUNNING', afterMs: ms(s.preprocessing) },
  ];
  switch (outcome) {
    case 'failed':
      return [
        ...analysis,
        {
          status: 'FAILED',
          afterMs: ms(s.analysis),
          failureReason: FAILURE_REASONS.analysis,
        },
      ];
    case 'in_review':
      return [
        ...analysis,
        { status: 'IN_REVIEW', afterMs: ms(s.analysis) },
        { status: 'DELIVERED', afterMs: ms(s.review) },
      ];
    case 'expired':
      return [
        ...analysis,
        { status: 'DELIVERED', afterMs: ms(s.analysis) },
        { status: 'EXPIRED', afterMs: ms(s.expiry) },
      ];
    case 'delivered':
    case 'unknown_status':
      return [...analysis, { status: 'DELIVERED', afterMs: ms(s.analysis) }];
    default:
      return outcome satisfies never;
  }
}

/** The steps after a granted QC bypass (contract, "Moves"): processing resumes, then delivery. */
export function planAfterBypass(s: StepSeconds, ms: (seconds: number) => number): PlannedStep[] {
  return [
    { status: 'PREPROCESSING', afterMs: ms(s.qcBypass) },
    { status: 'ANALYSIS_RUNNING', afterMs: ms(s.preprocessing) },
    { status: 'DELIVERED', afterMs: ms(s.analysis) },
  ];
}

/** Deterministic QC checks; a failed round fails the motion check. */
export function qcChecks(
  orderId: string,
  passed: boolean,
): { name: string; result: 'pass' | 'fail' | 'warn'; value: string }[] {
  const n = [...orderId].reduce((a, c) => (a * 31 + c.charCodeAt(0)) >>> 0, 7);
  return [
    {
      name: 'motion',
      result: passed ? 'pass' : 'fail',
      value: passed
        ? `${(0.2 + (n % 30) / 100).toFixed(2)} mm mean displacement`
        : `${(1.6 + (n % 40) / 100).toFixed(2)} mm mean displacement`,
    },
    { name: 'coverage', result: 'pass', value: 'whole brain covered' },
    { name: 'snr', result: 'pass', value: `${18 + (n % 12)}` },
    { name: 'sequence', result: 'pass', value: '3D T1-weighted' },
  ];
}
