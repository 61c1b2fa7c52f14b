import type { EventRow, OrderRow } from './audit-query.service';

/** How an order's progress reads on the API and the page: what it waits for, its upstream status. */

/** What an open order waits for, since when, and until when (its deadline), if it waits. */
export interface Waiting {
  for: string;
  since: string | null;
  /** The deadline after which the adapter ends the order (study) or alerts (upstream). */
  until: string | null;
}

/**
 * Whether the order waits, and for what: placed orders for their study (until the study
 * deadline), processing orders for the upstream and qc-hold orders for a QC decision (until
 * the stuck-order sweep's limit after the last upstream status change).
 */
export function waitingOf(
  o: Pick<
    OrderRow,
    'state' | 'createdAt' | 'placedAt' | 'studyDeadlineAt' | 'upstreamStatusAt' | 'upstreamStatus'
  >,
  upstreamStuckHours: number,
): Waiting | null {
  const plus = (iso: string | null) =>
    iso ? new Date(Date.parse(iso) + upstreamStuckHours * 3_600_000).toISOString() : null;
  switch (o.state) {
    case 'received':
      return { for: 'its placement upstream', since: o.createdAt, until: null };
    case 'placed':
      return {
        for: 'the study',
        since: o.placedAt ?? o.createdAt,
        until: o.studyDeadlineAt,
      };
    case 'processing':
      return {
        for: `the upstream (${o.upstreamStatus ?? 'no status yet'})`,
        since: o.upstreamStatusAt ?? o.placedAt,
        until: plus(o.upstreamStatusAt ?? o.placedAt),
      };
    case 'qc-hold':
      return {
        for: 'a QC decision (bypass, or accept the rejection)',
        since: o.upstreamStatusAt,
        until: plus(o.upstreamStatusAt),
      };
    default:
      return null;
  }
}

/** Upstream statuses after which nothing more happens upstream (imaging-service-api.md). */
const UPSTREAM_FINAL = new Set([
  'DELIVERED',
  'FAILED',
  'PREPROCESSING_FAILED',
  'CANCELLED',
  'EXPIRED',
]);

/**
 * An order that ended here (deadline, refusal, cancel) keeps the last status it polled
 * (often PENDING), while the adapter cancels the upstream order: the `upstream.call` of that
 * cancel says what the upstream order became.
 */
export function upstreamStatusText(
  order: Pick<OrderRow, 'state' | 'upstreamStatus' | 'upstreamOrderId'>,
  timeline: readonly EventRow[],
): string | null {
  const status = order.upstreamStatus;
  if (!order.upstreamOrderId) return status;
  const ended = order.state === 'failed' || order.state === 'cancelled';
  if (!ended || (status && UPSTREAM_FINAL.has(status))) return status;
  const cancel = [...timeline]
    .reverse()
    .find((e) => e.kind === 'upstream.call' && e.detail.operation === 'cancel-order');
  if (cancel?.detail.outcome === 'success') {
    return `CANCELLED (cancelled by the adapter when the order ended here; last polled ${status ?? '–'})`;
  }
  if (cancel) {
    return `${status ?? '–'} (last polled; cancelling the upstream order failed: ${String(cancel.detail.status ?? cancel.detail.outcome)})`;
  }
  return `${status ?? '–'} (last polled before the order ended here)`;
}
