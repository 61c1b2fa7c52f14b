import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import {
  LIMITS,
  UPSTREAM_STATUS_MEANINGS,
  type UpstreamStatus,
} from '../imaging-spec/imaging-spec';
import { outcomeOf, type SandboxOutcome } from './metadata-rules';
import type { SandboxClock } from './sandbox-clock';
import type { StepSeconds } from './sandbox-options';
import {
  metadataOf,
  type CompletedUpload,
  type PlannedStep,
  type SandboxOrder,
  type SandboxState,
} from './sandbox-state';
import { conflict, invalidStudy, SandboxError } from './sandbox.error';
import type { StudyIntake } from './study-intake';

/**
 * The status the `unknown_status` outcome shows: not one of the contract's values (a client
 * must survive a value it does not know). Typed as a status only so it can travel the plan.
 */
export const UNNAMED_STATUS = 'VENDOR_REVIEW_HOLD' as UpstreamStatus;

/** `statusDesc` in /recent-activity: the contract's meaning of each status. */
export const STATUS_DESCRIPTIONS = UPSTREAM_STATUS_MEANINGS;

const ALWAYS_TERMINAL: UpstreamStatus[] = [
  'PREPROCESSING_FAILED',
  'DELIVERED',
  'FAILED',
  'CANCELLED',
  'EXPIRED',
];

const FAILURE_REASONS = {
  preprocessing:
    'preprocessing failed: no usable 3D T1-weighted series after skull stripping (synthetic sandbox outcome)',
  analysis: 'analysis failed: brain segmentation did not converge (synthetic sandbox outcome)',
} as const;

/**
 * The simulated pipeline. Steps are planned when processing starts and applied by `tick()`
 * whenever the sandbox clock has passed their due time; each due time counts from the
 * previous step's, so advancing the clock by a lot walks through every step in order.
 */
export class OrderLifecycle {
  constructor(
    private readonly state: SandboxState,
    private readonly clock: SandboxClock,
    private readonly steps: StepSeconds,
    private readonly timeScale: number,
    private readonly qcBypassWindowMs: number,
  ) {}

  private ms(seconds: number): number {
    return Math.round(seconds * 1000 * this.timeScale);
  }

  /** QC_FAILED is terminal once it can no longer be bypassed (contract: "yes or no"). */
  isQcFinal(order: SandboxOrder): boolean {
    return (
      order.status === 'QC_FAILED' &&
      order.bypass?.state !== 'pending' &&
      order.qcFailedAt !== null &&
      this.clock.now() >= order.qcFailedAt + this.qcBypassWindowMs
    );
  }

  isTerminal(order: SandboxOrder): boolean {
    return ALWAYS_TERMINAL.includes(order.status) || this.isQcFinal(order);
  }

  private plan(outcome: SandboxOutcome): PlannedStep[] {
    const s = this.steps;
    const head: PlannedStep[] = [
      { status: 'QUEUED', afterMs: this.ms(s.received) },
      { status: 'ELIGIBILITY_CHECK_RUNNING', afterMs: this.ms(s.queued) },
    ];
    if (outcome === 'qc_failed' || outcome === 'qc_bypass_refused' || outcome === 'invalid_study')
      return [...head, { status: 'QC_FAILED', afterMs: this.ms(s.eligibility) }];
    const pre: PlannedStep[] = [
      ...head,
      ...(outcome === 'unknown_status'
        ? [
            // A status value the contract does not name, listed while the order is active, for
            // as long as a manual review takes; then the order goes on as delivered.
            { status: UNNAMED_STATUS, afterMs: this.ms(s.eligibility) },
            { status: 'QC_PASSED' as const, afterMs: this.ms(s.review) },
          ]
        : [{ status: 'QC_PASSED' as const, afterMs: this.ms(s.eligibility) }]),
      { status: 'PREPROCESSING', afterMs: this.ms(s.qcPassed) },
    ];
    if (outcome === 'preprocessing_failed') {
      return [
        ...pre,
        {
          status: 'PREPROCESSING_FAILED',
          afterMs: this.ms(s.preprocessing),
          failureReason: FAILURE_REASONS.preprocessing,
        },
      ];
    }
    const analysis: PlannedStep[] = [
      ...pre,
      { status: 'ANALYSIS_RUNNING', afterMs: this.ms(s.preprocessing) },
    ];
    switch (outcome) {
      case 'failed':
        return [
          ...analysis,
          {
            status: 'FAILED',
            afterMs: this.ms(s.analysis),
            failureReason: FAILURE_REASONS.analysis,
          },
        ];
      case 'in_review':
        return [
          ...analysis,
          { status: 'IN_REVIEW', afterMs: this.ms(s.analysis) },
          { status: 'DELIVERED', afterMs: this.ms(s.review) },
        ];
      case 'expired':
        return [
          ...analysis,
          { status: 'DELIVERED', afterMs: this.ms(s.analysis) },
          { status: 'EXPIRED', afterMs: this.ms(s.expiry) },
        ];
      case 'delivered':
      case 'unknown_status':
        return [...analysis, { status: 'DELIVERED', afterMs: this.ms(s.analysis) }];
      default:
        return outcome satisfies never;
    }
  }

  setStatus(
    order: SandboxOrder,
    status: UpstreamStatus,
    at: number,
    failureReason: string | null = null,
  ): void {
    order.status = status;
    order.updatedAt = at;
    order.history.push({ status, at, failureReason, seq: this.state.nextSeq() });
    switch (status) {
      case 'QC_PASSED':
        order.qcRounds.push({
          round: 'original',
          verdict: 'passed',
          createdAt: at,
          checks: qcChecks(order.orderId, true),
          note: null,
          agentContent: null,
        });
        break;
      case 'QC_FAILED':
        order.qcRounds.push({
          round: 'original',
          verdict: 'failed',
          createdAt: at,
          checks: qcChecks(order.orderId, false),
          note: 'Motion artefacts exceed the acceptance threshold for volumetry.',
          agentContent: null,
        });
        order.qcFailedAt = at;
        this.addReport(order, 'qc', at);
        break;
      case 'QC_BYPASS':
        order.qcRounds.push({
          round: 'corrected',
          verdict: 'bypassed',
          createdAt: at,
          checks: qcChecks(order.orderId, false),
          note: `QC failure bypassed on user request${order.bypass?.reason ? `: ${order.bypass.reason}` : ''}. Results carry a QC caveat.`,
          agentContent: null,
        });
        break;
      case 'DELIVERED':
        this.addReport(order, 'results', at);
        break;
      case 'FAILED':
      case 'PREPROCESSING_FAILED':
        order.failure = { step: status, reason: failureReason ?? 'processing failed' };
        this.addReport(order, 'failure', at);
        break;
      case 'RECEIVED':
      case 'QUEUED':
      case 'PENDING':
      case 'ELIGIBILITY_CHECK_RUNNING':
      case 'PREPROCESSING':
      case 'ANALYSIS_RUNNING':
      case 'IN_REVIEW':
      case 'CANCELLED':
      case 'EXPIRED':
        break;
      default:
        status satisfies never;
    }
  }

  private addReport(order: SandboxOrder, kind: 'results' | 'failure' | 'qc', at: number): void {
    const reportId = randomUUID();
    this.state.reports.set(reportId, {
      reportId,
      orderId: order.orderId,
      organizationId: order.organizationId,
      kind,
      createdAt: at,
      acknowledged: false,
    });
  }

  private startProcessing(order: SandboxOrder, at: number): void {
    order.qcRounds = [];
    order.qcFailedAt = null;
    order.bypass = null;
    order.failure = null;
    this.setStatus(order, 'RECEIVED', at);
    order.plan = this.plan(outcomeOf(metadataOf(order)));
    order.nextAt = at + order.plan[0].afterMs;
  }

  /**
   * An upload finished (single PUT, multipart complete, or a closed group of single
   * instances). Contract "Limits": identical studies uploaded within 5 minutes overwrite each
   * other; see docs/upstream-assumptions.md for what happens to the earlier order.
   */
  /** The earlier upload of the same study within the overwrite window, if any. */
  private overwritable(
    order: SandboxOrder,
    studyUid: string | null,
    now: number,
  ): CompletedUpload | undefined {
    if (studyUid === null) return undefined;
    const windowMs = LIMITS.sameStudyOverwriteWindowSeconds * 1000;
    return [...this.state.completedUploads]
      .reverse()
      .find(
        (u) =>
          u.organizationId === order.organizationId &&
          u.studyUid === studyUid &&
          now - u.completedAt <= windowMs,
      );
  }

  /** Throws the 409 that `completeUpload` would throw, without changing anything. */
  checkUploadAllowed(order: SandboxOrder, studyUid: string | null): void {
    if (this.isTerminal(order))
      throw conflict('order_terminal', `order is ${order.status}; it accepts no upload`);
    const previous = this.overwritable(order, studyUid, this.clock.now());
    if (order.upload && order.upload !== previous && order.status !== 'PENDING') {
      throw conflict(
        'order_already_uploaded',
        'this order already has a completed upload, and this is not the same study within 5 minutes of it; create a new order',
      );
    }
  }

  async completeUpload(
    order: SandboxOrder,
    intake: StudyIntake,
    objectPaths: string[],
  ): Promise<void> {
    const now = this.clock.now();
    const studyUid = intake.studyUid;
    this.checkUploadAllowed(order, studyUid);
    if (outcomeOf(metadataOf(order)) === 'invalid_study') {
      // A refusal naming every file (contract, Rules 3), as long as a real study makes it.
      throw invalidStudy(
        (intake.files.length > 0 ? intake.files : ['uploaded object']).map((file) => ({
          file,
          reason:
            'incomplete uncompressed pixel data: declared length larger than the bytes present (synthetic sandbox outcome)',
        })),
      );
    }
    const previous = this.overwritable(order, studyUid, now);
    const ownPrevious = order.upload;
    if (previous) await this.discardUpload(previous);
    if (previous && previous.orderId !== order.orderId) {
      const other = this.state.orders.get(previous.orderId);
      if (other && !this.isTerminal(other) && other.upload === previous) {
        other.upload = null;
        other.plan = [];
        other.nextAt = null;
        this.setStatus(
          other,
          'PENDING',
          now,
          `upload overwritten by a newer upload of the same study (order ${order.orderId})`,
        );
      }
    }
    if (ownPrevious && ownPrevious !== previous) await this.discardUpload(ownPrevious);
    const record: CompletedUpload = {
      orderId: order.orderId,
      organizationId: order.organizationId,
      studyUid,
      completedAt: now,
      objectPaths,
      intake,
    };
    this.state.completedUploads.push(record);
    order.upload = record;
    order.studyMetadata = intake.metadata;
    this.startProcessing(order, now);
  }

  private async discardUpload(upload: CompletedUpload): Promise<void> {
    const i = this.state.completedUploads.indexOf(upload);
    if (i >= 0) this.state.completedUploads.splice(i, 1);
    await Promise.all(upload.objectPaths.map((p) => rm(p, { force: true })));
  }

  cancel(order: SandboxOrder): void {
    if (this.isTerminal(order))
      throw conflict(
        'order_terminal',
        `order is already ${order.status}; only an order in progress can be cancelled`,
      );
    order.plan = [];
    order.nextAt = null;
    order.instanceGroup = null;
    if (order.bypass?.state === 'pending') order.bypass.state = 'withdrawn';
    this.setStatus(order, 'CANCELLED', this.clock.now());
  }

  requestBypass(order: SandboxOrder, reason: string | null, clientId: string): void {
    if (order.status !== 'QC_FAILED' || this.isQcFinal(order)) {
      throw conflict(
        'qc_bypass_not_allowed',
        `order is ${order.status}${this.isQcFinal(order) ? ' (bypass window closed)' : ''}; a QC bypass needs a bypassable QC_FAILED order`,
      );
    }
    if (outcomeOf(metadataOf(order)) === 'qc_bypass_refused') {
      // Contract, "Moves": a bypass needs an eligible order, and "manual review restrictions
      // still apply". This outcome is an order under such a restriction: refused with the
      // Errors table's 403 (do not retry), nothing recorded.
      throw new SandboxError(
        403,
        'qc_bypass_restricted',
        'manual review restrictions apply to this order: a QC bypass is not permitted',
      );
    }
    if (order.bypass?.state === 'pending') {
      order.bypass.reason = reason ?? order.bypass.reason;
      return;
    }
    const now = this.clock.now();
    order.bypass = {
      state: 'pending',
      reason,
      requestedAt: now,
      decideAt: now + this.ms(this.steps.bypassVerdict),
      clientId,
    };
  }

  withdrawBypass(order: SandboxOrder): void {
    if (order.bypass?.state !== 'pending') {
      throw conflict(
        'qc_bypass_not_allowed',
        'there is no pending QC bypass request to withdraw (the verdict may already be given)',
      );
    }
    order.bypass.state = 'withdrawn';
  }

  /** Applies everything that is due. Returns the number of changes made. */
  async tick(): Promise<number> {
    const now = this.clock.now();
    let changes = 0;
    for (const order of this.state.orders.values()) {
      const group = order.instanceGroup;
      if (group && now - group.lastAt >= LIMITS.singleInstanceJoinGapSeconds * 1000) {
        order.instanceGroup = null;
        const merged = mergeInstanceIntakes(group.intakes);
        try {
          await this.completeUpload(order, merged, group.paths);
        } catch {
          await Promise.all(group.paths.map((p) => rm(p, { force: true })));
        }
        changes++;
      }
      if (
        order.bypass?.state === 'pending' &&
        order.bypass.decideAt <= now &&
        order.status === 'QC_FAILED'
      ) {
        const at = order.bypass.decideAt;
        order.bypass.state = 'granted';
        this.setStatus(order, 'QC_BYPASS', at);
        order.plan = [
          { status: 'PREPROCESSING', afterMs: this.ms(this.steps.qcBypass) },
          { status: 'ANALYSIS_RUNNING', afterMs: this.ms(this.steps.preprocessing) },
          { status: 'DELIVERED', afterMs: this.ms(this.steps.analysis) },
        ];
        order.nextAt = at + order.plan[0].afterMs;
        changes++;
      }
      while (order.nextAt !== null && order.nextAt <= now && order.plan.length > 0) {
        const step = order.plan.shift()!;
        const at = order.nextAt;
        this.setStatus(order, step.status, at, step.failureReason ?? null);
        order.nextAt = order.plan.length > 0 ? at + order.plan[0].afterMs : null;
        changes++;
      }
    }
    return changes;
  }
}

/** Deterministic QC checks; a failed round fails the motion check. */
function qcChecks(
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

function mergeInstanceIntakes(intakes: StudyIntake[]): StudyIntake {
  const first = intakes[0];
  const uids = new Set(intakes.flatMap((i) => i.sopInstanceUids));
  return {
    ...first,
    instances: uids.size,
    bytes: intakes.reduce((a, i) => a + i.bytes, 0),
    sopInstanceUids: [...uids],
    files: intakes.flatMap((i) => i.files),
    acquisition: {
      ...first.acquisition,
      seriesDescriptions: [...new Set(intakes.flatMap((i) => i.acquisition.seriesDescriptions))],
    },
  };
}
