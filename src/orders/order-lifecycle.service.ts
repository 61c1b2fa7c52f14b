import { randomBytes } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { DataSource, EntityManager } from 'typeorm';
import { writeAuditEvents } from '../audit/audit-writer';
import type { UpstreamStatus } from '../imaging-spec/imaging-spec';
import { ImagingClientError } from '../imaging-client/imaging-client.error';
import type { ProductionImagingClient } from '../imaging-client/imaging-client.factory';
import type { UploadResult } from '../imaging-client/study-uploader';
import { LIMITS } from '../imaging-spec/imaging-spec';
import type { JobQueue } from '../jobs/job-queue';
import {
  STATUS_MAPPING_VERSION,
  statusRow,
  type StatusRowKey,
} from '../mappings/status-mapping.table';
import { ACQUIRE_STUDY_JOB, type StudyAcquirer } from '../studies/study.ports';
import { isTerminal, phaseOf, type OrderState } from '../domain/order-state';
import { toUpstreamMetadata } from '../mappings/upstream-metadata';
import { ORDER_JOBS } from './order-intake.service';
import type { OrderEvents, QcBypassDecision, StoredDocument } from './order-events';
import { OrderLifecycleError } from './order-lifecycle.error';
import { budgetDeferrals, orderAlerts } from './order-metrics';
import { OrderDocumentRepository } from '../persistence/order-document.repository';
import { OrderRepository } from '../persistence/order.repository';
import { UploadLeaseRepository } from '../persistence/upload-lease.repository';
import { UpstreamBatchRepository } from '../persistence/upstream-batch.repository';
import { loadOrder, snapshot, stateOf, transition, type OrderRow } from './order-transitions';

/** Jobs of the lifecycle beyond the three the intake enqueues (ORDER_JOBS). */
export const LIFECYCLE_JOBS = {
  acquire: ACQUIRE_STUDY_JOB,
  upload: 'order.upload-study',
  fetchDocuments: 'order.fetch-documents',
  fetchBatchReport: 'order.fetch-batch-report',
  /** Every minute, once per cluster: deadlines, lapsed upload leases, the poll cycle when due. */
  tick: 'order.lifecycle-tick',
} as const;

/** The upstream overwrites a study uploaded again within 5 minutes (contract, Limits). */
export const SAME_STUDY_WINDOW_MS = 5 * 60_000;

/**
 * A job whose first upstream call would wait longer than this for our rate budget is put
 * back for when the budget frees, instead of holding one of the few job workers while it
 * waits. Otherwise, once one endpoint is saturated (a burst of new orders: 100 creates at a
 * budget of 50/min), every worker sits waiting for it, and the next steps of the orders
 * already under way (upload, documents) queue behind: the steps run one after the other
 * instead of together, and a burst takes the sum of their times (docs/fire.md).
 */
export const BUDGET_DEFER_AFTER_MS = 2_000;

export interface LifecycleSettings {
  studyDeadlineMs: number;
  upstreamStuckMs: number;
  leaseMs: number;
  sandboxOutcomeFromNotes: boolean;
}

interface Deps {
  dataSource: DataSource;
  jobs: JobQueue;
  imaging: ProductionImagingClient;
  acquirer: StudyAcquirer;
  events: OrderEvents;
  logger: Logger;
  settings: LifecycleSettings;
}

/**
 * The use cases of an order's life after intake: place upstream, acquire the study, upload
 * it, follow (status changes come from the poller), fetch documents, cancel, QC bypass, and
 * the deadlines. Each is idempotent and safe to run again after a crash: job handlers call
 * them with `{ orderId }`.
 */
export class OrderLifecycleService {
  /** Identifies this process in upload leases. */
  readonly workerId = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;

  private readonly orders: OrderRepository;
  private readonly batches: UpstreamBatchRepository;
  private readonly documents: OrderDocumentRepository;
  private readonly uploadLease: UploadLeaseRepository;

  constructor(private readonly deps: Deps) {
    this.orders = new OrderRepository(deps.dataSource);
    this.batches = new UpstreamBatchRepository(deps.dataSource);
    this.documents = new OrderDocumentRepository(deps.dataSource);
    this.uploadLease = new UploadLeaseRepository(deps.dataSource);
  }

  private get client() {
    return this.deps.imaging.client;
  }

  // ---- place upstream ----

  async placeUpstream(orderId: string): Promise<void> {
    const { dataSource } = this.deps;
    const order = await loadOrder(dataSource.manager, orderId);
    if (!order || stateOf(order) !== 'received') return;
    if (order.cancel_requested_at) {
      await this.endLocally(orderId, 'cancelled', 'cancelled before it was placed upstream', null);
      return;
    }
    const products = order.request.products;
    if (order.placer_group_number) {
      const batch = await this.findBatch(dataSource.manager, order);
      if (batch && !sameProducts(batch.products, products)) {
        await this.endLocally(
          orderId,
          'failed',
          `its products (${products.join(', ')}) differ from those of its batch, placer group ${order.placer_group_number} (${batch.products.join(', ')}): the upstream runs a batch with one products list`,
          'batch-products-mismatch',
        );
        return;
      }
    }
    const previouslyAttempted = order.place_attempted_at !== null;
    // A retry looks for an earlier attempt's order first (GET /list-orders).
    const firstCall = previouslyAttempted ? '/list-orders' : '/new-order';
    if (await this.deferForBudget(firstCall, ORDER_JOBS.place, { orderId }, `place:${orderId}`)) {
      return;
    }
    if (!previouslyAttempted) {
      await this.orders.markPlaceAttempted(orderId);
    }
    let upstreamOrderId: string;
    let recovered: boolean;
    try {
      const metadata = toUpstreamMetadata(order.request, {
        sandboxOutcomeFromNotes: this.deps.settings.sandboxOutcomeFromNotes,
      });
      const created = await this.client.createOrder(metadata, {
        correlationId: order.id,
        previouslyAttempted,
        attemptedSince: order.place_attempted_at?.getTime(),
        // Upstream orders we already hold for other orders are not this one's lost create.
        knownElsewhere: async (ids) =>
          new Set(await this.orders.upstreamOrderIdsHeldElsewhere(ids, orderId)),
      });
      upstreamOrderId = created.orderId;
      recovered = created.recovered;
    } catch (error) {
      if (isTransient(error)) throw error;
      await this.endLocally(
        orderId,
        'failed',
        `the upstream refused the order: ${describe(error)}`,
        'upstream-refused',
      );
      return;
    }
    let batchId: string | null = null;
    if (order.placer_group_number) {
      batchId = await this.joinBatch(order, upstreamOrderId);
    }
    let cancelRaced = false;
    await dataSource.transaction(async (manager) => {
      const current = await loadOrder(manager, orderId, true);
      if (!current) return;
      const moved = await transition(
        manager,
        current,
        'placed',
        {
          summary: recovered
            ? 'upstream order found again by our correlation id (created by an earlier attempt)'
            : 'upstream order created with its metadata',
          detail: { upstreamOrderId, recovered, batchId, products },
        },
        {
          upstream_order_id: upstreamOrderId,
          upstream_status: 'PENDING',
          upstream_status_at: 'now',
          placed_at: 'now',
          study_deadline_at: new Date(Date.now() + this.deps.settings.studyDeadlineMs),
          ...(batchId ? { upstream_batch_id: batchId } : {}),
        },
      );
      if (!moved.applied) return;
      cancelRaced = current.cancel_requested_at !== null;
      await this.deps.jobs.enqueue(
        cancelRaced ? ORDER_JOBS.cancel : LIFECYCLE_JOBS.acquire,
        { orderId },
        { manager, jobKey: cancelRaced ? `cancel:${orderId}` : `acquire:${orderId}` },
      );
    });
    this.deps.jobs.kick();
  }

  private async findBatch(
    manager: EntityManager,
    order: OrderRow,
  ): Promise<{ batch_id: string | null; products: string[] } | undefined> {
    return this.batches.findByGroup(order.sender ?? '', order.placer_group_number, manager);
  }

  /**
   * A placer group (ORC-4) or FHIR requisition is one upstream batch: created by the first
   * member placed (under a row lock, so two replicas never create two), joined by the rest.
   * A refused association (products mismatch) is an error on the order, which goes on alone.
   */
  private async joinBatch(order: OrderRow, upstreamOrderId: string): Promise<string | null> {
    const { dataSource } = this.deps;
    const group = order.placer_group_number!;
    const sender = order.sender ?? '';
    const batchId = await dataSource.transaction(async (manager) => {
      await this.batches.insertIfAbsent(sender, group, order.request.products, manager);
      const existing = await this.batches.lockBatchId(sender, group, manager);
      if (existing) return existing;
      const created = await this.client.createBatch(order.request.products);
      await this.batches.setBatchId(sender, group, created.batchId, manager);
      await writeAuditEvents(manager, [
        {
          kind: 'order.batch',
          orderId: order.id,
          actor: 'adapter',
          summary: `upstream batch created for placer group ${group}`,
          detail: { batchId: created.batchId, placerGroupNumber: group },
        },
      ]);
      return created.batchId;
    });
    try {
      await this.client.associateOrderToBatch(upstreamOrderId, batchId);
      await writeAuditEvents(dataSource.manager, [
        {
          kind: 'order.batch',
          orderId: order.id,
          actor: 'adapter',
          summary: `order joined the upstream batch of placer group ${group}`,
          detail: { batchId, placerGroupNumber: group },
        },
      ]);
      return batchId;
    } catch (error) {
      if (isTransient(error)) throw error;
      const reason = `the upstream refused to add the order to the batch of placer group ${group}: ${describe(error)}`;
      await this.orders.setLastError(order.id, reason);
      await writeAuditEvents(dataSource.manager, [
        {
          kind: 'error',
          orderId: order.id,
          severity: 'error',
          actor: 'adapter',
          summary: reason,
          detail: { batchId, placerGroupNumber: group, code: errorCode(error) },
        },
      ]);
      return null;
    }
  }

  /** `PATCH /add-metadata` after the order changed (XO, FHIR update, ADT A08/A40). */
  async updateMetadata(orderId: string): Promise<void> {
    const order = await loadOrder(this.deps.dataSource.manager, orderId);
    // Not placed yet: the create will carry the current metadata.
    if (!order?.upstream_order_id || isTerminal(stateOf(order))) return;
    try {
      await this.client.addMetadata(
        { orderId: order.upstream_order_id },
        toUpstreamMetadata(order.request, {
          sandboxOutcomeFromNotes: this.deps.settings.sandboxOutcomeFromNotes,
        }),
      );
    } catch (error) {
      if (isTransient(error)) throw error;
      await writeAuditEvents(this.deps.dataSource.manager, [
        {
          kind: 'error',
          orderId,
          severity: 'warning',
          actor: 'adapter',
          summary: `changed metadata not accepted upstream: ${describe(error)}`,
          detail: { code: errorCode(error) },
        },
      ]);
      return;
    }
    await writeAuditEvents(this.deps.dataSource.manager, [
      {
        kind: 'order.updated',
        orderId,
        actor: 'adapter',
        summary: 'changed metadata sent upstream (add-metadata)',
        detail: { upstreamOrderId: order.upstream_order_id },
      },
    ]);
  }

  // ---- study ----

  async acquireStudy(orderId: string): Promise<void> {
    const { dataSource, jobs } = this.deps;
    const order = await loadOrder(dataSource.manager, orderId);
    if (!order || order.cancel_requested_at) return;
    const state = stateOf(order);
    if (state === 'study-ready') {
      await jobs.enqueue(LIFECYCLE_JOBS.upload, { orderId }, { jobKey: `upload:${orderId}` });
      return;
    }
    if (state !== 'placed') return;
    if (order.study_deadline_at && order.study_deadline_at.getTime() <= Date.now()) {
      await this.studyDeadlinePassed(orderId);
      return;
    }
    const result = await this.deps.acquirer.acquire({
      orderId,
      studyInstanceUid: order.study_instance_uid,
      accessionNumber: order.accession_number,
      patientId: order.patient_id,
    });
    switch (result.status) {
      case 'waiting': {
        const deadline = order.study_deadline_at?.getTime() ?? Infinity;
        const at = Math.min(Date.now() + result.retryAfterMs, deadline + 1000);
        await jobs.enqueue(
          LIFECYCLE_JOBS.acquire,
          { orderId },
          { jobKey: `acquire:${orderId}`, runAt: new Date(at) },
        );
        return;
      }
      case 'failed':
        await this.endLocally(
          orderId,
          'failed',
          `the study cannot be used: ${result.reason}`,
          result.alert ?? 'study-unusable',
        );
        return;
      case 'ready':
        await dataSource.transaction(async (manager) => {
          const current = await loadOrder(manager, orderId, true);
          if (!current) return;
          const moved = await transition(
            manager,
            current,
            'study-ready',
            {
              summary: `study packaged (${result.study.instanceCount} instances, ${result.study.seriesCount} series, ${result.study.sizeBytes} bytes, from ${result.study.source})`,
              detail: {
                studyInstanceUid: result.study.studyInstanceUid,
                sizeBytes: result.study.sizeBytes,
                instances: result.study.instanceCount,
                source: result.study.source,
              },
            },
            {
              package_path: result.study.packagePath,
              study_instance_uid: current.study_instance_uid ?? result.study.studyInstanceUid,
            },
          );
          if (moved.applied) {
            await jobs.enqueue(
              LIFECYCLE_JOBS.upload,
              { orderId },
              { manager, jobKey: `upload:${orderId}` },
            );
          }
        });
        jobs.kick();
        return;
      default:
        return result satisfies never;
    }
  }

  // ---- upload ----

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
      (await this.deferForBudget(
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
        void this.uploadLease
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
        result = await this.deps.imaging.uploader.upload(claimed.upstream_order_id!, path);
      } catch (error) {
        if (isTransient(error)) {
          await this.releaseLease(orderId);
          await writeAuditEvents(dataSource.manager, [
            {
              kind: 'error',
              orderId,
              severity: 'warning',
              actor: 'adapter',
              summary: `upload interrupted (${describe(error)}); it resumes from the parts already sent`,
              detail: { code: errorCode(error), worker: this.workerId },
            },
          ]);
          throw error;
        }
        if (await this.alreadyUploaded(claimed.upstream_order_id!, error)) {
          // A run that crashed after the upload landed but before it was recorded: the
          // upstream refuses a second upload (409) and has left PENDING. Nothing is lost.
          result = { mode: 'single', sizeBytes: 0, partCount: 0, resumedParts: 0 };
        } else {
          await this.endLocally(
            orderId,
            'failed',
            `the upload was refused: ${describe(error)}`,
            'upload-refused',
          );
          return;
        }
      }
      await dataSource.transaction(async (manager) => {
        const current = await loadOrder(manager, orderId, true);
        if (!current) return;
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

  /**
   * Puts the job back (same job key) for when our budget for `endpoint` frees, if a call to it
   * would now wait longer than BUDGET_DEFER_AFTER_MS. Jobs put back together are spread over
   * a few seconds more, so they do not all ask at the same instant; not more, or the budget
   * freed meanwhile would go unused.
   */
  private async deferForBudget(
    endpoint: string,
    task: string,
    payload: Record<string, unknown>,
    jobKey: string,
  ): Promise<boolean> {
    const waitMs = await this.client.budgetWaitMs(endpoint);
    if (waitMs <= BUDGET_DEFER_AFTER_MS) return false;
    const spread = Math.floor(Math.random() * Math.min(5_000, waitMs / 4));
    await this.deps.jobs.enqueue(task, payload, {
      jobKey,
      runAt: new Date(Date.now() + waitMs + spread),
    });
    budgetDeferrals.inc({ job: task });
    return true;
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

  /**
   * Takes the order's upload lease and moves it to `uploading`, unless the same study must
   * be held. The same-study check runs under a per-study advisory lock in the claiming
   * transaction, so of two orders of one study claimed at once the second sees the first
   * already uploading.
   */
  private async claimUpload(orderId: string): Promise<OrderRow | undefined> {
    const { dataSource, settings, jobs } = this.deps;
    let held = false;
    const claimed = await dataSource.transaction(async (manager) => {
      const found = await loadOrder(manager, orderId);
      if (found?.study_instance_uid) {
        // Serializes claims per study across replicas until this transaction ends.
        await this.uploadLease.lockStudy(found.study_instance_uid, manager);
      }
      const order = await this.uploadLease.claim(orderId, this.workerId, settings.leaseMs, manager);
      if (!order) return undefined;
      if (await this.holdForSameStudy(manager, order)) {
        held = true;
        return undefined;
      }
      if (stateOf(order) === 'study-ready') {
        const moved = await transition(
          manager,
          order,
          'uploading',
          { summary: 'upload claimed', detail: { worker: this.workerId } },
          { upload_started_at: 'now' },
        );
        if (!moved.applied) return undefined;
      } else {
        await writeAuditEvents(manager, [
          {
            kind: 'order.updated',
            orderId,
            actor: 'adapter',
            summary: 'upload resumed by another run (the earlier lease lapsed or its run failed)',
            detail: { worker: this.workerId },
          },
        ]);
      }
      return order;
    });
    if (held) jobs.kick();
    return claimed;
  }

  private async releaseLease(orderId: string): Promise<void> {
    await this.uploadLease.release(orderId, this.workerId);
  }

  /**
   * The upstream overwrites a study uploaded again within 5 minutes (contract, Limits): while
   * another of our orders uploads the same Study Instance UID, or completed it less than 5
   * minutes ago, this order's upload is held (back to `study-ready`, audited) and tried again
   * once the window has passed.
   */
  private async holdForSameStudy(manager: EntityManager, order: OrderRow): Promise<boolean> {
    const uid = order.study_instance_uid;
    if (!uid) return false;
    const others = await this.uploadLease.recentUploadsOfStudy(
      uid,
      order.id,
      SAME_STUDY_WINDOW_MS,
      manager,
    );
    if (others.length === 0) return false;
    const until = new Date(
      Math.max(
        ...others.map((o) =>
          o.upload_completed_at
            ? o.upload_completed_at.getTime() + SAME_STUDY_WINDOW_MS + 5_000
            : Date.now() + 30_000,
        ),
      ),
    );
    await this.uploadLease.clear(order.id, manager);
    if (stateOf(order) === 'uploading') {
      await transition(manager, order, 'study-ready', {
        summary: 'upload held back (same study)',
      });
    }
    await writeAuditEvents(manager, [
      {
        kind: 'order.upload-held',
        orderId: order.id,
        severity: 'warning',
        actor: 'adapter',
        summary: `upload held until ${until.toISOString()}: the same study was uploaded for another order less than 5 minutes ago, and the upstream would overwrite it`,
        detail: {
          otherOrders: others.map((o) => o.id),
          until: until.toISOString(),
          studyInstanceUid: uid,
        },
      },
    ]);
    await this.deps.jobs.enqueue(
      LIFECYCLE_JOBS.upload,
      { orderId: order.id },
      { manager, jobKey: `upload:${order.id}`, runAt: until },
    );
    return true;
  }

  /** The package on this machine's disk, or a fresh one (another replica packaged it). */
  private async packagePath(order: OrderRow): Promise<string | undefined> {
    if (order.package_path && (await stat(order.package_path).catch(() => null))?.isFile()) {
      return order.package_path;
    }
    const result = await this.deps.acquirer.acquire({
      orderId: order.id,
      studyInstanceUid: order.study_instance_uid,
      accessionNumber: order.accession_number,
      patientId: order.patient_id,
    });
    if (result.status === 'ready') {
      await this.orders.setPackagePath(order.id, result.study.packagePath);
      return result.study.packagePath;
    }
    await this.releaseLease(order.id);
    if (result.status === 'failed') {
      await this.endLocally(
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
      { jobKey: `upload:${order.id}`, runAt: new Date(Date.now() + result.retryAfterMs) },
    );
    return undefined;
  }

  // ---- follow ----

  /**
   * One upstream status seen by the poller. The status-mapping row decides our state; the
   * row used is audited with its version, and handed to the publishing side on the same
   * transaction. Terminal rows and rows with an attachment fetch their documents once.
   */
  async applyUpstreamStatus(
    orderId: string,
    status: UpstreamStatus,
    context: { qcBypassPossible: boolean },
  ): Promise<boolean> {
    const { dataSource, jobs, events } = this.deps;
    let fetchDocs: StatusRowKey | undefined;
    let batchCheck: string | null = null;
    const changed = await dataSource.transaction(async (manager) => {
      const order = await loadOrder(manager, orderId, true);
      if (!order) return false;
      const row = statusRow(status, {
        qcBypassPossible: context.qcBypassPossible,
        cancelRequestedByOrderer: order.cancel_requested_at !== null,
      });
      const previousState = stateOf(order);
      if (order.upstream_status === status && !(status === 'QC_FAILED' && row.terminal)) {
        return false;
      }
      const moved = await transition(
        manager,
        order,
        row.orderState,
        {
          summary: `upstream ${status} (${row.note})`,
          detail: {
            upstreamStatus: status,
            previousUpstreamStatus: order.upstream_status,
            mappingRow: row.key,
            mappingVersion: STATUS_MAPPING_VERSION,
            taskStatus: row.task.status,
            publish: row.publish,
          },
        },
        { upstream_status: status, upstream_status_at: 'now' },
      );
      if (!moved.applied) {
        // Remember the status anyway, so an impossible move is reported once, not every cycle.
        await this.orders.recordUpstreamStatus(orderId, status, manager);
        return false;
      }
      await events.statusChanged(manager, {
        order: snapshot(order),
        previousState,
        state: row.orderState,
        upstreamStatus: status,
        row,
        mappingVersion: STATUS_MAPPING_VERSION,
        qcBypass: order.qc_bypass,
      });
      if (row.terminal || row.attach) {
        fetchDocs = row.key;
        await jobs.enqueue(
          LIFECYCLE_JOBS.fetchDocuments,
          { orderId, upstreamStatus: status, rowKey: row.key },
          { manager, jobKey: `documents:${orderId}:${row.key}` },
        );
      }
      if (row.terminal && order.upstream_batch_id) batchCheck = order.upstream_batch_id;
      return true;
    });
    if (fetchDocs || batchCheck) jobs.kick();
    if (batchCheck) await this.checkBatchComplete(batchCheck);
    return changed;
  }

  /**
   * Results, failure or QC reports of a status, fetched once. They are stored in one
   * transaction with the publishing side's `documentsStored`, so a stored document means its
   * publications are durable too: the poller acknowledges upstream reports (`POST /reports`)
   * only for documents stored here.
   *
   * `order_documents.upstream_status` holds the mapping row key: the upstream status itself,
   * except for QC_FAILED's two rows, so that the final QC verdict stores (and publishes) its
   * QC report even when the bypassable row already stored one.
   */
  async fetchDocuments(
    orderId: string,
    upstreamStatus: string,
    rowKey: StatusRowKey,
  ): Promise<void> {
    const { dataSource, events } = this.deps;
    const order = await loadOrder(dataSource.manager, orderId);
    if (!order?.upstream_order_id) return;
    const storedAs: string = rowKey;
    const have = await this.documents.storedFor(orderId, storedAs);
    const wanted = documentsFor(rowKey).filter(
      (d) => !have.some((h) => h.kind === d.kind && h.report_type === d.reportType),
    );
    if (wanted.length === 0) return;
    const first = wanted[0]!.kind;
    const firstCall =
      first === 'results' ? '/results' : first === 'failure' ? '/failure-report' : '/qc-report';
    if (
      await this.deferForBudget(
        firstCall,
        LIFECYCLE_JOBS.fetchDocuments,
        { orderId, upstreamStatus, rowKey },
        `documents:${orderId}:${rowKey}`,
      )
    ) {
      return;
    }
    const ref = { orderId: order.upstream_order_id };
    const fetched: Array<{
      kind: StoredDocument['kind'];
      reportType: string;
      body: Buffer;
      contentType: string;
    }> = [];
    const missing: string[] = [];
    for (const doc of wanted) {
      try {
        if (doc.kind === 'results') {
          const d = await this.client.getResults(ref, doc.reportType as 'JSON');
          fetched.push({ ...doc, body: d.body, contentType: d.contentType });
        } else if (doc.kind === 'failure') {
          const d = await this.client.getFailureReport(ref, doc.reportType as 'JSON');
          fetched.push({ ...doc, body: d.body, contentType: d.contentType });
        } else {
          const qc = await this.client.getQcReport(order.upstream_order_id, 'results', 'latest');
          fetched.push({
            ...doc,
            body: Buffer.from(JSON.stringify({ round: qc.round, report: qc.report })),
            contentType: 'application/json',
          });
        }
      } catch (error) {
        if (isTransient(error)) throw error;
        missing.push(`${doc.kind} ${doc.reportType}: ${describe(error)}`);
      }
    }
    await dataSource.transaction(async (manager) => {
      const stored: StoredDocument[] = [];
      for (const doc of fetched) {
        const row = await this.documents.insertOnce(
          {
            orderId,
            storedAs,
            kind: doc.kind,
            reportType: doc.reportType,
            contentType: doc.contentType,
            body: doc.body,
          },
          manager,
        );
        if (row) {
          stored.push({
            id: String(row.id),
            kind: doc.kind,
            reportType: doc.reportType,
            contentType: doc.contentType,
          });
        }
      }
      await this.orders.setDocumentsFetchedFor(orderId, storedAs, manager);
      await writeAuditEvents(manager, [
        {
          kind: 'order.documents-fetched',
          orderId,
          severity: missing.length > 0 ? 'warning' : 'info',
          actor: 'adapter',
          summary:
            `${stored.length} document(s) stored for ${upstreamStatus}` +
            (missing.length > 0 ? `; not available: ${missing.join('; ')}` : ''),
          detail: {
            upstreamStatus,
            documents: stored.map((d) => `${d.kind}/${d.reportType}`),
            bytes: fetched.reduce((n, d) => n + d.body.length, 0),
            missing,
          },
        },
      ]);
      if (stored.length > 0) {
        await events.documentsStored(manager, {
          order: snapshot(order),
          upstreamStatus,
          documents: stored,
        });
      }
    });
  }

  private async checkBatchComplete(batchId: string): Promise<void> {
    // Every order of the placer group counts, placed or not yet: a member still waiting to be
    // placed would otherwise be missing from a report fetched too early.
    if ((await this.batches.openMemberCount(batchId)) === 0) {
      await this.deps.jobs.enqueue(
        LIFECYCLE_JOBS.fetchBatchReport,
        { batchId },
        { jobKey: `batch-report:${batchId}` },
      );
    }
  }

  /** The aggregated report of a batch, once every member is terminal. */
  async fetchBatchReport(batchId: string): Promise<void> {
    const { dataSource, events } = this.deps;
    const batch = await this.batches.findByBatchId(batchId);
    if (!batch || batch.report_fetched_at) return;
    let doc;
    try {
      doc = await this.client.getBatchReport(batchId, 'JSON');
    } catch (error) {
      if (isTransient(error)) throw error;
      this.deps.logger.warn({ batchId, code: errorCode(error) }, 'batch report not available');
      return;
    }
    await dataSource.transaction(async (manager) => {
      await this.batches.storeReport(batchId, doc.body, doc.contentType, manager);
      const members = await this.orders.idsOfBatch(batchId, manager);
      await writeAuditEvents(
        manager,
        members.map((m) => ({
          kind: 'order.batch' as const,
          orderId: m.id,
          actor: 'adapter',
          summary: `aggregated report of placer group ${batch.placer_group_number} stored`,
          detail: { batchId },
        })),
      );
      await events.batchReportStored(manager, {
        sender: batch.sender,
        placerGroupNumber: batch.placer_group_number,
        batchId,
        orderIds: members.map((m) => m.id),
      });
    });
  }

  // ---- cancel ----

  /** Our REST API's cancel (HL7 and FHIR cancels come through the intake). */
  async requestCancel(orderId: string, reason: string, actor: string): Promise<void> {
    const { dataSource, jobs } = this.deps;
    if (!reason.trim()) throw new OrderLifecycleError('reason_required', 'a reason is required');
    await dataSource.transaction(async (manager) => {
      const order = await loadOrder(manager, orderId, true);
      if (!order) throw new OrderLifecycleError('order_not_found', 'no such order');
      if (isTerminal(stateOf(order))) {
        throw new OrderLifecycleError('order_ended', `the order is already ${order.state}`, {
          state: order.state,
        });
      }
      await this.orders.requestCancel(orderId, `API: ${reason}`, manager);
      await writeAuditEvents(manager, [
        {
          kind: 'order.cancel-requested',
          orderId,
          actor,
          summary: `cancel requested by ${actor}`,
          detail: { reason, via: 'api', stateAtRequest: order.state },
        },
      ]);
      await jobs.enqueue(ORDER_JOBS.cancel, { orderId }, { manager, jobKey: `cancel:${orderId}` });
    });
    jobs.kick();
  }

  /** `order.cancel-upstream`: cancels upstream (if placed) and ends the order as cancelled. */
  async cancelUpstream(orderId: string): Promise<void> {
    const { dataSource } = this.deps;
    const order = await loadOrder(dataSource.manager, orderId);
    if (!order || isTerminal(stateOf(order))) return;
    if (!order.upstream_order_id) {
      // Not placed yet: the place job sees cancel_requested_at and ends it; if placing is
      // under way it will enqueue this job again once the upstream id is known.
      if (stateOf(order) === 'received' && order.place_attempted_at === null) {
        await this.endLocally(
          orderId,
          'cancelled',
          'cancelled before it was placed upstream',
          null,
        );
      }
      return;
    }
    try {
      await this.client.cancelOrder(order.upstream_order_id);
    } catch (error) {
      if (isTransient(error)) throw error;
      if (error instanceof ImagingClientError && error.code === 'conflict') {
        // Already terminal upstream: its real status decides.
        const status = await this.client.getStatus({ orderId: order.upstream_order_id });
        await this.applyUpstreamStatus(orderId, status.status, { qcBypassPossible: false });
        return;
      }
      throw error;
    }
    await this.applyUpstreamStatus(orderId, 'CANCELLED', { qcBypassPossible: false });
    await this.deps.imaging.uploader.abandon(order.upstream_order_id).catch(() => undefined);
    await this.deps.acquirer.release(orderId).catch(() => undefined);
  }

  // ---- QC bypass ----

  /**
   * A clinician's decision on a QC rejection (our REST API, the FHIR Task operation, the
   * audit page): who and why are recorded and sent upstream; a request can be withdrawn
   * while the verdict is pending.
   */
  async decideQcBypass(
    orderId: string,
    decision: { reason?: string; withdraw?: boolean; actor: string },
  ): Promise<QcBypassDecision> {
    const { dataSource } = this.deps;
    const order = await loadOrder(dataSource.manager, orderId);
    if (!order) throw new OrderLifecycleError('order_not_found', 'no such order');
    const reason = decision.reason?.trim() ?? '';
    if (decision.withdraw) {
      if (order.qc_bypass?.status !== 'requested' || stateOf(order) !== 'qc-hold') {
        throw new OrderLifecycleError(
          'no_bypass_pending',
          'there is no pending QC bypass request to withdraw',
        );
      }
    } else {
      if (!reason) {
        throw new OrderLifecycleError('reason_required', 'a QC bypass needs a reason');
      }
      if (stateOf(order) !== 'qc-hold' || !order.upstream_order_id) {
        throw new OrderLifecycleError(
          'not_on_qc_hold',
          `the order is ${order.state}, not held by a QC rejection`,
          { state: order.state },
        );
      }
    }
    try {
      await this.client.requestQcBypass(order.upstream_order_id!, {
        reason: decision.withdraw ? undefined : reason,
        withdraw: decision.withdraw,
      });
    } catch (error) {
      if (isTransient(error)) {
        throw new OrderLifecycleError('upstream_unavailable', 'the upstream is not answering', {
          upstream: errorCode(error),
        });
      }
      throw new OrderLifecycleError(
        'upstream_refused',
        `the upstream refused: ${describe(error)}`,
        { upstream: errorCode(error) },
      );
    }
    const value: QcBypassDecision = {
      status: decision.withdraw ? 'withdrawn' : 'requested',
      by: decision.actor,
      reason: decision.withdraw ? reason || null : reason,
      at: new Date().toISOString(),
    };
    await dataSource.transaction(async (manager) => {
      await this.orders.setQcBypass(orderId, value, manager);
      await writeAuditEvents(manager, [
        {
          kind: 'decision.qc-bypass',
          orderId,
          actor: decision.actor,
          summary: decision.withdraw
            ? `QC bypass request withdrawn by ${decision.actor}`
            : `QC bypass requested by ${decision.actor}: ${reason}`,
          detail: { ...value, upstreamOrderId: order.upstream_order_id },
        },
      ]);
    });
    return value;
  }

  // ---- deadlines and leases (the minute tick) ----

  /** Study deadline, stuck upstream orders, lapsed upload leases. Returns what it did. */
  async sweep(): Promise<{ studyDeadlines: number; stuck: number; leasesResumed: number }> {
    const { jobs, settings } = this.deps;
    const late = await this.orders.pastStudyDeadline();
    for (const o of late) await this.studyDeadlinePassed(o.id);
    const stuck = await this.orders.stuckUpstream(settings.upstreamStuckMs);
    for (const o of stuck) {
      await this.endLocally(
        o.id,
        'failed',
        `the upstream order stayed ${o.upstream_status} longer than ${Math.round(settings.upstreamStuckMs / 3_600_000)} h`,
        'upstream-stuck',
      );
    }
    const lapsed = await this.uploadLease.lapsed();
    for (const o of lapsed) {
      // A new job even if a dead worker's job still holds the key (graphile-worker then
      // creates a new job and clears the old one's key).
      await jobs.enqueue(LIFECYCLE_JOBS.upload, { orderId: o.id }, { jobKey: `upload:${o.id}` });
    }
    return { studyDeadlines: late.length, stuck: stuck.length, leasesResumed: lapsed.length };
  }

  private async studyDeadlinePassed(orderId: string): Promise<void> {
    await this.endLocally(
      orderId,
      'failed',
      `no usable study arrived within ${Math.round(this.deps.settings.studyDeadlineMs / 60_000)} minutes`,
      'study-deadline',
    );
  }

  /**
   * Ends an order without an upstream status (deadline, unusable study, refusal, cancel
   * before placing). With an alert code the end is an error an operator sees (audit
   * `order.alert`, error log). A placed upstream order is cancelled so it does not linger.
   */
  async endLocally(
    orderId: string,
    to: Extract<OrderState, 'failed' | 'cancelled'>,
    reason: string,
    alert: string | null,
  ): Promise<void> {
    const { dataSource, events } = this.deps;
    let upstreamToCancel: string | null = null;
    let ended = false;
    await dataSource.transaction(async (manager) => {
      const order = await loadOrder(manager, orderId, true);
      if (!order || isTerminal(stateOf(order))) return;
      const moved = await transition(
        manager,
        order,
        to,
        { summary: reason, severity: alert ? 'error' : 'info', detail: { alert, reason } },
        { last_error: alert ? reason : null, alert, lease_owner: null, lease_until: null },
      );
      if (!moved.applied) return;
      ended = true;
      if (alert) {
        await writeAuditEvents(manager, [
          {
            kind: 'order.alert',
            orderId,
            severity: 'error',
            actor: 'adapter',
            summary: `${alert}: ${reason}`,
            detail: { alert, previousState: moved.from },
          },
        ]);
      }
      await events.endedLocally(manager, { order: snapshot(order), state: to, reason, alert });
      if (order.upstream_order_id && phaseOf(moved.from) !== 'ended') {
        upstreamToCancel = order.upstream_order_id;
      }
    });
    if (alert && ended) {
      orderAlerts.inc({ alert });
      this.deps.logger.error({ orderId, alert }, 'order ended with an alert');
    }
    await this.deps.acquirer.release(orderId).catch(() => undefined);
    if (upstreamToCancel) {
      await this.client.cancelOrder(upstreamToCancel).catch((error: unknown) => {
        this.deps.logger.warn(
          { orderId, code: errorCode(error) },
          'upstream order of an ended order not cancelled',
        );
      });
    }
  }
}

function documentsFor(
  rowKey: StatusRowKey,
): Array<{ kind: StoredDocument['kind']; reportType: string }> {
  switch (rowKey) {
    case 'DELIVERED':
      return [
        { kind: 'results', reportType: 'JSON' },
        { kind: 'results', reportType: 'PDF' },
      ];
    case 'FAILED':
    case 'PREPROCESSING_FAILED':
      return [
        { kind: 'failure', reportType: 'JSON' },
        { kind: 'failure', reportType: 'PDF' },
      ];
    case 'QC_FAILED_BYPASSABLE':
    case 'QC_FAILED_FINAL':
      return [{ kind: 'qc', reportType: 'results' }];
    case 'RECEIVED':
    case 'QUEUED':
    case 'PENDING':
    case 'ELIGIBILITY_CHECK_RUNNING':
    case 'QC_PASSED':
    case 'PREPROCESSING':
    case 'ANALYSIS_RUNNING':
    case 'QC_BYPASS':
    case 'IN_REVIEW':
    case 'CANCELLED':
    case 'EXPIRED':
      return [];
    default:
      return rowKey satisfies never;
  }
}

function sameProducts(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((p, i) => p === b[i]);
}

/**
 * Retried by the job queue (with backoff) rather than ending the order: anything that is not
 * the upstream's considered answer about this order (database, network, exhausted retries),
 * and the answers that are about us, not the order: a retired API version (an operator must
 * migrate; /health says so) and refused credentials.
 */
const RETRY_LATER = new Set(['retired', 'unauthorized']);

function isTransient(error: unknown): boolean {
  return !(error instanceof ImagingClientError) || error.transient || RETRY_LATER.has(error.code);
}

function errorCode(error: unknown): string {
  return error instanceof ImagingClientError ? error.code : 'error';
}

function describe(error: unknown): string {
  if (error instanceof ImagingClientError) {
    const upstream = error.upstreamError ? ` (${JSON.stringify(error.upstreamError)})` : '';
    return `${error.code} on ${error.operation}${upstream}`.slice(0, 500);
  }
  return (error as Error).message;
}
