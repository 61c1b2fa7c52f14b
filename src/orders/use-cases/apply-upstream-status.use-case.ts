import { isTerminal } from '../../domain/order-state';
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
