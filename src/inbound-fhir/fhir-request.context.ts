import { createHash } from 'node:crypto';
import type { Request } from 'express';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import type { FhirCaller } from './fhir-order.service';
import { readRawBody } from './fhir-http';

/**
 * Who is calling, without the secret: our credentials carry a role, not a name, so a client
 * is known by a short digest of its bearer token (stable while the token is; never
 * reversible). The idempotency of conditional creates is per sender.
 */
export function senderOf(req: Request): string {
  const token = /^Bearer\s+(\S+)/i.exec(req.headers.authorization ?? '')?.[1] ?? '';
  return `fhir-client:${createHash('sha256').update(token).digest('hex').slice(0, 12)}`;
}

export async function callerOf(req: Request, maxBodyBytes: number): Promise<FhirCaller> {
  const body = await readRawBody(req, maxBodyBytes);
  return {
    sender: senderOf(req),
    actor: `fhir-client (${(req as AuthenticatedRequest).principal?.role ?? 'unknown role'})`,
    remoteAddress: req.socket.remoteAddress ?? null,
    raw: body.bytes,
    contentType: body.contentType,
  };
}

/** Absolute URL of a path under /fhir on this server, as the client reached it. */
export function fhirUrl(req: Request, path: string): string {
  return `${req.protocol}://${req.get('host')}/fhir/${path.replace(/^\//, '')}`;
}
