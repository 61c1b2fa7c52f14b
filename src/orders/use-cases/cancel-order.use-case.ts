import { knownPhiOf } from '../../audit/phi-known-values';
import { writeAuditEvents } from '../../persistence/audit-event.repository';
import { isTerminal } from '../../domain/order-state';
import { TERMINAL_UPSTREAM_STATUSES } from '../../imaging-spec/imaging-spec';
import { ImagingClientError } from '../../imaging-client/imaging-client.error';
import { ORDER_JOBS } from '../intake.model';
import { OrderLifecycleError } from '../order-lifecycle.error';
import { loadOrder, stateOf } from '../order-transitions';
import { describe, isTransient } from '../upstream-errors';
import type { ApplyUpstreamStatusUseCase } from './apply-upstream-status.use-case';
import type { EndLocallyUseCase } from './end-locally.use-case';
import type { LifecycleDeps } from './lifecycle-deps';
import { refusedAsNotSubmitter } from './not-submitter';

/** Cancel: our REST API's request, and `order.cancel-upstream` which carries it out. */
export class CancelOrderUseCase {
  constructor(
    private readonly deps: LifecycleDeps,
    private readonly ending: EndLocallyUseCase,
    private readonly status: ApplyUpstreamStatusUseCase,
  ) {}

  private get client() {
    return this.deps.imaging.client;
  }

  private applyUpstreamStatus(
    ...args: Parameters<ApplyUpstreamStatusUseCase['applyUpstreamStatus']>
  ): Promise<boolean> {
    return this.status.applyUpstreamStatus(...args);
  }

  /**
   * Our REST API's cancel (HL7 and FHIR cancels come through the intake). `restrictedTo`: the
   * caller is a sender token, which cancels only the orders it submitted (`orders.sender`);
   * any other order is answered as unknown (its existence not confirmed) and the attempt is
   * on that order's timeline. Admin (undefined) cancels any.
   */
  async requestCancel(
    orderId: string,
    reason: string,
    actor: string,
    restrictedTo?: string,
  ): Promise<void> {
    const { dataSource, jobs } = this.deps;
    if (!reason.trim()) throw new OrderLifecycleError('reason_required', 'a reason is required');
    await dataSource.transaction(async (manager) => {
      const order = await loadOrder(manager, orderId, true);
      if (!order) throw new OrderLifecycleError('order_not_found', 'no such order');
      if (restrictedTo !== undefined && order.sender !== restrictedTo) {
        // answered as an unknown order is, by the same path (a rolled-back transaction)
        refusedAsNotSubmitter(this.deps, orderId, actor, 'cancel');
        throw new OrderLifecycleError('order_not_found', 'no such order');
      }
      if (isTerminal(stateOf(order))) {
        throw new OrderLifecycleError('order_ended', `the order is already ${order.state}`, {
          state: order.state,
        });
      }
      await this.deps.orders.requestCancel(orderId, `API: ${reason}`, manager);
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
        await this.ending.cancelledBeforePlacing(orderId);
      } else if (stateOf(order) === 'received') {
        // A create was tried and failed (or is under way): its job may next run hours from
        // now (back-off, the upstream's Retry-After), and the orderer waited that long for
        // the answer to the cancel. It runs now instead: it sees the cancel, cancels any
        // upstream order a lost create made, and ends the order. A run under way is replaced
        // (graphile-worker adds a new job under the key) and the replacement finds the order
        // placed, or ends it.
        await this.deps.jobs.enqueue(ORDER_JOBS.place, { orderId }, { jobKey: `place:${orderId}` });
        this.deps.jobs.kick();
      }
      return;
    }
    try {
      await this.client.cancelOrder(order.upstream_order_id);
    } catch (error) {
      if (isTransient(error)) throw error;
      if (error instanceof ImagingClientError && error.code === 'invalid_response') {
        await this.unconfirmed(orderId, order.upstream_order_id, error);
        return;
      }
      if (error instanceof ImagingClientError && error.code === 'conflict') {
        // Already terminal upstream: its real status decides. A status still active says the
        // refusal was not that: before, it was applied (no change) and the order, its cancel
        // acknowledged, waited for its study deadline.
        const status = await this.client.getStatus({ orderId: order.upstream_order_id });
        if ((TERMINAL_UPSTREAM_STATUSES as readonly string[]).includes(status.status)) {
          await this.applyUpstreamStatus(orderId, status.status, { qcBypassPossible: false });
          return;
        }
        await this.inconsistent(
          orderId,
          `the upstream refused the cancel as already ended (409) but lists the order as ${status.status}`,
        );
        await this.cancelledUnconfirmed(orderId, 'refused as already ended (409)', status.status);
        return;
      }
      // Any other refusal is the upstream's considered answer (contract, Errors: 4xx are not
      // retried unchanged). Thrown, the job queue would ask again for hours while the order,
      // its cancel requested, neither ended nor went on. The cancel was asked for: it ends
      // here, saying what the upstream answered.
      const gone = error instanceof ImagingClientError && error.code === 'not_found';
      await this.ending.endLocally(
        orderId,
        'cancelled',
        gone
          ? `cancelled here: the upstream does not know the order (${describe(error, knownPhiOf(order.request, order.retired_patient_identifiers))})`
          : `cancelled here, but the upstream refused the cancel (${describe(error, knownPhiOf(order.request, order.retired_patient_identifiers))}) and may still process the order`,
        gone ? null : 'upstream-cancel-refused',
        { upstreamAnswered: true },
      );
      return;
    }
    // An open multipart upload is aborted through the outbox by the end itself (the contract's
    // cancel suspends processing; it does not say the upload ends with it).
    await this.applyUpstreamStatus(orderId, 'CANCELLED', { qcBypassPossible: false });
    await this.deps.acquirer.release(orderId).catch(() => undefined);
  }

  /**
   * A cancel answered 200 with an answer that does not confirm it (another order, another
   * status): the order's real status decides. Terminal upstream (the cancel took effect, or
   * the order ended otherwise): applied as read. Still active: the cancel is not recorded as
   * the upstream's, the order ends cancelled here, and an operator is alerted that the
   * upstream may still process it.
   */
  private async unconfirmed(
    orderId: string,
    upstreamOrderId: string,
    answer: ImagingClientError,
  ): Promise<void> {
    await this.inconsistent(
      orderId,
      `the upstream's answer to the cancel does not confirm it: ${answer.reason}`,
      answer.reason,
    );
    const status = await this.client.getStatus({ orderId: upstreamOrderId });
    if ((TERMINAL_UPSTREAM_STATUSES as readonly string[]).includes(status.status)) {
      await this.applyUpstreamStatus(orderId, status.status, { qcBypassPossible: false });
      return;
    }
    await this.cancelledUnconfirmed(orderId, answer.reason, status.status);
  }

  private async inconsistent(orderId: string, summary: string, finding = summary): Promise<void> {
    await writeAuditEvents(this.deps.dataSource.manager, [
      {
        kind: 'upstream.inconsistent',
        orderId,
        severity: 'warning',
        actor: 'adapter',
        summary,
        detail: { operation: 'cancel-order', finding },
      },
    ]);
  }

  /** Ends the order cancelled here: the upstream did not take the cancel and lists it active. */
  private async cancelledUnconfirmed(
    orderId: string,
    answer: string,
    upstreamStatus: string,
  ): Promise<void> {
    await this.ending.endLocally(
      orderId,
      'cancelled',
      `cancelled here, but the upstream did not confirm the cancel (${answer}) and lists the order as ${upstreamStatus}: it may still process it`,
      'upstream-cancel-unconfirmed',
      { upstreamAnswered: true },
    );
  }
}
