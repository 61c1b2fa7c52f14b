import { knownPhiOf } from '../../audit/phi-known-values';
import type { EntityManager } from 'typeorm';
import { writeAuditEvents } from '../../persistence/audit-event.repository';
import { leftOutSummary, upstreamMetadataOf } from '../../mappings/upstream-metadata';
import type { BudgetDeferral } from '../budget-deferral';
import { LIFECYCLE_JOBS } from '../lifecycle-jobs';
import { ORDER_JOBS } from '../intake.model';
import { isTerminal } from '../../domain/order-state';
import { loadOrder, stateOf, transition, type OrderRow } from '../order-transitions';
import { describe, errorCode, isTransient } from '../upstream-errors';
import type { EndLocallyUseCase } from './end-locally.use-case';
import type { LifecycleDeps } from './lifecycle-deps';
import { withLockedOrder } from './locked-order';

/** `order.place-upstream`: creates the upstream order (and joins its placer group's batch). */
export class PlaceUpstreamUseCase {
  constructor(
    private readonly deps: LifecycleDeps,
    private readonly ending: EndLocallyUseCase,
    private readonly budget: BudgetDeferral,
  ) {}

  private get client() {
    return this.deps.imaging.client;
  }

  async placeUpstream(orderId: string): Promise<void> {
    const { dataSource } = this.deps;
    const order = await loadOrder(dataSource.manager, orderId);
    if (!order || stateOf(order) !== 'received') return;
    if (order.cancel_requested_at) {
      const checked = order.place_attempted_at === null || (await this.cancelLostCreate(order));
      if (checked) await this.ending.cancelledBeforePlacing(orderId);
      else {
        // The upstream cannot be asked now (down, unreachable): the orderer's cancel is
        // answered all the same, not held until it is back (before: the place job retried the
        // lookup for hours and the RIS never got its CR); the analyst is told an upstream order
        // a lost create made may still run.
        await this.ending.endLocally(
          orderId,
          'cancelled',
          'cancelled before it was placed upstream; whether an earlier create whose answer was lost made an upstream order could not be checked (the upstream was unreachable)',
          'upstream-cancel-unconfirmed',
        );
      }
      return;
    }
    const products = order.request.products;
    if (order.placer_group_number) {
      const batch = await this.findBatch(dataSource.manager, order);
      if (batch && !sameProducts(batch.products, products)) {
        await this.ending.endLocally(
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
    if (
      await this.budget.deferForBudget(firstCall, ORDER_JOBS.place, { orderId }, `place:${orderId}`)
    ) {
      return;
    }
    // The first attempt reads the request again as it marks the attempt (one statement, under
    // the row lock): a change of products that came since the read above is what is placed,
    // and one that comes after it is refused by the intake (the order may run upstream now).
    const request = previouslyAttempted
      ? order.request
      : ((await this.deps.orders.markPlaceAttempted(orderId)) ?? order.request);
    let upstreamOrderId: string;
    let recovered: boolean;
    const { metadata, leftOut, changed } = upstreamMetadataOf(request, {
      sandboxOutcomeFromNotes: this.deps.settings.sandboxOutcomeFromNotes,
    });
    try {
      const created = await this.client.createOrder(metadata, {
        correlationId: order.id,
        previouslyAttempted,
        attemptedSince: order.place_attempted_at?.getTime(),
        // Upstream orders we already hold for other orders are not this one's lost create;
        // looked up in both cases of a UUID, as the upstream may list them in another case
        // than its create answered (the client compares by upstreamOrderIdKey).
        knownElsewhere: async (ids) =>
          new Set(
            await this.deps.orders.upstreamOrderIdsHeldElsewhere(
              [...new Set(ids.flatMap((id) => [id, id.toLowerCase(), id.toUpperCase()]))],
              orderId,
            ),
          ),
      });
      upstreamOrderId = created.orderId;
      recovered = created.recovered;
    } catch (error) {
      if (isTransient(error)) {
        // Retried by the job queue (bounded attempts, growing waits). The order waits "to be
        // placed upstream"; without this the timeline would not say why (the calls carry no
        // upstream order yet, so their `upstream.call` events are not the order's).
        await writeAuditEvents(dataSource.manager, [
          {
            kind: 'error',
            orderId,
            severity: 'warning',
            actor: 'adapter',
            summary: `not placed upstream yet (${describe(error, knownPhiOf(order.request, order.retired_patient_identifiers))}); tried again later`,
            detail: { code: errorCode(error) },
          },
        ]);
        throw error;
      }
      await this.ending.endLocally(
        orderId,
        'failed',
        `the upstream refused the order: ${describe(error, knownPhiOf(order.request, order.retired_patient_identifiers))}`,
        'upstream-refused',
      );
      return;
    }
    let batchId: string | null = null;
    if (order.placer_group_number) {
      batchId = await this.joinBatch({ ...order, request }, upstreamOrderId);
    }
    let cancelRaced = false;
    let endedMeanwhile = false;
    await withLockedOrder(dataSource, orderId, async (manager, current) => {
      // Ended while the create was under way (a cancel that ran the place job again, a
      // sweep): the upstream order just made belongs to no live order of ours.
      endedMeanwhile = isTerminal(stateOf(current));
      const moved = await transition(
        manager,
        current,
        'placed',
        {
          summary: recovered
            ? 'upstream order found again by our correlation id (created by an earlier attempt)'
            : 'upstream order created with its metadata',
          detail: { upstreamOrderId, recovered, batchId, products: request.products },
        },
        {
          upstream_order_id: upstreamOrderId,
          upstream_status: 'PENDING',
          upstream_status_at: 'now',
          placed_at: 'now',
          study_deadline_at: new Date(this.deps.clock.now() + this.deps.settings.studyDeadlineMs),
          ...(batchId ? { upstream_batch_id: batchId } : {}),
        },
      );
      if (!moved.applied) return;
      if (leftOut.length > 0 || changed.length > 0) {
        // The analyst reads what the upstream was not given (the study's values fill those keys).
        await writeAuditEvents(manager, [
          {
            kind: 'error',
            orderId,
            severity: 'warning',
            actor: 'adapter',
            summary: leftOutSummary(leftOut, changed),
            detail: { leftOut, changed, upstreamOrderId },
          },
        ]);
      }
      cancelRaced = current.cancel_requested_at !== null;
      if (!cancelRaced && JSON.stringify(current.request) !== JSON.stringify(request)) {
        // A change (XO, FHIR update, ADT) came while the create was under way: its metadata
        // job found no upstream order and left it to the create, which carried the request as
        // read before. It is sent now.
        await this.deps.jobs.enqueue(
          ORDER_JOBS.updateMetadata,
          { orderId },
          { manager, jobKey: `metadata:${orderId}` },
        );
      }
      await this.deps.jobs.enqueue(
        cancelRaced ? ORDER_JOBS.cancel : LIFECYCLE_JOBS.acquire,
        { orderId },
        { manager, jobKey: cancelRaced ? `cancel:${orderId}` : `acquire:${orderId}` },
      );
    });
    if (endedMeanwhile) {
      await this.client.cancelOrder(upstreamOrderId).catch((error: unknown) => {
        this.deps.logger.warn(
          { orderId, code: errorCode(error) },
          'upstream order created for an order that ended meanwhile not cancelled',
        );
      });
      return;
    }
    this.deps.jobs.kick();
  }

  /**
   * A cancel reached an order whose earlier create may have reached the upstream with its
   * answer lost (a dropped connection, a timeout): that upstream order, found by our
   * correlation id, is cancelled too. Left, it sat upstream PENDING, never known to us.
   * False when the upstream could not be asked (a transient failure of the lookup); a
   * failure to cancel what was found is thrown (the job tries again); a refusal is noted.
   */
  private async cancelLostCreate(order: OrderRow): Promise<boolean> {
    let upstreamOrderId: string | null | undefined;
    try {
      upstreamOrderId = await this.client.findOrderByCorrelationId(
        order.id,
        order.place_attempted_at?.getTime(),
        async (ids) => new Set(await this.deps.orders.upstreamOrderIdsHeldElsewhere(ids, order.id)),
      );
    } catch (error) {
      if (isTransient(error)) return false;
      throw error;
    }
    if (!upstreamOrderId) return true;
    let outcome: string;
    try {
      await this.client.cancelOrder(upstreamOrderId);
      outcome = 'cancelled upstream';
    } catch (error) {
      if (isTransient(error)) throw error;
      outcome = `not cancelled upstream (${describe(error, knownPhiOf(order.request, order.retired_patient_identifiers))})`;
    }
    await writeAuditEvents(this.deps.dataSource.manager, [
      {
        kind: outcome === 'cancelled upstream' ? 'order.updated' : 'error',
        orderId: order.id,
        severity: outcome === 'cancelled upstream' ? 'info' : 'warning',
        actor: 'adapter',
        summary: `the upstream order an earlier create made (its answer was lost) was ${outcome}`,
        detail: { upstreamOrderId, cancelled: outcome === 'cancelled upstream' },
      },
    ]);
    return true;
  }

  private async findBatch(
    manager: EntityManager,
    order: OrderRow,
  ): Promise<{ batch_id: string | null; products: string[] } | undefined> {
    return this.deps.batches.findByGroup(order.sender ?? '', order.placer_group_number, manager);
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
      await this.deps.batches.insertIfAbsent(sender, group, order.request.products, manager);
      const existing = await this.deps.batches.lockBatchId(sender, group, manager);
      if (existing) return existing;
      const created = await this.client.createBatch(order.request.products);
      await this.deps.batches.setBatchId(sender, group, created.batchId, manager);
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
      const reason = `the upstream refused to add the order to the batch of placer group ${group}: ${describe(error, knownPhiOf(order.request, order.retired_patient_identifiers))}`;
      await this.deps.orders.setLastError(order.id, reason);
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
}

function sameProducts(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((p, i) => p === b[i]);
}
