import type { EntityManager } from 'typeorm';
import { writeAuditEvents } from '../persistence/audit-event.repository';
import { LIFECYCLE_JOBS } from './lifecycle-jobs';
import { loadOrder, stateOf, transition, type OrderRow } from './order-transitions';
import type { LifecycleDeps } from './use-cases/lifecycle-deps';

/** The upstream overwrites a study uploaded again within 5 minutes (contract, Limits). */
export const SAME_STUDY_WINDOW_MS = 5 * 60_000;

/** The upload lease of an order (one worker per order across replicas) and the same-study hold. */
export class UploadLease {
  constructor(private readonly deps: LifecycleDeps) {}

  /** Identifies this process in upload leases. */
  private get workerId(): string {
    return this.deps.workerId;
  }

  /**
   * Takes the order's upload lease and moves it to `uploading`, unless the same study must
   * be held. The same-study check runs under a per-study advisory lock in the claiming
   * transaction, so of two orders of one study claimed at once the second sees the first
   * already uploading.
   */
  async claimUpload(orderId: string): Promise<OrderRow | undefined> {
    const { dataSource, settings, jobs } = this.deps;
    let held = false;
    const claimed = await dataSource.transaction(async (manager) => {
      const found = await loadOrder(manager, orderId);
      if (found?.study_instance_uid) {
        // Serializes claims per study across replicas until this transaction ends.
        await this.deps.uploadLease.lockStudy(found.study_instance_uid, manager);
      }
      const order = await this.deps.uploadLease.claim(
        orderId,
        this.workerId,
        settings.leaseMs,
        manager,
      );
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

  async releaseLease(orderId: string): Promise<void> {
    await this.deps.uploadLease.release(orderId, this.workerId);
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
    const others = await this.deps.uploadLease.recentUploadsOfStudy(
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
            : this.deps.clock.now() + 30_000,
        ),
      ),
    );
    await this.deps.uploadLease.clear(order.id, manager);
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
}
