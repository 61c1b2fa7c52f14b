import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { UpstreamStatus } from '../imaging-spec/imaging-spec';
import type { StatusRowKey } from '../mappings/status-mapping.table';
import { systemClock, type Clock } from '../domain/clock';
import type { OrderState } from '../domain/order-state';
import { OrderDocumentRepository } from '../persistence/order-document.repository';
import { OrderRepository } from '../persistence/order.repository';
import { UploadLeaseRepository } from '../persistence/upload-lease.repository';
import { UpstreamBatchRepository } from '../persistence/upstream-batch.repository';
import { BudgetDeferral } from './budget-deferral';
import type { QcBypassDecision } from './order-events';
import { UploadLease } from './upload-lease';
import { AcquireStudyUseCase } from './use-cases/acquire-study.use-case';
import { ApplyUpstreamStatusUseCase } from './use-cases/apply-upstream-status.use-case';
import { CancelOrderUseCase } from './use-cases/cancel-order.use-case';
import { EndLocallyUseCase } from './use-cases/end-locally.use-case';
import { FetchBatchReportUseCase } from './use-cases/fetch-batch-report.use-case';
import { FetchDocumentsUseCase } from './use-cases/fetch-documents.use-case';
import type { LifecycleDeps } from './use-cases/lifecycle-deps';
import { PlaceUpstreamUseCase } from './use-cases/place-upstream.use-case';
import { QcBypassUseCase } from './use-cases/qc-bypass.use-case';
import { SweepUseCase, type SweepSummary } from './use-cases/sweep.use-case';
import { UpdateMetadataUseCase } from './use-cases/update-metadata.use-case';
import { UploadStudyUseCase } from './use-cases/upload-study.use-case';

export { BUDGET_DEFER_AFTER_MS } from './budget-deferral';
export { LIFECYCLE_JOBS } from './lifecycle-jobs';
export { SAME_STUDY_WINDOW_MS } from './upload-lease';
export type { LifecycleSettings } from './use-cases/lifecycle-deps';

/** What the use cases share, as the module provides it (the repositories are built here). */
type Deps = Pick<
  LifecycleDeps,
  'dataSource' | 'jobs' | 'imaging' | 'acquirer' | 'events' | 'logger' | 'settings'
> & {
  /** Default: the system clock. */
  clock?: Clock;
};

/**
 * The use cases of an order's life after intake: place upstream, acquire the study, upload
 * it, follow (status changes come from the poller), fetch documents, cancel, QC bypass, and
 * the deadlines. Each is idempotent and safe to run again after a crash: job handlers call
 * them with `{ orderId }`. One file per use case in ./use-cases; this facade wires them and
 * keeps the one entry point the job handlers, controllers and tests use.
 */
export class OrderLifecycleService {
  /** Identifies this process in upload leases. */
  readonly workerId = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;

  private readonly ending: EndLocallyUseCase;
  private readonly place: PlaceUpstreamUseCase;
  private readonly metadata: UpdateMetadataUseCase;
  private readonly acquire: AcquireStudyUseCase;
  private readonly upload: UploadStudyUseCase;
  private readonly status: ApplyUpstreamStatusUseCase;
  private readonly documents: FetchDocumentsUseCase;
  private readonly batchReport: FetchBatchReportUseCase;
  private readonly cancel: CancelOrderUseCase;
  private readonly qcBypass: QcBypassUseCase;
  private readonly sweeper: SweepUseCase;

  constructor(deps: Deps) {
    const shared = {
      ...deps,
      orders: new OrderRepository(deps.dataSource),
      batches: new UpstreamBatchRepository(deps.dataSource),
      documents: new OrderDocumentRepository(deps.dataSource),
      uploadLease: new UploadLeaseRepository(deps.dataSource),
      workerId: this.workerId,
      clock: deps.clock ?? systemClock,
    };
    const budget = new BudgetDeferral(shared);
    this.ending = new EndLocallyUseCase(shared);
    this.place = new PlaceUpstreamUseCase(shared, this.ending, budget);
    this.metadata = new UpdateMetadataUseCase(shared);
    this.acquire = new AcquireStudyUseCase(shared, this.ending);
    this.upload = new UploadStudyUseCase(shared, this.ending, budget, new UploadLease(shared));
    this.status = new ApplyUpstreamStatusUseCase(shared);
    this.documents = new FetchDocumentsUseCase(shared, budget);
    this.batchReport = new FetchBatchReportUseCase(shared);
    this.cancel = new CancelOrderUseCase(shared, this.ending, this.status);
    this.qcBypass = new QcBypassUseCase(shared);
    this.sweeper = new SweepUseCase(shared, this.ending);
  }

  placeUpstream(orderId: string): Promise<void> {
    return this.place.placeUpstream(orderId);
  }

  /** `PATCH /add-metadata` after the order changed (XO, FHIR update, ADT A08/A40). */
  updateMetadata(orderId: string): Promise<void> {
    return this.metadata.updateMetadata(orderId);
  }

  acquireStudy(orderId: string): Promise<void> {
    return this.acquire.acquireStudy(orderId);
  }

  uploadStudy(orderId: string): Promise<void> {
    return this.upload.uploadStudy(orderId);
  }

  applyUpstreamStatus(
    orderId: string,
    status: UpstreamStatus,
    context: { qcBypassPossible: boolean },
  ): Promise<boolean> {
    return this.status.applyUpstreamStatus(orderId, status, context);
  }

  fetchDocuments(orderId: string, upstreamStatus: string, rowKey: StatusRowKey): Promise<void> {
    return this.documents.fetchDocuments(orderId, upstreamStatus, rowKey);
  }

  /** The aggregated report of a batch, once every member is terminal. */
  fetchBatchReport(batchId: string): Promise<void> {
    return this.batchReport.fetchBatchReport(batchId);
  }

  /**
   * Our REST API's cancel (HL7 and FHIR cancels come through the intake); `restrictedTo`: only
   * an order this sender submitted (else order_not_found).
   */
  requestCancel(
    orderId: string,
    reason: string,
    actor: string,
    restrictedTo?: string,
  ): Promise<void> {
    return this.cancel.requestCancel(orderId, reason, actor, restrictedTo);
  }

  /** `order.cancel-upstream`: cancels upstream (if placed) and ends the order as cancelled. */
  cancelUpstream(orderId: string): Promise<void> {
    return this.cancel.cancelUpstream(orderId);
  }

  decideQcBypass(
    orderId: string,
    decision: { reason?: string; withdraw?: boolean; actor: string; restrictedTo?: string },
  ): Promise<QcBypassDecision> {
    return this.qcBypass.decideQcBypass(orderId, decision);
  }

  /** Study deadline, stuck upstream orders, lapsed upload leases. Returns what it did. */
  sweep(): Promise<SweepSummary> {
    return this.sweeper.sweep();
  }

  endLocally(
    orderId: string,
    to: Extract<OrderState, 'failed' | 'cancelled'>,
    reason: string,
    alert: string | null,
  ): Promise<void> {
    return this.ending.endLocally(orderId, to, reason, alert);
  }
}
