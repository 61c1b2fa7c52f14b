import type { z } from 'zod';
import { UPSTREAM_STATUSES, type UpstreamStatus } from '../imaging-spec/imaging-spec';
import type { OrderSummary, UnknownStatusEntry } from './imaging-client.types';
import type { listOrdersSchema } from './upstream-schemas';

/** One entry of a `/list-orders` answer, as the schema lets it through. */
export type ListedOrder = z.infer<typeof listOrdersSchema>['orders'][number];

const KNOWN_STATUSES: ReadonlySet<string> = new Set(UPSTREAM_STATUSES);

/**
 * Sets apart the `/list-orders` entries whose status the contract does not name, so one odd
 * entry never fails the poller or the duplicate lookup; the value is kept for the log and the
 * audit, cut to 64 characters of `[A-Za-z0-9_.-]`.
 */
export function splitByKnownStatus(entries: ListedOrder[]): {
  orders: OrderSummary[];
  unknownStatus: UnknownStatusEntry[];
} {
  const orders: OrderSummary[] = [];
  const unknownStatus: UnknownStatusEntry[] = [];
  for (const o of entries) {
    if (!KNOWN_STATUSES.has(o.status)) {
      unknownStatus.push({
        orderId: o.order_id,
        status: printable(o.status),
      });
      continue;
    }
    orders.push({
      orderId: o.order_id,
      studyUid: o.study_uid,
      status: o.status as UpstreamStatus,
      createdAt: o.created_at,
      updatedAt: o.updated_at,
      batchId: o.batch_id,
    });
  }
  return { orders, unknownStatus };
}

/** An upstream value kept for the log and the audit: 64 characters of `[A-Za-z0-9_.-]`. */
export function printable(value: string): string {
  return value.replace(/[^A-Za-z0-9_.-]/g, '?').slice(0, 64);
}
