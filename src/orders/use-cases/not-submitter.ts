import { writeAuditEvents } from '../../persistence/audit-event.repository';
import type { LifecycleDeps } from './lifecycle-deps';

/**
 * The order's timeline event of an action our REST API refused because the sender token that
 * asked did not submit the order (answered 404, as an unknown order). For the analyst: which
 * token (its actor, never the token) tried what. No PHI.
 */
export async function refusedAsNotSubmitter(
  deps: Pick<LifecycleDeps, 'dataSource'>,
  orderId: string,
  actor: string,
  action: 'cancel' | 'qc-bypass' | 'qc-bypass-withdraw',
): Promise<void> {
  const what =
    action === 'cancel'
      ? 'cancel'
      : action === 'qc-bypass'
        ? 'QC bypass'
        : 'withdrawal of the QC bypass request';
  await writeAuditEvents(deps.dataSource.manager, [
    {
      kind: action === 'cancel' ? 'order.cancel-refused' : 'order.change-refused',
      orderId,
      severity: 'warning',
      actor,
      summary: `${what} refused: ${actor} did not submit this order (answered as unknown, 404)`,
      detail: { via: 'api', action, reason: 'not-submitter' },
    },
  ]);
}
