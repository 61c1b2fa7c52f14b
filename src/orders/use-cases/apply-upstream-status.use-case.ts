import { isTerminal } from '../../domain/order-state';
import type { QcBypassDecision } from '../../domain/qc-bypass';
import type { UpstreamStatus } from '../../imaging-spec/imaging-spec';
import { writeAuditEvents } from '../../persistence/audit-event.repository';
import {
  STATUS_MAPPING_VERSION,
  statusRow,
  type StatusRowKey,
} from '../../mappings/status-mapping.table';
import { LIFECYCLE_JOBS } from '../lifecycle-jobs';
import { loadOrder, snapshot, stateOf, transition } from '../order-transitions';
import type { LifecycleDeps } from './lifecycle-deps';

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
      return true;
    });
    if (fetchDocs || batchCheck) jobs.kick();
    if (batchCheck) await this.checkBatchComplete(batchCheck);
    return changed;
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
