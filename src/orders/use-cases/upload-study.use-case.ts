import { knownPhiOf } from '../../audit/phi-known-values';
import { stat } from 'node:fs/promises';
import { isTerminal } from '../../domain/order-state';
import { writeAuditEvents } from '../../persistence/audit-event.repository';
import { ImagingClientError } from '../../imaging-client/imaging-client.error';
import type { UploadResult } from '../../imaging-client/study-uploader';
import { LIMITS } from '../../imaging-spec/imaging-spec';
import type { BudgetDeferral } from '../budget-deferral';
import { LIFECYCLE_JOBS } from '../lifecycle-jobs';
import { loadOrder, stateOf, transition, type OrderRow } from '../order-transitions';
import type { UploadLease } from '../upload-lease';
import { describe, errorCode, isTransient } from '../upstream-errors';
import { describeRefusal, upstreamRefusalView } from '../upstream-refusal';
import type { EndLocallyUseCase } from './end-locally.use-case';
import type { LifecycleDeps } from './lifecycle-deps';
import { withLockedOrder } from './locked-order';
import { studyRequestOf } from '../study-request';
import { queueUploadAbort } from '../upload-abandonment';

/** `order.upload-study`: uploads the packaged study under the order's upload lease. */
export class UploadStudyUseCase {
  constructor(
    private readonly deps: LifecycleDeps,
    private readonly ending: EndLocallyUseCase,
    private readonly budget: BudgetDeferral,
    private readonly lease: UploadLease,
  ) {}

  /** Identifies this process in upload leases. */
  private get workerId(): string {
    return this.deps.workerId;
  }

  private get client() {
    return this.deps.imaging.client;
  }

  private claimUpload(orderId: string): Promise<OrderRow | undefined> {
    return this.lease.claimUpload(orderId);
  }

  private releaseLease(orderId: string): Promise<void> {
    return this.lease.releaseLease(orderId);
  }

  /**
   * Uploads the packaged study under a lease (one worker per order across replicas; a killed
   * worker's lease lapses and the tick hands the upload to another, which resumes the
   * multipart parts already up). Never lets the upstream overwrite a study: while another of
   * our orders uploads the same Study Instance UID, or did less than 5 minutes ago, the
   * upload is held (audited) and tried again after the window.
   */
  async uploadStudy(orderId: string): Promise<void> {
    const { dataSource, jobs, settings } = this.deps;
    const firstCall = await this.uploadFirstCall(orderId);
    if (
      firstCall &&
      (await this.budget.deferForBudget(
        firstCall,
        LIFECYCLE_JOBS.upload,
        { orderId },
        `upload:${orderId}`,
      ))
    ) {
      return;
    }
    const claimed = await this.claimUpload(orderId);
    if (!claimed) return;
    const renew = setInterval(
      () => {
        void this.deps.uploadLease
          .renew(orderId, this.workerId, settings.leaseMs)
          .catch(() => undefined);
      },
      Math.max(500, Math.floor(settings.leaseMs / 3)),
    );
    renew.unref();
    try {
      const path = await this.packagePath(claimed);
      if (!path) return;
      let result: UploadResult;
      try {
        const upstreamOrderId = claimed.upstream_order_id!;
        result = await this.deps.imaging.uploader.upload(upstreamOrderId, path, {
          // An upload started over (the study file changed) or refused for good: its abort
          // is an outbox row, so an upstream that fails it once does not keep it open.
          abandon: (uploadId) =>
            dataSource.transaction((manager) =>
              queueUploadAbort(manager, this.deps.events, { orderId, upstreamOrderId, uploadId }),
            ),
        });
      } catch (error) {
        if (isTransient(error)) {
          await this.releaseLease(orderId);
          await writeAuditEvents(dataSource.manager, [
            {
              kind: 'error',
              orderId,
              severity: 'warning',
              actor: 'adapter',
              summary: `upload interrupted (${describe(error, knownPhiOf(claimed.request, claimed.retired_patient_identifiers))}); it resumes from the parts already sent`,
              detail: { code: errorCode(error), worker: this.workerId },
            },
          ]);
          throw error;
        }
        const now = await loadOrder(dataSource.manager, orderId);
        if (now && isTerminal(stateOf(now))) {
          // The order ended while the upload ran (its cancel taken upstream, which then
          // refuses the upload: 409 order terminal, upload not open). Nothing was refused that
          // anyone should act on; before, an error-severity upload refusal stood on the
          // timeline of an order cancelled as asked.
          await writeAuditEvents(dataSource.manager, [
            {
              kind: 'order.updated',
              orderId,
              actor: 'adapter',
              summary: `upload stopped: the order was ${now.state} while it ran (the upstream answered ${describe(error, knownPhiOf(claimed.request, claimed.retired_patient_identifiers))})`,
              detail: { code: errorCode(error), state: now.state, worker: this.workerId },
            },
          ]);
          return;
        }
        if (await this.alreadyUploaded(claimed.upstream_order_id!, error)) {
          // A run that crashed after the upload landed but before it was recorded: the
          // upstream refuses a second upload (409) and has left PENDING. Nothing is lost.
          result = { mode: 'single', sizeBytes: 0, partCount: 0, resumedParts: 0 };
        } else {
          // Every refused file with its reason (contract, Rules 3), masked, on the timeline.
          const refusal = upstreamRefusalView(
            error,
            knownPhiOf(claimed.request, claimed.retired_patient_identifiers),
          );
          await writeAuditEvents(dataSource.manager, [
            {
              kind: 'upstream.refused',
              orderId,
              severity: 'error',
              actor: 'adapter',
              summary: `the upload was refused: ${describeRefusal(refusal, describe(error, knownPhiOf(claimed.request, claimed.retired_patient_identifiers)))}`,
              detail: { action: 'upload', upstreamOrderId: claimed.upstream_order_id, refusal },
            },
          ]);
          await this.ending.endLocally(
            orderId,
            'failed',
            `the upload was refused: ${describeRefusal(refusal, describe(error, knownPhiOf(claimed.request, claimed.retired_patient_identifiers)))}`,
            'upload-refused',
          );
          return;
        }
      }
      await withLockedOrder(dataSource, orderId, async (manager, current) => {
        await transition(
          manager,
          current,
          'processing',
          {
            summary: `study uploaded (${result.mode}${result.mode === 'multipart' ? `, ${result.partCount} parts, ${result.resumedParts} resumed` : ''}, ${result.sizeBytes} bytes)`,
            detail: { ...result, worker: this.workerId },
          },
          { upload_completed_at: 'now', lease_owner: null, lease_until: null },
        );
      });
      await this.deps.acquirer.release(orderId).catch((error: unknown) => {
        this.deps.logger.warn(
          { orderId, err: (error as Error).message },
          'study package not released',
        );
      });
      jobs.kick();
    } finally {
      clearInterval(renew);
    }
  }

  /** The upload's first rate-limited call, from the package's size (the uploader's plan). */
  private async uploadFirstCall(orderId: string): Promise<string | undefined> {
    const order = await loadOrder(this.deps.dataSource.manager, orderId);
    if (!order?.package_path || !['study-ready', 'uploading'].includes(stateOf(order))) {
      return undefined;
    }
    const size = (await stat(order.package_path).catch(() => null))?.size;
    if (size === undefined) return undefined;
    return size < LIMITS.singlePutMaxBytes ? '/upload/single-put' : '/upload/multipart/initiate';
  }

  private async alreadyUploaded(upstreamOrderId: string, error: unknown): Promise<boolean> {
    if (!(error instanceof ImagingClientError) || error.code !== 'conflict') return false;
    try {
      const status = await this.client.getStatus({ orderId: upstreamOrderId });
      return status.status !== 'PENDING' && status.status !== 'CANCELLED';
    } catch {
      return false;
    }
  }

  /** The package on this machine's disk, or a fresh one (another replica packaged it). */
  private async packagePath(order: OrderRow): Promise<string | undefined> {
    if (order.package_path && (await stat(order.package_path).catch(() => null))?.isFile()) {
      return order.package_path;
    }
    const result = await this.deps.acquirer.acquire(studyRequestOf(order));
    if (result.status === 'ready') {
      await this.deps.orders.setPackagePath(order.id, result.study.packagePath);
      return result.study.packagePath;
    }
    await this.releaseLease(order.id);
    if (result.status === 'failed') {
      await this.ending.endLocally(
        order.id,
        'failed',
        `the study cannot be used: ${result.reason}`,
        result.alert ?? 'study-unusable',
      );
      return undefined;
    }
    await this.deps.jobs.enqueue(
      LIFECYCLE_JOBS.upload,
      { orderId: order.id },
      {
        jobKey: `upload:${order.id}`,
        runAt: new Date(this.deps.clock.now() + result.retryAfterMs),
      },
    );
    return undefined;
  }
}
