import type { OrderState } from '../../domain/order-state';
import { isTerminal, phaseOf } from '../../domain/order-state';
import { clinicalEndReason } from '../../mappings/local-end-reasons';
import { writeAuditEvents } from '../../persistence/audit-event.repository';
import { orderAlerts } from '../order-metrics';
import { loadOrder, snapshot, stateOf, transition } from '../order-transitions';
import { errorCode } from '../upstream-errors';
import type { LifecycleDeps } from './lifecycle-deps';
import { alertEvent } from '../alert-event';
import { queueUploadAbort } from '../upload-abandonment';

/** Ends an order here, without an upstream status (deadlines, refusals, cancel before placing). */
export class EndLocallyUseCase {
  constructor(private readonly deps: LifecycleDeps) {}

  private get client() {
    return this.deps.imaging.client;
  }

  async studyDeadlinePassed(orderId: string): Promise<void> {
    await this.endLocally(
      orderId,
      'failed',
      `no usable study arrived within ${Math.round(this.deps.settings.studyDeadlineMs / 60_000)} minutes`,
      'study-deadline',
    );
  }

  /** A cancel that came before the order was placed upstream: nothing to cancel there. */
  async cancelledBeforePlacing(orderId: string): Promise<void> {
    await this.endLocally(orderId, 'cancelled', 'cancelled before it was placed upstream', null);
  }

  /**
   * Ends an order without an upstream status (deadline, unusable study, refusal, cancel
   * before placing). With an alert code the end is an error an operator sees (audit
   * `order.alert`, error log). A placed upstream order is cancelled so it does not linger.
   * `reason` is the analyst's (timeline, `last_error`, alert); the clinic is told the
   * clinical sentence of `to` and `alert` (CLINICAL_END_REASONS).
   */
  async endLocally(
    orderId: string,
    to: Extract<OrderState, 'failed' | 'cancelled'>,
    reason: string,
    alert: string | null,
    /** The upstream has just answered a cancel of this order: it is not asked again. */
    options: { upstreamAnswered?: boolean } = {},
  ): Promise<void> {
    const { dataSource, events } = this.deps;
    let upstreamToCancel: string | null = null;
    let uploadToAbandon: string | null = null;
    let ended = false;
    let end = { to, reason, alert };
    await dataSource.transaction(async (manager) => {
      const order = await loadOrder(manager, orderId, true);
      if (!order || isTerminal(stateOf(order))) return;
      if (to === 'failed' && order.cancel_requested_at !== null) {
        // The orderer asked for a cancel while the step that failed was under way (a create
        // or upload refused, a deadline): no result was coming either way, and the clinical
        // answer to a cancel is "cancelled as requested" (ORC-1 CR, Task cancelled), not a
        // failure. The failure is kept on the timeline beside it.
        await writeAuditEvents(manager, [
          {
            kind: 'error',
            orderId,
            severity: 'warning',
            actor: 'adapter',
            summary: `while its cancel was pending: ${reason}`,
            detail: { alert, reason, cancelRequestedAt: order.cancel_requested_at },
          },
        ]);
        end = {
          to: 'cancelled',
          reason: `cancelled as the orderer asked; it had also failed: ${reason}`,
          alert: null,
        };
      }
      const moved = await transition(
        manager,
        order,
        end.to,
        {
          summary: end.reason,
          severity: end.alert ? 'error' : 'info',
          detail: { alert: end.alert, reason: end.reason },
        },
        {
          last_error: end.alert ? end.reason : null,
          alert: end.alert,
          lease_owner: null,
          lease_until: null,
        },
      );
      if (!moved.applied) return;
      ended = true;
      if (end.alert) {
        await writeAuditEvents(manager, [
          alertEvent(orderId, end.alert, end.reason, { previousState: moved.from }),
        ]);
      }
      // The clinic reads a sentence chosen by the end and its alert (src/mappings/
      // local-end-reasons.ts), never `reason`: that holds what only the analyst should read
      // (the upstream's error words, HTTP statuses, upstream status values, attempt counts).
      await events.endedLocally(manager, {
        order: snapshot(order),
        state: end.to,
        reason: clinicalEndReason(end.to, end.alert),
        alert: end.alert,
        alertReason: end.reason,
      });
      if (order.upstream_order_id && phaseOf(moved.from) !== 'ended' && !options.upstreamAnswered) {
        upstreamToCancel = order.upstream_order_id;
      }
      // `study-ready` too: an upload held for the same study goes back there, its parts kept.
      if (order.upstream_order_id && ['study-ready', 'uploading'].includes(moved.from)) {
        // A multipart upload under way will never be completed now (an ended order is never
        // claimed again): its abort is an outbox row written with the end, and its progress
        // dropped, so a run still sending parts finds it gone at its complete. Before, it was
        // one call after the commit, and an upstream that failed it once left it open for good.
        const upstreamOrderId = order.upstream_order_id;
        if (!(await queueUploadAbort(manager, events, { orderId, upstreamOrderId }))) {
          // No row written: no upload open, or publishing disabled on this replica.
          uploadToAbandon = upstreamOrderId;
        }
      }
    });
    if (end.alert && ended) {
      orderAlerts.inc({ alert: end.alert });
      this.deps.logger.error({ orderId, alert: end.alert }, 'order ended with an alert');
    }
    await this.deps.acquirer.release(orderId).catch(() => undefined);
    if (uploadToAbandon) {
      // No outbox here (publishing disabled on this replica): aborted once, best effort
      // (nothing is called when no upload was open).
      await this.deps.imaging.uploader.abandon(uploadToAbandon).catch(() => undefined);
    }
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
