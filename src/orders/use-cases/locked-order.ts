import type { DataSource, EntityManager } from 'typeorm';
import { loadOrder, type OrderRow } from '../order-transitions';

/**
 * Runs `step` in one transaction with the order's row locked (FOR UPDATE), as read under the
 * lock; does nothing when the order is gone.
 */
export async function withLockedOrder(
  dataSource: DataSource,
  orderId: string,
  step: (manager: EntityManager, order: OrderRow) => Promise<void>,
): Promise<void> {
  await dataSource.transaction(async (manager) => {
    const order = await loadOrder(manager, orderId, true);
    if (order) await step(manager, order);
  });
}
