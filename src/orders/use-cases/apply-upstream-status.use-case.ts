import type { EntityManager } from 'typeorm';
import { isTerminal } from '../../domain/order-state';
import type { QcBypassDecision } from '../../domain/qc-bypass';
import { CLINICAL_CANCELLED } from '../../mappings/local-end-reasons';
import type { UpstreamStatus } from '../../imaging-spec/imaging-spec';
import { AuditEventRepository, writeAuditEvents } from '../../persistence/audit-event.repository';
import { movesBackwards } from '../../mappings/upstream-status-order';
import {
  STATUS_MAPPING_VERSION,
  statusRow,
  type StatusRow,
  type StatusRowKey,
} from '../../mappings/status-mapping.table';
import { LIFECYCLE_JOBS } from '../lifecycle-jobs';
import { orderAlerts } from '../order-metrics';
import { loadOrder, snapshot, stateOf, transition, type OrderRow } from '../order-transitions';
import type { LifecycleDeps } from './lifecycle-deps';
import { queueUploadAbort } from '../upload-abandonment';
import { alertEvent } from '../alert-event';

/** One upstream status seen by the poller (or a cancel), through the status mapping. */
export class ApplyUpstreamStatusUseCase {
  constructor(private readonly deps: LifecycleDeps) {}

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
    let uploadToAbandon: string | null = null;
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
      if (previousState === 'cancelled' && order.alert === 'upstream-cancel-unconfirmed') {
        // Cancelled here, the upstream never having taken the cancel: still followed.
        const ended = await this.afterUnconfirmedCancel(manager, order, status, row);
        if (ended) {
          fetchDocs = row.key;
          if (order.upstream_batch_id) batchCheck = order.upstream_batch_id;
        }
        return ended;
      }
      if (isTerminal(previousState)) {
        // An ended order's end was published once; a status read before it ended (a poll
        // cycle racing a cancel or a local end) is refused. Before, one mapping to the same
        // end (EXPIRED on a failed order) published a second no-result report, and any other
        // overwrote the order's upstream status.
        await writeAuditEvents(manager, [
          {
            kind: 'order.illegal-transition',
            orderId,
            severity: 'warning',
            actor: 'adapter',
            summary: `refused: the order has ended ${previousState}; upstream ${status} (${row.note}) is not applied`,
            detail: {
              from: previousState,
              to: row.orderState,
              upstreamStatus: status,
              previousUpstreamStatus: order.upstream_status,
              mappingRow: row.key,
              mappingVersion: STATUS_MAPPING_VERSION,
            },
          },
        ]);
        return false;
      }
      // An end is always applied: QC_FAILED off the active list is final (terminal upstream,
      // nothing else will come), even after QC_BYPASS.
      if (!row.terminal && movesBackwards(order.upstream_status, status)) {
        await this.observeStale(manager, order, status, row);
        return false;
      }
      if (order.cancel_requested_at !== null && row.report === 'final') {
        const ended = await this.resultAfterCancel(manager, order, status, row);
        if (ended) {
          fetchDocs = row.key;
          if (order.upstream_batch_id) batchCheck = order.upstream_batch_id;
        }
        return ended;
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
        await this.deps.orders.recordUpstreamStatus(orderId, status, manager);
        return false;
      }
      // A QC rejection is left for analysis only by a bypass: QC_BYPASS itself, or a later
      // status straight after QC_FAILED (QC_BYPASS can last less than a poll interval).
      const bypassed =
        row.key === 'QC_BYPASS' ||
        (order.upstream_status === 'QC_FAILED' &&
          (row.orderState === 'processing' || row.orderState === 'delivered'));
      if (bypassed && order.qc_bypass?.status !== 'requested') {
        // A bypass no one asked for through us (the service's portal, an agent, or after a
        // withdrawal here): the result still carries the QC caveat, so it is recorded as seen.
        const observed: QcBypassDecision = {
          status: 'observed',
          by: 'the analysis service (decided outside this adapter)',
          reason: null,
          at: new Date(this.deps.clock.now()).toISOString(),
        };
        await this.deps.orders.setQcBypass(orderId, observed, manager);
        order.qc_bypass = observed;
        await writeAuditEvents(manager, [
          {
            kind: 'decision.qc-bypass',
            orderId,
            severity: 'warning',
            actor: 'upstream',
            summary: `QC bypass decided outside this adapter (upstream ${order.upstream_status} → ${status}): the result will carry the QC caveat`,
            detail: {
              status: 'observed',
              upstreamStatus: status,
              previousUpstreamStatus: order.upstream_status,
            },
          },
        ]);
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
      if (
        row.terminal &&
        order.upstream_order_id &&
        ['study-ready', 'uploading'].includes(moved.from) &&
        !(await queueUploadAbort(manager, events, {
          orderId,
          upstreamOrderId: order.upstream_order_id,
        }))
      ) {
        // Ended upstream (EXPIRED, FAILED, CANCELLED, a 409 to our cancel) while a multipart
        // upload was open: it will never be completed, and the contract asks it aborted. Before,
        // it stayed open upstream and in imaging_upload_progress. No row written (no upload,
        // or publishing disabled here): aborted once after the commit, best effort.
        uploadToAbandon = order.upstream_order_id;
      }
      return true;
    });
    if (uploadToAbandon) {
      await this.deps.imaging.uploader.abandon(uploadToAbandon).catch(() => undefined);
    }
    if (fetchDocs || batchCheck) jobs.kick();
    if (batchCheck) await this.checkBatchComplete(batchCheck);
    return changed;
  }

  /**
   * A status of an earlier stage than the one applied (`UPSTREAM_STATUS_STAGE`): a stale
   * listing or a poll that raced a later one. Applied, it moved the order back (QC_FAILED
   * after QC_BYPASS put it on hold again, Task on-hold, and a bypass already granted was
   * asked again; QUEUED during analysis told the RIS "scheduled"). It is kept on the timeline
   * as an observation — once per move — and the order keeps its state and upstream status.
   */
  private async observeStale(
    manager: EntityManager,
    order: OrderRow,
    status: UpstreamStatus,
    row: StatusRow & { key: StatusRowKey },
  ): Promise<void> {
    const move = `${order.upstream_status}->${status}`;
    const audit = new AuditEventRepository(manager.connection);
    const first = await audit.firstOfItsKind(
      { orderId: order.id, kind: 'upstream.stale-status', detailKey: 'move', detailValue: move },
      manager,
    );
    if (!first) return;
    await writeAuditEvents(manager, [
      {
        kind: 'upstream.stale-status',
        orderId: order.id,
        severity: 'warning',
        actor: 'adapter',
        summary: `upstream ${status} after ${order.upstream_status}: an earlier stage than the one applied (a stale listing or a raced poll); observed, not applied`,
        detail: {
          move,
          upstreamStatus: status,
          appliedUpstreamStatus: order.upstream_status,
          state: order.state,
          mappingRow: row.key,
          mappingVersion: STATUS_MAPPING_VERSION,
        },
      },
    ]);
  }

  /**
   * A status of an order ended `cancelled` here while the upstream may still run it (alert
   * upstream-cancel-unconfirmed: its cancel job used every attempt, or the upstream's answer
   * did not confirm the cancel). The clinician already heard "cancelled" (ORC-1 CR, Task
   * cancelled), once. A result (DELIVERED) takes the result-after-cancel path: kept for the
   * analyst, not published, no second cancel answer. Any other end (CANCELLED, FAILED, …)
   * means the upstream order no longer runs: recorded, the alert cleared. A status on the
   * way is only recorded.
   */
  private async afterUnconfirmedCancel(
    manager: EntityManager,
    order: OrderRow,
    status: UpstreamStatus,
    row: StatusRow & { key: StatusRowKey },
  ): Promise<boolean> {
    if (order.cancel_requested_at !== null && row.report === 'final') {
      return this.resultAfterCancel(manager, order, status, row, { cancelAnswered: true });
    }
    await this.deps.orders.recordUpstreamStatus(order.id, status, manager);
    if (!row.terminal) return false;
    const alert = 'upstream-cancel-unconfirmed';
    if (await this.deps.orders.clearAlert(order.id, alert, manager)) {
      await writeAuditEvents(manager, [
        {
          kind: 'order.alert-cleared',
          orderId: order.id,
          actor: 'adapter',
          summary: `${alert} cleared: the upstream order ended ${status} (${row.note}); it no longer runs`,
          detail: { alert, upstreamStatus: status, mappingRow: row.key },
        },
      ]);
    }
    return false;
  }

  /**
   * A result (DELIVERED) for an order whose orderer asked for the cancel (HL7 ORC-1 CA, FHIR
   * `revoked`, our REST cancel) before the upstream took it — the cancel job still retrying, or
   * out of attempts against an upstream that failed every time. The clinician was told the
   * order is cancelled (the RIS got ORR CR, the EHR revoked its ServiceRequest): a result
   * published now as if the order were live (Task completed, DiagnosticReport final, ORU F,
   * SR) would be read as an answer to an order no one wants. The order ends `cancelled` as
   * asked (ENDED_LOCALLY_CANCELLED, ORC-1 CR), its upstream status DELIVERED is kept, the
   * reports are fetched and stored for the analyst but never published, and alert
   * `result-after-cancel` lets an analyst decide whether a clinician should see it.
   */
  private async resultAfterCancel(
    manager: EntityManager,
    order: OrderRow,
    status: UpstreamStatus,
    row: StatusRow & { key: StatusRowKey },
    /** The order already ended cancelled here, the clinician told so: not told again. */
    options: { cancelAnswered?: boolean } = {},
  ): Promise<boolean> {
    const alert = 'result-after-cancel';
    const reason = `the analysis service delivered a result after the orderer cancelled the order (cancel requested ${new Date(order.cancel_requested_at!).toISOString()}); the order stays cancelled and the result is kept for the analyst, not published`;
    const moved = await transition(
      manager,
      order,
      'cancelled',
      {
        summary: `upstream ${status} after the orderer's cancel: ${reason}`,
        severity: 'error',
        detail: {
          upstreamStatus: status,
          previousUpstreamStatus: order.upstream_status,
          mappingRow: row.key,
          mappingVersion: STATUS_MAPPING_VERSION,
          published: 'ENDED_LOCALLY_CANCELLED',
          alert,
        },
      },
      {
        upstream_status: status,
        upstream_status_at: 'now',
        alert,
        last_error: reason,
        lease_owner: null,
        lease_until: null,
      },
    );
    if (!moved.applied) {
      await this.deps.orders.recordUpstreamStatus(order.id, status, manager);
      return false;
    }
    await writeAuditEvents(manager, [
      alertEvent(order.id, alert, reason, { upstreamStatus: status, previousState: moved.from }),
    ]);
    if (!options.cancelAnswered) {
      await this.deps.events.endedLocally(manager, {
        order: snapshot(order),
        state: 'cancelled',
        reason: CLINICAL_CANCELLED,
        alert: null,
      });
    }
    await this.deps.events.alertRaised(manager, {
      order: snapshot(order),
      alert,
      reason,
    });
    await this.deps.jobs.enqueue(
      LIFECYCLE_JOBS.fetchDocuments,
      { orderId: order.id, upstreamStatus: status, rowKey: row.key },
      { manager, jobKey: `documents:${order.id}:${row.key}` },
    );
    orderAlerts.inc({ alert });
    this.deps.logger.error({ orderId: order.id, alert }, 'result delivered after a cancel');
    return true;
  }

  private async checkBatchComplete(batchId: string): Promise<void> {
    // Every order of the placer group counts, placed or not yet: a member still waiting to be
    // placed would otherwise be missing from a report fetched too early.
    if ((await this.deps.batches.openMemberCount(batchId)) === 0) {
      await this.deps.jobs.enqueue(
        LIFECYCLE_JOBS.fetchBatchReport,
        { batchId },
        { jobKey: `batch-report:${batchId}` },
      );
    }
  }
}
