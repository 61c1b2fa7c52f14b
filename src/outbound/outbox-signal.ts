import type { AppConfig } from '../config/app-config';
import { noOrderEvents, type OrderEvents } from '../orders/order-events';
import { OutboxOrderEvents } from './outbox-order-events';
import { outboundSettings } from './outbound.settings';

/**
 * Wakes this process's outbox workers soon after a transaction wrote rows. The hook runs
 * before the commit, so the wake is deferred a little (twice); a wake that comes too early
 * finds nothing, and the poll (OUTBOUND_POLL_MS) is the safety net, also for rows written by
 * other replicas and for replays.
 */
const listeners = new Set<() => void>();

export const outboxSignal = {
  subscribe(listener: () => void): () => void {
    listeners.add(listener);
    return () => listeners.delete(listener);
  },
  notify(): void {
    if (listeners.size === 0) return;
    for (const ms of [5, 40]) {
      setTimeout(() => {
        for (const l of listeners) l();
      }, ms).unref();
    }
  },
};

/** The ORDER_EVENTS implementation for OrdersModule: outbox rows, or nothing when disabled. */
export function outboxOrderEvents(config: AppConfig): OrderEvents {
  if (!config.OUTBOUND_ENABLED) return noOrderEvents;
  return new OutboxOrderEvents(outboundSettings(config), () => outboxSignal.notify());
}
