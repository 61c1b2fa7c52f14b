import {
  type DestinationFiguresRow,
  type DestinationHealthRepository,
  PENDING_COUNT_CAP,
} from '../persistence/destination-health.repository';

/**
 * One destination we deliver to as /health and /metrics show it, from what the outbox knows
 * (no call to the peer): its backlog, its dead letters, and how its last attempts went.
 * Names no URL, host or patient: the reason is a few fixed words (failure-reason.ts).
 */
export interface DestinationHealth {
  destination: string;
  /** `degraded`: the oldest pending delivery is older than the threshold, or dead letters wait. */
  status: 'up' | 'degraded';
  /** Why it is degraded (empty when up). */
  because: Array<'backlog' | 'dead-letters'>;
  pending: number;
  /** True when there are at least `pending` rows (the count stops at PENDING_COUNT_CAP). */
  pendingCapped: boolean;
  oldestPendingSeconds: number | null;
  deadLetters: number;
  consecutiveFailures: number;
  lastSuccessAt: string | null;
  lastFailureAt: string | null;
  lastFailureReason: string | null;
}

/**
 * The health of each configured destination. `degradedAfterSeconds`
 * (OUTBOUND_DEGRADED_AFTER_SECONDS): a destination whose oldest pending row waits longer is
 * `degraded`, as is one with dead letters not replayed (an analyst's to replay, audit page).
 * A few failed attempts alone are not: the backoff is doing its work, and the backlog's age
 * says when it is not enough.
 */
export async function destinationHealth(
  repository: DestinationHealthRepository,
  destinations: readonly string[],
  degradedAfterSeconds: number,
): Promise<DestinationHealth[]> {
  if (destinations.length === 0) return [];
  const rows = await repository.figures(destinations);
  return rows.map((row) => judge(row, degradedAfterSeconds));
}

function judge(row: DestinationFiguresRow, degradedAfterSeconds: number): DestinationHealth {
  const now = new Date(row.now).getTime();
  const oldestPendingSeconds =
    row.oldest_pending_at === null
      ? null
      : Math.max(0, Math.round((now - new Date(row.oldest_pending_at).getTime()) / 1000));
  const because: DestinationHealth['because'] = [];
  if (oldestPendingSeconds !== null && oldestPendingSeconds > degradedAfterSeconds)
    because.push('backlog');
  if (row.dead > 0) because.push('dead-letters');
  return {
    destination: row.destination,
    status: because.length > 0 ? 'degraded' : 'up',
    because,
    pending: row.pending,
    pendingCapped: row.pending >= PENDING_COUNT_CAP,
    oldestPendingSeconds,
    deadLetters: row.dead,
    consecutiveFailures: row.consecutive_failures,
    lastSuccessAt: iso(row.last_success_at),
    lastFailureAt: iso(row.last_failure_at),
    lastFailureReason: row.last_failure_reason,
  };
}

function iso(value: Date | null): string | null {
  return value === null ? null : new Date(value).toISOString();
}
