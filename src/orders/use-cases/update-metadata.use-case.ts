import { knownPhiOf } from '../../audit/phi-known-values';
import { writeAuditEvents } from '../../persistence/audit-event.repository';
import { isTerminal } from '../../domain/order-state';
import { leftOutSummary, upstreamMetadataOf } from '../../mappings/upstream-metadata';
import { loadOrder, stateOf } from '../order-transitions';
import { describe, errorCode, isTransient } from '../upstream-errors';
import type { LifecycleDeps } from './lifecycle-deps';

/** `order.update-metadata`: sends an order's changed metadata upstream. */
export class UpdateMetadataUseCase {
  constructor(private readonly deps: LifecycleDeps) {}

  private get client() {
    return this.deps.imaging.client;
  }

  /** `PATCH /add-metadata` after the order changed (XO, FHIR update, ADT A08/A40). */
  async updateMetadata(orderId: string): Promise<void> {
    const order = await loadOrder(this.deps.dataSource.manager, orderId);
    // Not placed yet: the create will carry the current metadata.
    if (!order?.upstream_order_id || isTerminal(stateOf(order))) return;
    const { metadata, leftOut, changed } = upstreamMetadataOf(order.request, {
      sandboxOutcomeFromNotes: this.deps.settings.sandboxOutcomeFromNotes,
      // What the order no longer states is taken away upstream too, not kept.
      removeAbsent: true,
    });
    try {
      await this.client.addMetadata({ orderId: order.upstream_order_id }, metadata);
    } catch (error) {
      if (isTransient(error)) throw error;
      await writeAuditEvents(this.deps.dataSource.manager, [
        {
          kind: 'error',
          orderId,
          severity: 'warning',
          actor: 'adapter',
          summary: `changed metadata not accepted upstream: ${describe(error, knownPhiOf(order.request, order.retired_patient_identifiers))}`,
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
      ...(leftOut.length > 0 || changed.length > 0
        ? [
            {
              kind: 'error' as const,
              orderId,
              severity: 'warning' as const,
              actor: 'adapter' as const,
              summary: leftOutSummary(leftOut, changed),
              detail: { leftOut, changed, upstreamOrderId: order.upstream_order_id },
            },
          ]
        : []),
    ]);
  }
}
