import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { AppError } from '../common/app-error';
import { parseInput, revealSchema } from './audit-api.dto';
import type { AuditQueryService } from './audit-query.service';

/**
 * Shared by the API and the page: an admin's reveal is recorded before anything is shown. The
 * reason travels in a POST body (`input`), never in a URL: URLs end up in access logs, proxies
 * and browser history. Without a reveal in `input` (a GET has no input) it is false and nothing
 * is recorded.
 */
export async function resolveReveal(
  query: AuditQueryService,
  req: AuthenticatedRequest,
  input: unknown,
  target: { orderId?: string | null; inboundMessageId?: string | null; what: string },
): Promise<boolean> {
  const { reveal, reason } = parseInput(revealSchema, input ?? {});
  if (!reveal) return false;
  const principal = req.principal!;
  if (principal.role !== 'admin') {
    throw new AppError('forbidden', 'only an admin may reveal unmasked PHI');
  }
  await query.recordReveal({ actor: principal.actor, reason: reason ?? '', ...target });
  return true;
}

/** A GET asking to reveal: refused, the reveal is a POST with the reason in its body. */
export function refuseRevealInUrl(q: Record<string, unknown>, post: string): void {
  if (q.reveal !== undefined || q.reason !== undefined)
    throw new AppError(
      'bad_request',
      `reveal with POST ${post} and {"reason": "…"} in the body; a reason in a URL would be logged`,
    );
}
