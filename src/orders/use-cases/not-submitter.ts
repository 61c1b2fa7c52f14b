import { AuditEventRepository, writeAuditEvents } from '../../persistence/audit-event.repository';
import type { LifecycleDeps } from './lifecycle-deps';

type Refused = 'cancel' | 'qc-bypass' | 'qc-bypass-withdraw';

/** How long after the refusal its audit event is written: the 404 has left by then. */
const AFTER_ANSWER_MS = 250;

/**
 * The order's timeline event of an action our REST API refused because the sender token that
 * asked did not submit the order (answered 404, as an unknown order). For the analyst: which
 * token (its actor, never the token) tried what. No PHI.
 *
 * Written after the answer, not before it: awaited, the write made the 404 for an existing
 * order take 25 ms where an unknown id took 10 ms (30 requests each, embedded PostgreSQL),
 * telling the token which ids exist. Started at once, it still ran beside the answer (1.2 ms
 * slower at the median of 40): it waits `AFTER_ANSWER_MS`. Once per token and action on an
 * order: the token that asks again and again does not fill the order's timeline (30 attempts
 * were 30 warnings).
 */
export function refusedAsNotSubmitter(
  deps: Pick<LifecycleDeps, 'dataSource' | 'logger'>,
  orderId: string,
  actor: string,
  action: Refused,
): void {
  setTimeout(() => {
    record(deps, orderId, actor, action).catch((error: unknown) =>
      deps.logger.warn(
        { orderId, actor, action, err: error instanceof Error ? error.message : String(error) },
        'the audit event of a refused order action was not written',
      ),
    );
  }, AFTER_ANSWER_MS);
}

async function record(
  deps: Pick<LifecycleDeps, 'dataSource'>,
  orderId: string,
  actor: string,
  action: Refused,
): Promise<void> {
  const kind = action === 'cancel' ? 'order.cancel-refused' : 'order.change-refused';
  const attempt = `${actor} ${action}`;
  const what =
    action === 'cancel'
      ? 'cancel'
      : action === 'qc-bypass'
        ? 'QC bypass'
        : 'withdrawal of the QC bypass request';
  await deps.dataSource.transaction(async (manager) => {
    const audit = new AuditEventRepository(manager.connection);
    const first = await audit.firstOfItsKind(
      { orderId, kind, detailKey: 'attempt', detailValue: attempt },
      manager,
    );
    if (!first) return;
    await writeAuditEvents(manager, [
      {
        kind,
        orderId,
        severity: 'warning',
        actor,
        summary: `${what} refused: ${actor} did not submit this order (answered as unknown, 404; recorded once per token and action)`,
        detail: { via: 'api', action, reason: 'not-submitter', attempt },
      },
    ]);
  });
}
