import { knownPhiOf } from '../../audit/phi-known-values';
import { writeAuditEvents } from '../../persistence/audit-event.repository';
import type { QcBypassDecision } from '../order-events';
import { OrderLifecycleError } from '../order-lifecycle.error';
import { loadOrder, stateOf } from '../order-transitions';
import { describe, errorCode, isTransient } from '../upstream-errors';
import { describeRefusal, upstreamRefusalView } from '../upstream-refusal';
import type { LifecycleDeps } from './lifecycle-deps';
import { refusedAsNotSubmitter } from './not-submitter';

/** A clinician's QC bypass decision, sent upstream and recorded. */
export class QcBypassUseCase {
  constructor(private readonly deps: LifecycleDeps) {}

  private get client() {
    return this.deps.imaging.client;
  }

  /**
   * A clinician's decision on a QC rejection (our REST API, the FHIR Task operation, the
   * audit page): who and why are recorded and sent upstream; a request can be withdrawn
   * while the verdict is pending. `restrictedTo`: the caller is a sender token, which decides
   * only on the orders it submitted (`orders.sender`); any other order is answered as unknown
   * (its existence not confirmed) and the attempt is on that order's timeline.
   */
  async decideQcBypass(
    orderId: string,
    decision: { reason?: string; withdraw?: boolean; actor: string; restrictedTo?: string },
  ): Promise<QcBypassDecision> {
    const { dataSource } = this.deps;
    const order = await loadOrder(dataSource.manager, orderId);
    if (!order) throw new OrderLifecycleError('order_not_found', 'no such order');
    if (decision.restrictedTo !== undefined && order.sender !== decision.restrictedTo) {
      refusedAsNotSubmitter(
        this.deps,
        orderId,
        decision.actor,
        decision.withdraw ? 'qc-bypass-withdraw' : 'qc-bypass',
      );
      throw new OrderLifecycleError('order_not_found', 'no such order');
    }
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
      if (order.cancel_requested_at !== null) {
        // The orderer cancelled it (HL7 CA, FHIR revoked, our REST cancel) and was answered so;
        // its cancel job is still getting it to the upstream. A bypass would set the analysis
        // going again for an order no one wants (before: sent, and the result came back).
        throw new OrderLifecycleError(
          'cancel_requested',
          'the order was cancelled by its orderer; its cancel is still being sent upstream',
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
      // The analyst sees why on the order's timeline; the order stays as it was (a QC
      // rejection on hold is never a result: docs/upstream-assumptions.md, QC bypass refused).
      const refusal = upstreamRefusalView(
        error,
        knownPhiOf(order.request, order.retired_patient_identifiers),
      );
      const why = describeRefusal(
        refusal,
        describe(error, knownPhiOf(order.request, order.retired_patient_identifiers)),
      );
      await writeAuditEvents(this.deps.dataSource.manager, [
        {
          kind: 'upstream.refused',
          orderId,
          severity: 'warning',
          actor: decision.actor,
          summary: decision.withdraw
            ? `withdrawal of the QC bypass request refused by the upstream: ${why}`
            : `QC bypass requested by ${decision.actor} refused by the upstream: ${why}`,
          detail: {
            action: decision.withdraw ? 'qc-bypass-withdraw' : 'qc-bypass',
            upstreamOrderId: order.upstream_order_id,
            refusal,
          },
        },
      ]);
      throw new OrderLifecycleError('upstream_refused', `the upstream refused: ${why}`, {
        upstream: errorCode(error),
        upstreamStatus: refusal?.status,
        upstreamCode: refusal?.upstreamCode,
      });
    }
    const value: QcBypassDecision = {
      status: decision.withdraw ? 'withdrawn' : 'requested',
      by: decision.actor,
      reason: decision.withdraw ? reason || null : reason,
      at: new Date(this.deps.clock.now()).toISOString(),
    };
    await dataSource.transaction(async (manager) => {
      await this.deps.orders.setQcBypass(orderId, value, manager);
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
}
