import { writeAuditEvents } from '../../persistence/audit-event.repository';
import { errorCode, isTransient } from '../upstream-errors';
import type { LifecycleDeps } from './lifecycle-deps';

/** `order.fetch-batch-report`: a placer group's aggregated report. */
export class FetchBatchReportUseCase {
  constructor(private readonly deps: LifecycleDeps) {}

  private get client() {
    return this.deps.imaging.client;
  }

  /** The aggregated report of a batch, once every member is terminal. */
  async fetchBatchReport(batchId: string): Promise<void> {
    const { dataSource, events } = this.deps;
    const batch = await this.deps.batches.findByBatchId(batchId);
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
      await this.deps.batches.storeReport(batchId, doc.body, doc.contentType, manager);
      const members = await this.deps.orders.idsOfBatch(batchId, manager);
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
}
