import type { Request } from 'express';
import { sha256Hex } from '../common/hash';
import type { AuthenticatedRequest } from './bearer-auth.guard';

/**
 * Who is calling, without the secret: our credentials carry a role, not a name, so a client
 * is known by a short digest of its bearer token (stable while the token is; never
 * reversible). An order created through the FHIR door records it as its `sender`.
 */
export function senderOf(req: Request): string {
  const token = /^Bearer\s+(\S+)/i.exec(req.headers.authorization ?? '')?.[1] ?? '';
  return `fhir-client:${sha256Hex(token).slice(0, 12)}`;
}

/**
 * The orders a caller may act on (least privilege): a `sender` token only those it submitted
 * (orders whose `sender` is its `senderOf`), so undefined for admin, who acts on every order.
 * An order that came over HL7 has no token (MLLP carries none): its `sender` is MSH-3^MSH-4,
 * never a token's, so only admin acts on it here.
 */
export function ownOrdersOf(req: Request): string | undefined {
  return (req as AuthenticatedRequest).principal?.role === 'sender' ? senderOf(req) : undefined;
}
