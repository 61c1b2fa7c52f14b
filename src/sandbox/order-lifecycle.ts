import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import {
  LIMITS,
  UPSTREAM_STATUS_MEANINGS,
  type UpstreamStatus,
} from '../imaging-spec/imaging-spec';
import { outcomeOf } from './metadata-rules';
import { planAfterBypass, planSteps, qcChecks } from './order-plan';
import type { SandboxClock } from './sandbox-clock';
import type { StepSeconds } from './sandbox-options';
import {
  metadataOf,
  type CompletedUpload,
  type SandboxOrder,
  type SandboxState,
} from './sandbox-state';
import { conflict, invalidStudy, SandboxError } from './sandbox.error';
import type { StudyIntake } from './study-intake';
import { mergeInstanceIntakes } from './study-summary';
import { discardUpload, findOverwritable } from './upload-overwrite';

// The planned steps and the synthetic QC content live in order-plan.ts.
export { UNNAMED_STATUS } from './order-plan';

/** `statusDesc` in /recent-activity: the contract's meaning of each status. */
export const STATUS_DESCRIPTIONS = UPSTREAM_STATUS_MEANINGS;

const ALWAYS_TERMINAL: UpstreamStatus[] = [
  'PREPROCESSING_FAILED',
  'DELIVERED',
  'FAILED',
  'CANCELLED',
  'EXPIRED',
];

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
    order.plan = planSteps(outcomeOf(metadataOf(order)), this.steps, (seconds) => this.ms(seconds));
    order.nextAt = at + order.plan[0].afterMs;
  }

  /** 409 for an order that has ended: it accepts no upload (nor an upload URL). */
  assertAcceptsUpload(order: SandboxOrder): void {
    if (this.isTerminal(order))
      throw conflict('order_terminal', `order is ${order.status}; it accepts no upload`);
  }

  /** Throws the 409 that `completeUpload` would throw, without changing anything. */
  checkUploadAllowed(order: SandboxOrder, studyUid: string | null): void {
    this.assertAcceptsUpload(order);
    const previous = findOverwritable(this.state, order, studyUid, this.clock.now());
    if (order.upload && order.upload !== previous && order.status !== 'PENDING') {
      throw conflict(
        'order_already_uploaded',
        'this order already has a completed upload, and this is not the same study within 5 minutes of it; create a new order',
      );
    }
  }

  /**
   * An upload finished (single PUT, multipart complete, or a closed group of single
   * instances). Contract "Limits": identical studies uploaded within 5 minutes overwrite each
   * other; see docs/upstream-assumptions.md for what happens to the earlier order.
   */
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
    const previous = findOverwritable(this.state, order, studyUid, now);
    const ownPrevious = order.upload;
    if (previous) await discardUpload(this.state, previous);
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
    if (ownPrevious && ownPrevious !== previous) await discardUpload(this.state, ownPrevious);
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
        order.plan = planAfterBypass(this.steps, (seconds) => this.ms(seconds));
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
